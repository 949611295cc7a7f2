//go:build !chaoslong

package chaos_test

import "time"

// fault is how long a scenario's fault lasts: short in make test.
func fault(short, _ time.Duration) time.Duration { return short }

// size is how many of something a scenario places (or a bound that
// depends on how many): few in make test.
func size[T any](short, _ T) T { return short }
