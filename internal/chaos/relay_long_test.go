//go:build chaoslong

package chaos_test

import (
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/testenv"
)

// issueRelay is issue 42's relay: per 10 s, 20 messages, 15 connections,
// 5 at once; 200 checkouts at once. Postfix's limits allow them in about
// 99 s (20 every 11 s: its window counts whole seconds).
var issueRelay = relayScenario{checkouts: 200, limits: testenv.PostfixOptions{MessageRateLimit: 20, ConnectionRateLimit: 15,
	ConnectionCountLimit: 5, RateTimeUnit: 10 * time.Second}}

// Issue 42's bounds, replayed with the relay's limits above, SMTP_RATE
// unset and two workers: all 200 within 1.5 times what the relay allows
// (150 s), exactly once, none failed or held, the breaker never opened,
// and fewer than 10% of connections refused: each worker keeps its
// connections within a bound it learns (internal/smtp's conns.go), and
// the relay's 450 "too much mail" pauses every worker (a budget without
// a rate, internal/pace).
func TestRelayLimitsOfTheIssue(t *testing.T) {
	t.Parallel()
	c, r := runRelay(t, issueRelay, 660*time.Second)
	if r.sent < issueRelay.checkouts {
		t.Fatalf("%d of %d e-mails at the relay after %.0f s", r.sent, issueRelay.checkouts, r.took.Seconds())
	}
	c.settled(60 * time.Second)
	c.verdict("relay: the issue's Postfix limits", expect{})
	if bound := issueRelay.allows() * 3 / 2; r.took > bound {
		t.Errorf("all sent in %.0f s, want within %.0f s (1.5 times the %.0f s the relay allows)", r.took.Seconds(), bound.Seconds(), issueRelay.allows().Seconds())
	}
	if r.breaker != 0 {
		t.Errorf("a worker's breaker opened %d times", r.breaker)
	}
	if r.refusedConns*10 >= r.connections {
		t.Errorf("the relay refused %d of %d connections, want fewer than 10%%", r.refusedConns, r.connections)
	}
}
