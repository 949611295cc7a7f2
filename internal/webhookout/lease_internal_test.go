package webhookout

import (
	"testing"
	"time"
)

// A pass posts Concurrency messages at a time, each for up to Timeout:
// the lease of what it claims must outlast its last wave, or a second
// dispatcher takes the messages still waiting and posts them beside it.
func TestLeaseOutlastsTheLastWave(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{Batch: 50, Concurrency: 8, Timeout: 10 * time.Second}, // 7 waves
		{Batch: 50, Concurrency: 1, Timeout: time.Second},      // 50 waves
		{Batch: 8, Concurrency: 8, Timeout: 10 * time.Second},  // 1 wave
		{Batch: 1, Concurrency: 0, Timeout: 10 * time.Second},  // unset concurrency: one at a time
	} {
		waves := (cfg.Batch + max(cfg.Concurrency, 1) - 1) / max(cfg.Concurrency, 1)
		if got := lease(cfg); got < cfg.Timeout*time.Duration(waves)+30*time.Second {
			t.Errorf("%+v: lease %s, want at least %d waves of %s and a margin", cfg, got, waves, cfg.Timeout)
		}
	}
}
