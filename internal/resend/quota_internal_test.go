package resend

import (
	"testing"
	"time"
)

// A daily quota pauses until the next UTC midnight, a monthly one for
// QuotaPause, a rate limit not at all (its headers say).
func TestQuotaPause(t *testing.T) {
	t.Parallel()
	jakarta := time.FixedZone("WIB", 7*3600)
	for _, c := range []struct {
		name string
		now  time.Time
		want time.Duration
	}{
		{"daily_quota_exceeded", time.Date(2026, 3, 2, 18, 30, 0, 0, time.UTC), 5*time.Hour + 30*time.Minute},
		{"daily_quota_exceeded", time.Date(2026, 3, 3, 1, 30, 0, 0, jakarta), 5*time.Hour + 30*time.Minute}, // 18:30 UTC the day before
		{"daily_quota_exceeded", time.Date(2026, 3, 2, 23, 59, 59, 0, time.UTC), time.Minute},
		{"daily_quota_exceeded", time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC), 24 * time.Hour},
		{"monthly_quota_exceeded", time.Date(2026, 3, 2, 18, 30, 0, 0, time.UTC), QuotaPause},
		{"rate_limit_exceeded", time.Date(2026, 3, 2, 18, 30, 0, 0, time.UTC), 0},
	} {
		if got := quotaPause(c.name, c.now); got != c.want {
			t.Errorf("%s at %s: pause %s, want %s", c.name, c.now, got, c.want)
		}
	}
}
