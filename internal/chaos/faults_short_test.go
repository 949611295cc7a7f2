//go:build !chaoslong

package chaos_test

import "time"

// fault is how long a scenario's fault lasts: short in make test.
func fault(short, _ time.Duration) time.Duration { return short }
