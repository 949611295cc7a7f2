//go:build chaoslong

package chaos_test

import "time"

// fault is how long a scenario's fault lasts: as long as shops meet it,
// in make chaos-long.
func fault(_, long time.Duration) time.Duration { return long }

// size is how many of something a scenario places: as many as the issue
// that asked for the scenario measured, in make chaos-long.
func size[T any](_, long T) T { return long }
