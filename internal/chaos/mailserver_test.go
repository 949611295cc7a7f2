package chaos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// A real mail server's bad minutes: the relay down, throttling, a sender
// refusal, a wrong password, a session cut with 421, greylisting, a
// rolling deploy that adds a template, and retention meeting a repeated
// event while Redis forgets everything. Each ends with exactly one e-mail
// per delivery and nothing failed that the scenario did not refuse.
// Against Mailpit wherever Mailpit can produce the fault; the fault lasts
// fault(short, long): the short variant in make test, the full one (the
// durations shops meet) in make chaos-long.

// placeDuring places n orders spread evenly over d.
func (c *cluster) placeDuring(prefix string, n int, d time.Duration) {
	c.t.Helper()
	for i := 0; i < n; i++ {
		c.placeOrders(fmt.Sprintf("%s-%d", prefix, i), 1)
		time.Sleep(d / time.Duration(n))
	}
}

// recovered waits until nothing is pending or sending and returns how
// long that took from since.
func (c *cluster) recovered(since time.Time, timeout time.Duration) time.Duration {
	c.t.Helper()
	c.settled(timeout)
	return time.Since(since)
}

// backlogWithinAMinute fails the test when the backlog took longer than a
// minute to go out after the mail server was back.
func backlogWithinAMinute(t *testing.T, took time.Duration) {
	t.Helper()
	t.Logf("the backlog went out %v after the mail server was back", took.Round(100*time.Millisecond))
	if took > time.Minute {
		t.Errorf("the backlog took %v to go out after the mail server was back, want under a minute", took)
	}
}

// noAttemptsUsed fails when a delivery's attempt count grew while the
// provider refused our session: those tries never reached the recipient.
func (c *cluster) noAttemptsUsed() {
	c.t.Helper()
	var used int
	if err := c.db.Pool.QueryRow(context.Background(),
		"SELECT count(*) FROM notification_deliveries WHERE status IN ('pending', 'sending') AND attempts > 1").Scan(&used); err != nil {
		c.t.Fatal(err)
	}
	if used > 0 {
		c.t.Errorf("%d waiting deliveries used up attempts while the provider refused us", used)
	}
}

func TestRelayDownThenBack(t *testing.T) {
	t.Parallel()
	down := fault(15*time.Second, 90*time.Second)
	c := newMailpitCluster(t, testenv.MailpitOptions{})
	c.startAPI()
	w := c.startWorker()
	c.startWorker()
	c.startReconciler()
	c.placeOrders("relay-before", 3)
	testenv.WaitFor(t, "the first e-mails", 30*time.Second, func() bool { return c.emailCount() >= 3 })
	c.mailpit.Stop(t)
	c.placeDuring("relay-down", 20, down)
	c.noAttemptsUsed()
	c.mailpit.Start(t)
	backlogWithinAMinute(t, c.recovered(time.Now(), 2*time.Minute))
	c.verdict(fmt.Sprintf("Mailpit down for %v, then back", down), expect{})
	if !strings.Contains(w.Output(), "provider refuses us") {
		t.Error("the worker never said that the provider refused it")
	}
}

// throttled: Mailpit answers code at MAIL FROM for the whole fault.
func throttled(t *testing.T, code int) {
	t.Helper()
	lasts := fault(8*time.Second, 30*time.Second)
	c := newMailpitCluster(t, testenv.MailpitOptions{Chaos: true})
	c.startAPI()
	c.startWorker()
	c.startWorker()
	c.startReconciler()
	c.mailpit.SetChaos(t, testenv.MailpitChaos{Sender: &testenv.MailpitTrigger{ErrorCode: code, Probability: 100}})
	c.placeDuring(fmt.Sprintf("mail-from-%d", code), 15, lasts)
	if n := c.emailCount(); n != 0 {
		t.Errorf("%d e-mails while MAIL FROM was refused", n)
	}
	c.noAttemptsUsed()
	// The operator sees why nothing goes out.
	if p := c.providerHealth(); p.Up || !strings.Contains(p.Reason, strconv.Itoa(code)) {
		t.Errorf("/admin/v1/queue says the provider is up=%v (%q) while it refuses MAIL FROM with %d", p.Up, p.Reason, code)
	}
	c.mailpit.ClearChaos(t)
	backlogWithinAMinute(t, c.recovered(time.Now(), 2*time.Minute))
	c.verdict(fmt.Sprintf("%d at MAIL FROM for %v, then fixed", code, lasts), expect{})
}

func TestThrottledAtMailFrom(t *testing.T) {
	t.Parallel()
	throttled(t, 451)
}

func TestSenderRefusedThenFixed(t *testing.T) {
	t.Parallel()
	throttled(t, 550)
}

