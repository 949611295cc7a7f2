package pace

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// The signals of an HTTP provider's answers, in Resend's shapes (the
// IETF draft's fields, per second) and others: what is garbled changes
// nothing, what is absurd is capped and says so.
func TestFromHTTP(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 13, 40, 0, 0, time.UTC)
	h := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	for _, tc := range []struct {
		what   string
		status int
		header http.Header
		pause  time.Duration
		rate   float64
		capped bool
		reason string // a part of the reason
	}{
		{"resend, accepted", 200, h("ratelimit-limit", "2", "ratelimit-remaining", "1", "ratelimit-reset", "1"), 0, 2, false, "ratelimit-limit: 2"},
		{"resend, accepted, the last of the window", 200, h("ratelimit-limit", "2", "ratelimit-remaining", "0", "ratelimit-reset", "1"), time.Second, 2, false, "ratelimit-remaining: 0, ratelimit-reset: 1"},
		{"resend, 429", 429, h("ratelimit-limit", "2", "ratelimit-remaining", "0", "ratelimit-reset", "1", "retry-after", "1"), time.Second, 2, false, "http 429, retry-after: 1"},
		{"429, retry-after longer than the reset", 429, h("retry-after", "30", "ratelimit-reset", "1"), 30 * time.Second, 0, false, "retry-after: 30"},
		{"429, ratelimit-reset only", 429, h("ratelimit-reset", "7"), 7 * time.Second, 0, false, "ratelimit-reset: 7"},
		{"429, an HTTP date", 429, h("retry-after", now.Add(90*time.Second).Format(http.TimeFormat)), 90 * time.Second, 0, false, "retry-after: Tue, 01 Dec 2026 13:41:30 GMT"},
		{"429, an HTTP date past", 429, h("retry-after", now.Add(-time.Minute).Format(http.TimeFormat)), DefaultPause, 0, false, "http 429"},
		{"429, nothing said", 429, h(), DefaultPause, 0, false, "http 429"},
		{"429, garbage", 429, h("retry-after", "soon", "ratelimit-reset", "later", "ratelimit-limit", "many"), DefaultPause, 0, false, "retry-after unreadable: soon"},
		{"429, negative", 429, h("retry-after", "-5"), DefaultPause, 0, false, "unreadable: -5"},
		{"429, a year", 429, h("retry-after", "31536000"), MaxPause, 0, true, "pause capped at 1h0m0s"},
		{"429, absurd", 429, h("retry-after", "1e300"), MaxPause, 0, true, "capped"},
		{"429, a date in 2199", 429, h("retry-after", "Sun, 01 Dec 2199 00:00:00 GMT"), MaxPause, 0, true, "capped"},
		{"429, infinite", 429, h("retry-after", "Inf"), DefaultPause, 0, false, "unreadable"},
		{"accepted, remaining 0 without a reset", 200, h("ratelimit-remaining", "0"), 0, 0, false, ""},
		{"accepted, a reset with some remaining", 200, h("ratelimit-remaining", "3", "ratelimit-reset", "5"), 0, 0, false, ""},
		{"accepted, remaining garbled", 200, h("ratelimit-remaining", "none", "ratelimit-reset", "1"), 0, 0, false, ""},
		{"accepted, reset absurd", 200, h("ratelimit-remaining", "0", "ratelimit-reset", "99999999"), MaxPause, 0, true, "capped"},
		{"limit 0", 200, h("ratelimit-limit", "0"), 0, 0, false, ""},
		{"limit negative", 200, h("ratelimit-limit", "-3"), 0, 0, false, ""},
		{"limit NaN", 200, h("ratelimit-limit", "NaN"), 0, 0, false, ""},
		{"limit, draft 02's list", 200, h("ratelimit-limit", "10, 10;w=1, 1000;w=3600"), 0, 10, false, ""},
		{"limit per minute, by the policy", 200, h("ratelimit-limit", "120", "ratelimit-policy", "120;w=60"), 0, 2, false, ""},
		{"limit, the later draft's policy", 200, h("ratelimit-limit", "20", "ratelimit-policy", `"burst";q=20;w=10, "day";q=1000;w=86400`), 0, 2, false, ""},
		{"limit per day is a quota, not a rate", 200, h("ratelimit-limit", "1000", "ratelimit-policy", "1000;w=86400"), 0, 0, false, ""},
		{"503 with retry-after is the breaker's", 503, h("retry-after", "10"), 0, 0, false, ""},
	} {
		s := FromHTTP(tc.status, tc.header, now)
		if s.Pause != tc.pause || s.Rate != tc.rate || s.Capped != tc.capped || !strings.Contains(s.Reason, tc.reason) {
			t.Errorf("%s: %+v, want pause %s, rate %v, capped %v, a reason with %q", tc.what, s, tc.pause, tc.rate, tc.capped, tc.reason)
		}
		if (tc.pause == 0 && tc.rate == 0) != s.IsZero() {
			t.Errorf("%s: IsZero %v", tc.what, s.IsZero())
		}
	}
}

// An SMTP reply the provider classified a pace pauses briefly, saying
// what the relay said; how long a quota lasts is the provider's
// SendError.Pause, not the reply's to judge again here.
func TestFromSMTP(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code     int
		enhanced string
		text     string
	}{
		{421, "4.7.0", "relay.example Error: too many connections from 127.0.0.1"},
		{450, "4.7.1", "Error: too much mail from 127.0.0.1"},
		{454, "", "Throttling failure: Daily message quota exceeded."},
	} {
		s := FromSMTP(tc.code, tc.enhanced, tc.text)
		if s.Pause != DefaultPause || s.Rate != 0 || !strings.Contains(s.Reason, tc.text) {
			t.Errorf("%d %s %s: %+v, want pause %s and a reason that says what the relay said", tc.code, tc.enhanced, tc.text, s, DefaultPause)
		}
	}
	// A reply may quote an address, which no log line and no key holds.
	s := FromSMTP(451, "4.7.1", "<ana@toko.example>: Recipient address rejected: too many messages from you")
	if s.Pause != DefaultPause || strings.Contains(s.Reason, "ana@") || !strings.Contains(s.Reason, "address-redacted") {
		t.Errorf("a reply quoting the recipient: %+v", s)
	}
}
