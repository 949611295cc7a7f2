//go:build chaoslong

package chaos_test

import "time"

// fault is how long a scenario's fault lasts: as long as shops meet it,
// in make chaos-long.
func fault(_, long time.Duration) time.Duration { return long }