// The worker runs with a wrong SMTP password until an operator fixes the
// secret and rolls the workers.
func TestWrongPasswordUntilFixed(t *testing.T) {
	t.Parallel()
	lasts := fault(6*time.Second, 20*time.Second)
	c := newMailpitCluster(t, testenv.MailpitOptions{TLS: true, Auth: map[string]string{"shop": "right-password-1"}})
	c.startAPI()
	wrong := c.startWorker("SMTP_PASSWORD", "wrong-password")
	c.startReconciler()
	c.placeDuring("wrong-password", 10, lasts)
	if n := c.emailCount(); n != 0 {
		t.Fatalf("%d e-mails with a wrong password", n)
	}
	c.noAttemptsUsed()
	c.startWorker() // the fixed secret
	wrong.Signal(t, syscall.SIGTERM)
	backlogWithinAMinute(t, c.recovered(time.Now(), 2*time.Minute))
	c.verdict(fmt.Sprintf("wrong SMTP password for %v, then fixed", lasts), expect{})
}

// Mailpit closes half of the sessions with 421 at RCPT.
func TestSessionsClosedWith421(t *testing.T) {
	t.Parallel()
	lasts := fault(8*time.Second, 30*time.Second)
	c := newMailpitCluster(t, testenv.MailpitOptions{Chaos: true})
	c.startAPI()
	c.startWorker()
	c.startWorker()
	c.startReconciler()
	c.mailpit.SetChaos(t, testenv.MailpitChaos{Recipient: &testenv.MailpitTrigger{ErrorCode: 421, Probability: 50}})
	c.placeDuring("421", 15, lasts)
	c.mailpit.ClearChaos(t)
	c.settled(2 * time.Minute)
	c.verdict(fmt.Sprintf("421 at RCPT on half the sessions for %v", lasts), expect{})
}

// Greylisting: every recipient is refused with 451 4.7.1 at its first
// RCPT, as greylisting relays do (Mailpit cannot, so our sink does).
func TestGreylisting(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]bool{}
	c := newCluster(t, smtpsink.Config{OnRcpt: func(to string) error {
		mu.Lock()
		defer mu.Unlock()
		if !seen[to] {
			seen[to] = true
			return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 7, 1}, Message: "Greylisted, please try again later"}
		}
		return nil
	}})
	c.startAPI()
	c.startWorker()
	c.startWorker()
	c.startReconciler()
	c.placeOrders("greylist", 15)
	c.settled(2 * time.Minute)
	c.verdict("greylisting: 451 4.7.1 at each recipient's first RCPT", expect{})
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 15 {
		t.Errorf("%d recipients greylisted, want 15", len(seen))
	}
}

// providerHealth is the provider part of GET /admin/v1/queue.
func (c *cluster) providerHealth() (p struct {
	Up     bool   `json:"up"`
	Reason string `json:"reason"`
}) {
	c.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, c.apiURL+"/admin/v1/queue", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	var q struct {
		Provider *struct {
			Up     bool   `json:"up"`
			Reason string `json:"reason"`
		} `json:"provider"`
	}
	if err := json.NewDecoder(res.Body).Decode(&q); err != nil || q.Provider == nil {
		c.t.Fatalf("GET /admin/v1/queue: %d %v", res.StatusCode, err)
	}
	p.Up, p.Reason = q.Provider.Up, q.Provider.Reason
	return p
}

