package httpapi

import (
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/notify"
)

// What the overview says of a budget, from its state alone.
func TestPaceRows(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	cfg := notify.PaceConfig{Rate: 0.5, Burst: 1}
	for _, c := range []struct {
		name string
		pace notify.ProviderPace
		want paceRow
	}{
		{"at its configured rate, no quota", notify.ProviderPace{PaceConfig: cfg, EffectiveRate: 0.5},
			paceRow{Configured: "0.5/s, burst 1", InForce: "0.5/s", Quota: "none"}},
		{"a quota spent, over its own window", notify.ProviderPace{PaceConfig: notify.PaceConfig{Rate: 14, Burst: 1, Quota: 50000, QuotaWindowSeconds: 3600},
			EffectiveRate: 14, QuotaUsed: 50000},
			paceRow{Configured: "14/s, burst 1", InForce: "14/s", Quota: "50,000 of 50,000 (100%) in 1 h", QuotaSpent: true}},
		{"paused for most of an hour", notify.ProviderPace{PaceConfig: cfg, EffectiveRate: 0.5, PausedUntil: now.Add(59*time.Minute + 30*time.Second),
			PauseReason: "http 429, daily_quota_exceeded"},
			paceRow{Configured: "0.5/s, burst 1", InForce: "0.5/s", Paused: "until 03:59:30 UTC (59 min left)", Reason: "http 429, daily_quota_exceeded", Quota: "none"}},
		{"the workers disagree", notify.ProviderPace{PaceConfig: cfg, EffectiveRate: 0.5, ConfigsDiffer: true},
			paceRow{Configured: "0.5/s, burst 1", InForce: "0.5/s", Quota: "none",
				Note: "The workers are not all configured alike (GET /admin/v1/queue shows each one's pace); this is the first one's."}},
		{"unread", notify.ProviderPace{PaceConfig: notify.PaceConfig{Rate: 5, Burst: 1, Quota: 100}, EffectiveRate: 5, Error: "pace resend: read the state: i/o timeout"},
			paceRow{Configured: "5/s, burst 1", InForce: "not known", Quota: "not known", Note: "Its budget could not be read: pace resend: read the state: i/o timeout"}},
	} {
		p := c.pace
		rows := newPaceRows([]notify.ProviderSummary{{Name: "unpaced", Up: true}, {Name: "resend", Up: true, Pace: &p}}, now)
		c.want.Provider = "resend"
		if len(rows) != 1 || rows[0] != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, rows, c.want)
		}
	}
}
