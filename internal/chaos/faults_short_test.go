//go:build !chaoslong

package chaos_test

import "time"

// fault is how long a scenario's fault lasts: short in make test.
func fault(short, _ time.Duration) time.Duration { return short }

// size is how many of something a scenario places: few in make test.
func size(short, _ int) int { return short }
