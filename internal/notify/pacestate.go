package notify

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sekali-dev/sekali/internal/pace"
)

// A provider's pace as operators see it. Each worker publishes the pace
// it sends through a provider at beside that provider's state
// (ProviderState.Pace), and the operators' view reads, at each look, the
// budget every worker shares (internal/pace, in Redis): the rate in
// force, the pause a provider asked for and why, the quota spent. The
// API needs no pace settings of its own: it shows what the live workers
// run with.

// PaceConfig is the pace a worker sends through a provider at: its
// <NAME>_RATE, <NAME>_BURST and <NAME>_DAILY_QUOTA (pace.Config).
type PaceConfig struct {
	Rate  float64 `json:"rate"`            // requests a second the budget is configured to
	Burst int     `json:"burst"`           // requests above the rate one moment may take
	Quota int     `json:"quota,omitempty"` // messages per quota window; 0: none
	// QuotaWindowSeconds is the quota's rolling window; 0: 24 h.
	QuotaWindowSeconds int64 `json:"quota_window_seconds,omitempty"`
}

// PaceConfigOf is c as a worker publishes it.
func PaceConfigOf(c pace.Config) PaceConfig {
	return PaceConfig{Rate: c.Rate, Burst: c.Burst, Quota: c.Quota, QuotaWindowSeconds: int64(c.QuotaWindow / time.Second)}
}

func (c PaceConfig) config() pace.Config {
	return pace.Config{Rate: c.Rate, Burst: c.Burst, Quota: c.Quota, QuotaWindow: time.Duration(c.QuotaWindowSeconds) * time.Second}
}

// ProviderPace is a paced provider's budget now: its configuration (the
// first live worker's, by worker id), and what its budget in Redis says.
type ProviderPace struct {
	PaceConfig
	// ConfigsDiffer: the live workers are not all configured alike (a
	// deploy under way, a worker left with other settings); each one's is
	// in ProviderHealth.Workers.
	ConfigsDiffer bool `json:"configs_differ,omitempty"`
	// EffectiveRate is the rate in force: Rate, or a lower one the
	// provider announced (ratelimit-limit), until LowerUntil.
	EffectiveRate float64   `json:"effective_rate"`
	LowerUntil    time.Time `json:"lower_until,omitzero"`
	// PausedUntil is when the pause the provider asked for ends (a 429's
	// retry-after, a quota's day), zero when there is none; PauseReason
	// is what it said.
	PausedUntil time.Time `json:"paused_until,omitzero"`
	PauseReason string    `json:"pause_reason,omitempty"`
	// QuotaUsed is the messages its quota's window holds (0 without a
	// quota).
	QuotaUsed int `json:"quota_used"`
	// Error: the budget could not be read now; what is above is its
	// configuration alone.
	Error string `json:"error,omitempty"`
}

// Paused reports whether the provider asked every worker to wait.
func (p ProviderPace) Paused() bool { return !p.PausedUntil.IsZero() }

// readPaces fills in the pace of each provider of sums that the live
// workers (states) publish one for, from its budget in Redis.
func readPaces(ctx context.Context, rdb redis.UniversalClient, queue string, sums []ProviderSummary, states []ProviderState) {
	for i := range sums {
		var p *ProviderPace
		for _, s := range states {
			if s.Provider != sums[i].Name || s.Pace == nil {
				continue
			}
			if p == nil {
				p = &ProviderPace{PaceConfig: *s.Pace}
			} else if *s.Pace != p.PaceConfig {
				p.ConfigsDiffer = true
			}
		}
		if p == nil {
			continue
		}
		p.EffectiveRate = p.Rate
		b, err := pace.New(rdb, queue, sums[i].Name, p.config())
		var st pace.State
		if err == nil {
			st, err = b.State(ctx)
		}
		if err != nil {
			p.Error = err.Error()
		} else {
			p.EffectiveRate, p.LowerUntil, p.PausedUntil, p.PauseReason, p.QuotaUsed = st.Rate, st.LearnedUntil, st.PausedUntil, st.PauseReason, st.QuotaUsed
		}
		sums[i].Pace = p
	}
}