// ship posts a shipment, as the shop's backend does with its API key,
// and returns the HTTP status and the notification.
func (c *cluster) ship(orderID uuid.UUID) (int, uuid.UUID) {
	c.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, c.apiURL+"/v1/orders/"+orderID.String()+"/shipments",
		strings.NewReader(`{"carrier":"JNE","tracking_number":"JNE-`+orderID.String()[:8]+`"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.backendKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	var n struct {
		ID uuid.UUID `json:"id"`
	}
	if err := json.NewDecoder(res.Body).Decode(&n); err != nil {
		c.t.Fatalf("shipment of %s: %d, body: %v", orderID, res.StatusCode, err)
	}
	return res.StatusCode, n.ID
}

// A rolling deploy adds a template: the API knows it first, an older
// worker still runs. The old worker hands those deliveries back; the new
// one sends them once it is up.
func TestRollingDeployAddsATemplate(t *testing.T) {
	t.Parallel()
	c := newCluster(t, smtpsink.Config{})
	c.startAPI()
	old := c.startWorker("SEKALI_FAILPOINTS", "without-templates=order-shipped")
	c.startReconciler()
	c.placeOrders("rolling", 8)
	for _, o := range c.orders {
		if status, _ := c.ship(o.OrderID); status != http.StatusCreated {
			t.Fatalf("shipment: %d", status)
		}
	}
	testenv.WaitFor(t, "the old worker to meet the new template", 60*time.Second, func() bool {
		return strings.Count(old.Output(), `"result":"unknown_template"`) >= 8
	})
	c.startWorker()
	old.Signal(t, syscall.SIGTERM)
	c.settled(2 * time.Minute)
	c.verdict("rolling deploy: an old worker meets a new template", expect{})
}

// Retention deletes the sent deliveries of shipped orders; the shop sends
// the same shipment again, and Redis loses everything (queue, locks, the
// sent cache). No customer gets a second e-mail.
func TestRetentionRepeatedShipmentRedisLoss(t *testing.T) {
	t.Parallel()
	c := newCluster(t, smtpsink.Config{})
	c.startAPI()
	c.startWorker()
	c.startReconciler("DELIVERY_RETENTION", "2s", "DELIVERY_MAX_AGE", "1s")
	c.placeOrders("retention", 5)
	first := map[uuid.UUID]uuid.UUID{}
	for _, o := range c.orders {
		status, n := c.ship(o.OrderID)
		if status != http.StatusCreated {
			t.Fatalf("first shipment: %d", status)
		}
		first[o.OrderID] = n
	}
	testenv.WaitFor(t, "retention to retire every delivery", 60*time.Second, func() bool {
		var live, retired int
		_ = c.db.Pool.QueryRow(context.Background(),
			"SELECT (SELECT count(*) FROM notification_deliveries), (SELECT count(*) FROM retired_deliveries)").Scan(&live, &retired)
		return live == 0 && retired == 10
	})
	for _, o := range c.orders {
		status, n := c.ship(o.OrderID)
		if status != http.StatusOK || n != first[o.OrderID] {
			t.Errorf("repeated shipment of %s: %d with notification %s, want 200 with %s", o.OrderID, status, n, first[o.OrderID])
		}
	}
	rdb := redisconn.NewClient(c.redis.Opt)
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.Close()
	time.Sleep(5 * time.Second) // reconciler passes and worker polls after the loss
	var live int
	if err := c.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM notification_deliveries").Scan(&live); err != nil {
		t.Fatal(err)
	}
	r := result{Scenario: "retention + repeated shipment + Redis FLUSHALL", Orders: len(c.orders), Emails: c.emailCount(), Drain: time.Since(c.start)}
	if live != 0 {
		t.Errorf("%d deliveries recorded again after retention", live)
	}
	for _, o := range c.orders {
		switch n := len(c.sink.ByRecipient(o.Email)); {
		case n > 2:
			r.Duplicates += n - 2
			t.Errorf("%s: %d e-mails, want 2 (confirmation and shipment)", o.Email, n)
		case n < 2:
			r.Lost += 2 - n
			t.Errorf("%s: %d e-mails, want 2", o.Email, n)
		}
	}
	results.Lock()
	results.rows = append(results.rows, r)
	results.Unlock()
}

// The control of the refusals above: a recipient the server refuses for
// good (Mailpit: 550 5.1.0 at RCPT) fails after one attempt and is never
// tried again, while the others are sent.
func TestRefusedRecipientFailsOnce(t *testing.T) {
	t.Parallel()
	c := newMailpitCluster(t, testenv.MailpitOptions{AllowedRecipients: `@example\.com$`})
	c.startAPI()
	c.startWorker()
	c.startReconciler()
	c.placeOrders("accepted", 5)
	for i := 0; i < 3; i++ {
		status, p, err := c.checkout(fmt.Sprintf("unknown-%d@refused.test", i), "")
		if err != nil || status != http.StatusCreated {
			t.Fatalf("checkout: %d %v", status, err)
		}
		c.orders = append(c.orders, p)
	}
	c.settled(time.Minute)
	time.Sleep(3 * time.Second) // time for any retry that should not happen
	r := c.verdict("CONTROL: a recipient refused at RCPT (550 5.1.0) fails once", expect{mayFail: func(email string) bool {
		return strings.HasSuffix(email, "@refused.test")
	}})
	if r.Failed != 3 {
		t.Errorf("%d deliveries failed, want the 3 refused recipients", r.Failed)
	}
	var tries int
	if err := c.db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM delivery_events e JOIN notification_deliveries d ON d.id = e.delivery_id
		 WHERE d.recipient LIKE '%@refused.test' AND e.event = 'claimed'`).Scan(&tries); err != nil {
		t.Fatal(err)
	}
	if tries != 3 {
		t.Errorf("the refused recipients were tried %d times, want once each", tries)
	}
}
