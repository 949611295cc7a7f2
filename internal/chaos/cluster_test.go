// Package chaos_test is the fault-injection suite: it runs the real api,
// worker and reconciler binaries as separate processes against a
// PostgreSQL database, a redis-server and an SMTP sink of its own, breaks
// things on purpose, and counts e-mails at the sink. docs/reliability.md
// explains it and keeps its last summary.
package chaos_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/postgres"
	"github.com/sekali-dev/sekali/internal/postmark/postmarktest"
	"github.com/sekali-dev/sekali/internal/resend/resendtest"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

const (
	mailDomain = "shop.example"
	adminToken = "chaos-admin-token-0123456789"
)

// results collects each scenario's row of the summary table that
// TestMain prints when the suite ends.
var results struct {
	sync.Mutex
	rows []result
}

type result struct {
	Scenario   string
	Orders     int
	Emails     int
	Duplicates int
	Lost       int
	Failed     int
	Drain      time.Duration
}

func TestMain(m *testing.M) {
	code := m.Run()
	results.Lock()
	rows := results.rows
	results.Unlock()
	if len(rows) > 0 {
		sort.Slice(rows, func(i, j int) bool { return rows[i].Scenario < rows[j].Scenario })
		var b strings.Builder
		fmt.Fprintf(&b, "| scenario | orders | e-mails | duplicates | lost | failed or cancelled (expected) | time to drain |\n")
		fmt.Fprintf(&b, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, r := range rows {
			fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %.1f s |\n", r.Scenario, r.Orders, r.Emails, r.Duplicates, r.Lost, r.Failed, r.Drain.Seconds())
		}
		fmt.Print("\nfault-injection summary\n\n" + b.String())
		if path := os.Getenv("CHAOS_SUMMARY"); path != "" {
			_ = os.WriteFile(path, []byte(b.String()), 0o644)
		}
	}
	os.Exit(code)
}

// cluster is one scenario's private deployment. Its mail server is our
// SMTP sink (which can inject any fault) or a real Mailpit (for the faults
// Mailpit can produce: a real server's refusals, AUTH, STARTTLS, restarts).
type cluster struct {
	t          testing.TB
	db         testenv.DB
	dbURL      string // what the binaries get as DATABASE_URL, if not db.URL (a PgBouncer in front of it)
	redis      *testenv.RedisServer
	redisURL   string           // what the binaries get as REDIS_URL (the server above, or a Sentinel)
	sink       *smtpsink.Server // nil with Mailpit
	mailpit    *testenv.Mailpit // nil with the sink
	resend     *resendtest.Server
	postmark   *postmarktest.Server
	smtpEnv    []string // the workers' SMTP_* (or PROVIDER and its) settings
	recEnv     []string // the reconciler's provider settings
	backendKey string   // the shop's backend's API key (orders:write and notifications:write: checkouts, shipments, cancels)
	lookupURL  string
	apiURL     string
	api        *testenv.Process
	rec        *testenv.Process
	orders     []placed
	start      time.Time // the first order; time to drain counts from here
}

type placed struct {
	OrderID    uuid.UUID
	Email      string
	DeliveryID uuid.UUID
	Key        string
}

func newCluster(t testing.TB, sinkCfg smtpsink.Config) *cluster {
	t.Helper()
	return newClusterOn(t, testenv.NewDB(t), sinkCfg)
}

// backendKey makes the API key the shop's backend checks out and ships
// with, as an operator would.
func backendKey(t testing.TB, db testenv.DB) string {
	t.Helper()
	_, key, err := apikey.NewService(db.Pool).Create(context.Background(), "test", "chaos backend", []apikey.Scope{apikey.ScopeOrdersWrite, apikey.ScopeNotificationsWrite})
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// newClusterOn is newCluster on a given database, such as one on a
// PostgreSQL server of the test's own, migrated first (as the API would
// on start) so that the backend's API key can be made.
func newClusterOn(t testing.TB, db testenv.DB, sinkCfg smtpsink.Config) *cluster {
	t.Helper()
	if err := postgres.Migrate(context.Background(), db.Pool, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatalf("migrate the cluster's database: %v", err)
	}
	c := &cluster{t: t, db: db, redis: testenv.NewRedisServer(t), backendKey: backendKey(t, db)}
	c.redisURL = c.redis.URL
	sink, err := smtpsink.Start(sinkCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	c.sink = sink
	lookup := httptest.NewServer(sink.Handler())
	t.Cleanup(lookup.Close)
	c.lookupURL = lookup.URL
	c.smtpEnv = []string{"SMTP_HOST", sink.Host(), "SMTP_PORT", strconv.Itoa(sink.Port()), "SMTP_TLS", "none"}
	return c
}

// newMailpitCluster is a cluster whose mail server is a real Mailpit; with
// TLS and Auth, the workers use STARTTLS (trusting its CA) and the first
// user's credentials.
func newMailpitCluster(t *testing.T, opts testenv.MailpitOptions) *cluster {
	t.Helper()
	mp := testenv.StartMailpit(t, opts)
	db := testenv.NewDB(t)
	c := &cluster{t: t, db: db, redis: testenv.NewRedisServer(t), mailpit: mp, lookupURL: mp.URL, backendKey: backendKey(t, db)}
	c.redisURL = c.redis.URL
	c.smtpEnv = []string{"SMTP_HOST", mp.Host, "SMTP_PORT", strconv.Itoa(mp.Port), "SMTP_TLS", "none"}
	if opts.TLS {
		c.smtpEnv = []string{"SMTP_HOST", mp.Host, "SMTP_PORT", strconv.Itoa(mp.Port), "SMTP_TLS", "starttls", "SMTP_CA_FILE", mp.CAFile}
	}
	for user, password := range opts.Auth {
		c.smtpEnv = append(c.smtpEnv, "SMTP_USERNAME", user, "SMTP_PASSWORD", password)
		break
	}
	return c
}

// email is one message the mail server holds.
type email struct {
	to        []string
	messageID string
}

// emails is everything the mail servers have accepted so far: the
// provider's stand-in, the Mailpit or the sink, or, with failover,
// both of the cluster's providers.
func (c *cluster) emails() []email {
	c.t.Helper()
	var out []email
	if c.resend != nil {
		for _, m := range c.resend.Messages() {
			out = append(out, email{to: m.To, messageID: m.MessageID})
		}
	}
	if c.postmark != nil {
		for _, m := range c.postmark.Messages() {
			out = append(out, email{to: []string{m.To}, messageID: strings.Trim(m.Headers["Message-ID"], "<>")})
		}
	}
	if c.mailpit != nil {
		for _, m := range c.mailpit.Messages(c.t) {
			out = append(out, email{to: m.Recipients(), messageID: m.MessageID})
		}
	}
	if c.sink != nil {
		for _, m := range c.sink.Messages() {
			out = append(out, email{to: m.To, messageID: m.MessageID})
		}
	}
	return out
}

// emailCount is len(c.emails()), cheaper.
func (c *cluster) emailCount() int {
	c.t.Helper()
	n := 0
	if c.resend != nil {
		n += len(c.resend.Messages())
	}
	if c.postmark != nil {
		n += len(c.postmark.Messages())
	}
	if c.mailpit != nil {
		n += c.mailpit.Count(c.t)
	}
	if c.sink != nil {
		n += c.sink.Count()
	}
	return n
}

func merge(base map[string]string, extra []string) map[string]string {
	for i := 0; i+1 < len(extra); i += 2 {
		base[extra[i]] = extra[i+1]
	}
	return base
}

func (c *cluster) common() map[string]string {
	return map[string]string{
		"DATABASE_URL":   cmp.Or(c.dbURL, c.db.URL),
		"REDIS_URL":      c.redisURL,
		"DELIVERY_QUEUE": c.redis.Queue,
		"MAIL_FROM":      "orders@" + mailDomain,
		"LOG_LEVEL":      "info",
	}
}

// startAPI runs the API (built with failpoints) and waits until it listens.
func (c *cluster) startAPI(extra ...string) *testenv.Process {
	c.t.Helper()
	env := merge(merge(c.common(), []string{"HTTP_ADDR", "127.0.0.1:0", "METRICS_ADDR", "127.0.0.1:0", "ADMIN_TOKEN", adminToken,
		"RATE_LIMIT_PUBLIC", "0"}), extra) // the suite places orders faster than a storefront's client would
	p := testenv.Start(c.t, "api", testenv.Binary(c.t, "./cmd/api", "failpoints"), env)
	c.apiURL = "http://" + p.WaitLog(c.t, "api listening", "addr", 60*time.Second)
	c.api = p
	return p
}

// startWorker runs a worker with short timeouts, so that crashes are
// repaired in seconds rather than minutes.
func (c *cluster) startWorker(extra ...string) *testenv.Process {
	c.t.Helper()
	env := merge(merge(merge(c.common(), c.smtpEnv), []string{
		"METRICS_ADDR", "127.0.0.1:0", "WORKER_CONCURRENCY", "4", "SMTP_HELO", "chaos-worker.test",
		"LOCK_TTL", "3s", "SMTP_TIMEOUT", "2s", "SEND_TIMEOUT", "6s", "SHUTDOWN_TIMEOUT", "20s", "PROVIDER_PROBE_INTERVAL", "500ms",
	}), extra)
	p := testenv.Start(c.t, "worker", testenv.Binary(c.t, "./cmd/worker", "failpoints"), env)
	p.WaitLog(c.t, "worker started", "worker_id", 60*time.Second)
	return p
}

func (c *cluster) startReconciler(extra ...string) *testenv.Process {
	c.t.Helper()
	env := merge(merge(c.common(), []string{
		"METRICS_ADDR", "127.0.0.1:0", "RECONCILE_INTERVAL", "500ms", "PENDING_REENQUEUE_AFTER", "2s",
		"MAIL_LOOKUP_URL", c.lookupURL,
	}), append(slices.Clone(c.recEnv), extra...))
	p := testenv.Start(c.t, "reconciler", testenv.Binary(c.t, "./cmd/reconciler"), env)
	p.WaitLog(c.t, "reconciler started", "actor", 60*time.Second)
	c.rec = p
	return p
}

// checkout posts one order and returns the HTTP status and the order.
func (c *cluster) checkout(email, idempotencyKey string) (int, placed, error) {
	body := `{"customer_email":"` + email + `","customer_name":"Chaos","currency":"IDR",` +
		`"items":[{"sku":"K1","name":"Kopi","quantity":1,"unit_price":4500000}]}`
	req, err := http.NewRequest(http.MethodPost, c.apiURL+"/v1/orders", strings.NewReader(body))
	if err != nil {
		return 0, placed{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.backendKey)
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	res, err := client.Do(req)
	if err != nil {
		return 0, placed{}, err
	}
	defer res.Body.Close()
	var o struct {
		ID            uuid.UUID `json:"id"`
		Notifications []struct {
			ID             uuid.UUID `json:"id"`
			IdempotencyKey string    `json:"idempotency_key"`
		} `json:"notifications"`
	}
	if res.StatusCode != http.StatusCreated {
		return res.StatusCode, placed{}, nil
	}
	if err := json.NewDecoder(res.Body).Decode(&o); err != nil {
		return res.StatusCode, placed{}, err
	}
	return res.StatusCode, placed{OrderID: o.ID, Email: email, DeliveryID: o.Notifications[0].ID, Key: o.Notifications[0].IdempotencyKey}, nil
}

// placeOrders places n orders through the API and remembers them.
func (c *cluster) placeOrders(prefix string, n int) {
	c.t.Helper()
	if c.start.IsZero() {
		c.start = time.Now()
	}
	for i := 0; i < n; i++ {
		email := fmt.Sprintf("%s-%d@example.com", prefix, i)
		status, p, err := c.checkout(email, "")
		if err != nil || status != http.StatusCreated {
			c.t.Fatalf("checkout %s: %d %v", email, status, err)
		}
		c.orders = append(c.orders, p)
	}
}

// settled waits until no delivery is pending or sending.
func (c *cluster) settled(timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var open int
		err := c.db.Pool.QueryRow(context.Background(),
			"SELECT count(*) FROM notification_deliveries WHERE status IN ('pending', 'sending')").Scan(&open)
		if err == nil && open == 0 {
			return
		}
		if time.Now().After(deadline) {
			rows, _ := c.db.Pool.Query(context.Background(),
				"SELECT recipient, status, attempts, coalesce(last_error, '') FROM notification_deliveries WHERE status IN ('pending', 'sending')")
			var stuck []string
			for rows.Next() {
				var r, s, e string
				var a int
				_ = rows.Scan(&r, &s, &a, &e)
				stuck = append(stuck, fmt.Sprintf("%s %s attempts=%d %s", r, s, a, e))
			}
			rows.Close()
			c.t.Fatalf("%d deliveries still open after %v (err %v):\n%s", open, timeout, err, strings.Join(stuck, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// expect says what a scenario allows besides "one e-mail, row sent".
type expect struct {
	mayFail   func(email string) bool // these may end failed, with no e-mail
	mayCancel bool                    // a cancelled delivery is fine, with no e-mail
	control   bool                    // the naive handler: report duplicates, do not fail on them
}

// verdict checks every delivery in the database (not only those whose
// checkout answered): one e-mail at the mail server with its Message-ID,
// as many e-mails per recipient as it has sent deliveries, and its row
// sent — or failed with no e-mail, where the scenario made it so. It
// records the scenario's row of the summary.
func (c *cluster) verdict(scenario string, x expect) result {
	c.t.Helper()
	mails := c.emails()
	r := result{Scenario: scenario, Emails: len(mails), Drain: time.Since(c.start)}
	byID, byRcpt := map[string]int{}, map[string]int{}
	for _, m := range mails {
		byID[m.messageID]++
		for _, to := range m.to {
			byRcpt[strings.ToLower(to)]++
		}
	}
	rows, err := c.db.Pool.Query(context.Background(),
		"SELECT template, recipient, idempotency_key, coalesce(message_id, ''), status, coalesce(last_error, '') FROM notification_deliveries")
	if err != nil {
		c.t.Fatal(err)
	}
	type row struct{ template, email, key, messageID, status, lastError string }
	var all []row
	for rows.Next() {
		var x row
		if err := rows.Scan(&x.template, &x.email, &x.key, &x.messageID, &x.status, &x.lastError); err != nil {
			c.t.Fatal(err)
		}
		all = append(all, x)
	}
	rows.Close()
	confirmations := 0
	for _, d := range all {
		if d.template == "order-confirmation" {
			confirmations++
		}
	}
	if confirmations < len(c.orders) {
		c.t.Errorf("%d orders answered 201 but only %d confirmations exist", len(c.orders), confirmations)
	}
	report := c.t.Errorf
	if x.control {
		report = c.t.Logf
	}
	r.Orders = confirmations
	wantByRcpt := map[string]int{}
	for _, d := range all {
		id := d.messageID
		if id == "" {
			id = mail.MessageID(d.key, mailDomain) // never claimed
		}
		n := byID[id]
		if d.status == string(notify.StatusCancelled) && x.mayCancel {
			r.Failed++
			if n != 0 {
				c.t.Errorf("%s %s was cancelled but %d e-mails reached the mail server", d.template, d.email, n)
			}
			continue
		}
		if d.status == string(notify.StatusFailed) && x.mayFail != nil && x.mayFail(d.email) {
			r.Failed++
			if n != 0 {
				c.t.Errorf("%s %s failed but %d e-mails reached the mail server", d.template, d.email, n)
			}
			continue
		}
		wantByRcpt[d.email]++
		if d.status != string(notify.StatusSent) {
			c.t.Errorf("%s %s: delivery %s, want sent (%s)", d.template, d.email, d.status, d.lastError)
		}
		if n == 0 {
			r.Lost++
			c.t.Errorf("%s %s: no e-mail (row %s)", d.template, d.email, d.status)
		}
		if n > 1 {
			r.Duplicates += n - 1
			report("%s %s: %d e-mails", d.template, d.email, n)
		}
	}
	for rcpt, want := range wantByRcpt {
		if got := byRcpt[rcpt]; !x.control && got != want {
			c.t.Errorf("%s: %d e-mails by recipient, want %d (one per sent delivery)", rcpt, got, want)
		}
	}
	results.Lock()
	results.rows = append(results.rows, r)
	results.Unlock()
	if os.Getenv("CHAOS_VERBOSE") != "" && c.rec != nil {
		for _, l := range strings.Split(c.rec.Output(), "\n") {
			if strings.Contains(l, `"msg":"reconciled"`) {
				c.t.Log(l)
			}
		}
	}
	c.t.Logf("%s: %d orders, %d e-mails, %d duplicates, %d lost, %d failed as expected, drained in %v",
		scenario, r.Orders, r.Emails, r.Duplicates, r.Lost, r.Failed, r.Drain.Round(100*time.Millisecond))
	return r
}
