package chaos_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/resend/resendtest"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// Failover: the workers send through Resend first and an SMTP relay
// second (PROVIDERS=resend,smtp); the reconciler settles each ambiguous
// send at the provider that had it (Resend by its key, the relay by its
// look-up).

// newFailoverCluster is a cluster with two providers: the Resend stand-in
// first, the SMTP sink second.
func newFailoverCluster(t *testing.T) *cluster {
	t.Helper()
	c := newCluster(t, smtpsink.Config{})
	rs := resendtest.NewServer()
	t.Cleanup(rs.Close)
	c.resend = rs
	c.smtpEnv = []string{"PROVIDERS", "resend,smtp", "RESEND_API_KEY", rs.APIKey, "RESEND_BASE_URL", rs.URL, "PROVIDER_TIMEOUT", "2s",
		"SMTP_HOST", c.sink.Host(), "SMTP_PORT", strconv.Itoa(c.sink.Port()), "SMTP_TLS", "none"}
	c.recEnv = []string{"PROVIDERS", "resend,smtp", "RESEND_API_KEY", rs.APIKey, "RESEND_BASE_URL", rs.URL}
	return c
}

// throughProviders counts the sent deliveries by the provider their
// acceptance was recorded at, from the history.
func (c *cluster) throughProviders() map[string]int {
	c.t.Helper()
	rows, err := c.db.Pool.Query(context.Background(), `
		SELECT coalesce(e.detail->>'provider', '(none)'), count(*)
		FROM notification_deliveries d JOIN delivery_events e ON e.delivery_id = d.id AND e.to_status = 'sent'
		WHERE d.status = 'sent' GROUP BY 1`)
	if err != nil {
		c.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var p string
		var n int
		if err := rows.Scan(&p, &n); err != nil {
			c.t.Fatal(err)
		}
		out[p] = n
	}
	return out
}

// Resend answers 503 for minutes while orders flow. The attempts it
// refuses after our request went out may have been taken (a 5xx says
// nothing certain), so those deliveries wait for Resend under their key;
// every other goes through the relay meanwhile, and Resend takes the
// mail again once it is back. Exactly one e-mail per order, each
// delivery's provider in its history.
func TestFailoverWhileResendIsDown(t *testing.T) {
	t.Parallel()
	down := fault(20*time.Second, 2*time.Minute)
	c := newFailoverCluster(t)
	c.startAPI()
	c.startWorker()
	c.startWorker()
	c.startReconciler()
	c.placeOrders("failover-before", 3)
	testenv.WaitFor(t, "the first e-mails, through Resend", 30*time.Second, func() bool { return len(c.resend.Messages()) >= 3 })
	c.resend.SetOutage(&resendtest.Fault{Status: 503, Name: "service_unavailable", Message: "We are experiencing an outage."})
	outage := time.Now()
	c.placeDuring("failover-down", 20, down)
	relayed := c.sink.Count()
	c.resend.SetOutage(nil)
	c.placeOrders("failover-after", 3)
	backlogWithinAMinute(t, c.recovered(time.Now(), 2*time.Minute))
	c.verdict(fmt.Sprintf("Resend (first of two providers) answers 503 for %v", down), expect{})

	through := c.throughProviders()
	t.Logf("sent through %v; %d through the relay while Resend was down (%v)", through, relayed, time.Since(outage).Round(time.Second))
	if through["resend"] < 3 || through["smtp"] != c.sink.Count() || through["resend"] != len(c.resend.Messages()) {
		t.Errorf("sent through %v with %d e-mails at Resend and %d at the relay: the history must name the provider of each",
			through, len(c.resend.Messages()), c.sink.Count())
	}
	var pinned, elsewhere int
	if err := c.db.Pool.QueryRow(context.Background(), `
		SELECT count(*), count(*) FILTER (WHERE e.detail->>'provider' <> 'resend')
		FROM notification_deliveries d JOIN delivery_events e ON e.delivery_id = d.id AND e.to_status = 'sent'
		WHERE d.provider_pinned`).Scan(&pinned, &elsewhere); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d deliveries waited for Resend: refused with a 5xx after the request went out", pinned)
	// Every order placed during the outage went through the relay, unless
	// the 5xx that told the workers of it answered its own request: that
	// one waits for Resend. Sent one message a request, a 5xx pins one
	// delivery; sent in a batch (PROVIDER_BATCHES), each member of it.
	if relayed+pinned < 18 {
		t.Errorf("%d of the 20 orders placed during the outage went out through the relay while Resend was down and %d waited for it: want all but a couple", relayed, pinned)
	}
	if elsewhere > 0 {
		t.Errorf("%d deliveries pinned to Resend were sent through another provider", elsewhere)
	}
}
