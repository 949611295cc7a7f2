package chaos_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/testenv"
)

// A shop's own relay (issue 42): Debian's Postfix on loopback, relaying
// to Mailpit, with anvil's limits on the client (a message rate, a
// connection rate, connections at once), SMTP_RATE unset as a new user
// has it, and two workers at their defaults. A checkout burst is many
// more messages than the relay takes in its window.

// relayScenario is a relay's limits and the burst sent through it.
type relayScenario struct {
	checkouts int
	limits    testenv.PostfixOptions
}

// allows is how long the relay's message rate takes to let checkouts
// through: Postfix counts its window in whole seconds from the client's
// first MAIL FROM, so n a window of w seconds is n a (w+1) s.
func (s relayScenario) allows() time.Duration {
	windows := (s.checkouts + s.limits.MessageRateLimit - 1) / s.limits.MessageRateLimit
	return time.Duration(windows-1) * (s.limits.RateTimeUnit + time.Second)
}

// relayRun is what one run measured, at the relay and in the workers'
// logs.
type relayRun struct {
	sent         int           // e-mails at Mailpit when the run ended
	took         time.Duration // from the first checkout to the last e-mail at Mailpit (or to the end of the wait)
	connections  int           // connections the relay took, refused ones included
	refusedConns int           // of them refused: too many at once, or too many a window
	refusedMail  int           // MAIL FROM refused: too much mail
	breaker      int           // "provider refuses us": a worker's breaker opened
	pacedConn    int           // attempts throttled by 421 (connections)
	pacedMail    int           // attempts throttled by 450 (messages)
}

func (r relayRun) String() string {
	return fmt.Sprintf("%d sent in %.0f s; the relay took %d connections and refused %d (%.0f%%) and %d MAIL FROM; breaker opened %d times; attempts paced by 421 %d, by 450 %d",
		r.sent, r.took.Seconds(), r.connections, r.refusedConns, 100*float64(r.refusedConns)/float64(max(r.connections, 1)), r.refusedMail, r.breaker, r.pacedConn, r.pacedMail)
}

// runRelay places the scenario's checkouts at once through a cluster
// whose relay is a private Postfix and waits up to wait for all of them
// at Mailpit. The workers run with the defaults a new user has
// (WORKER_CONCURRENCY 10, SMTP_RATE unset), only their timeouts kept
// short enough for the suite's crash repairs to be irrelevant here.
func runRelay(t *testing.T, s relayScenario, wait time.Duration) (*cluster, relayRun) {
	t.Helper()
	c := newMailpitCluster(t, testenv.MailpitOptions{})
	pf := testenv.StartPostfix(t, c.mailpit.SMTPAddr(), s.limits)
	c.smtpEnv = []string{"SMTP_HOST", pf.Host, "SMTP_PORT", strconv.Itoa(pf.Port), "SMTP_TLS", "none"}
	c.startAPI()
	defaults := []string{"WORKER_CONCURRENCY", "10", "PROVIDER_PROBE_INTERVAL", "5s", "LOCK_TTL", "30s", "SMTP_TIMEOUT", "15s",
		"SEND_TIMEOUT", "30s", "SHUTDOWN_TIMEOUT", "45s"}
	workers := []*testenv.Process{c.startWorker(defaults...), c.startWorker(defaults...)}
	c.startReconciler()

	c.start = time.Now()
	c.placeAtOnce("relay", s.checkouts, 20)
	t.Logf("%d checkouts placed in %.1f s", s.checkouts, time.Since(c.start).Seconds())
	deadline := c.start.Add(wait)
	var r relayRun
	for {
		r.sent = c.emailCount()
		if r.sent >= s.checkouts || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	r.took = time.Since(c.start)
	r.connections = pf.Count(testenv.PostfixConnect)
	r.refusedConns = pf.Count(testenv.PostfixConnectionCount) + pf.Count(testenv.PostfixConnectionRate)
	r.refusedMail = pf.Count(testenv.PostfixMessageRate)
	for _, w := range workers {
		log := w.Output()
		r.breaker += strings.Count(log, `"msg":"provider refuses us`)
		r.pacedConn += strings.Count(log, `"pace":"smtp 421`)
		r.pacedMail += strings.Count(log, `"pace":"smtp 450`)
	}
	t.Logf("relay limits %+v, %d checkouts (the relay allows them in %.0f s): %s", s.limits, s.checkouts, s.allows().Seconds(), r)
	return c, r
}

// The scaled-down relay (make test). Postfix's "450 4.7.1 too much
// mail" and "421 4.7.0 too many connections" are a pace, not a refusal
// of us: every e-mail goes out exactly once, none fails or is held, and
// no worker's breaker opens (before, the first 450 opened it and the
// queue waited minutes for a probe). The workers start at two
// connections each, one more than this relay's three at once: the relay
// refuses one connection, or two, and the bounds they learn keep them
// within its cap (before, every send that found it full dialled again on
// its own, hundreds of times).
func TestRelayLimitsAreAPace(t *testing.T) {
	t.Parallel()
	s := relayScenario{checkouts: 40, limits: testenv.PostfixOptions{MessageRateLimit: 10, ConnectionRateLimit: 8, ConnectionCountLimit: 3, RateTimeUnit: 4 * time.Second}}
	c, r := runRelay(t, s, 120*time.Second)
	if r.sent < s.checkouts {
		t.Fatalf("%d of %d e-mails at the relay after %.0f s", r.sent, s.checkouts, r.took.Seconds())
	}
	c.settled(30 * time.Second)
	c.verdict("relay: Postfix's limits, scaled down", expect{})
	if r.breaker != 0 {
		t.Errorf("a worker's breaker opened %d times: a relay's pace is not a refusal of us", r.breaker)
	}
	if r.refusedConns > 2 {
		t.Errorf("the relay refused %d connections, want one a worker at most: each keeps within the bound it learned (%s)", r.refusedConns, r)
	}
	if r.refusedMail+r.refusedConns == 0 {
		t.Errorf("the relay refused nothing: the scenario did not reach its limits (%s)", r)
	}
}
