// Package chaos_test is the fault-injection suite: it runs the real api,
// worker and reconciler binaries as separate processes against a
// PostgreSQL database, a redis-server and an SMTP sink of its own, breaks
// things on purpose, and counts e-mails at the sink. docs/reliability.md
// explains it and keeps its last summary.
package chaos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/notify"
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
		fmt.Fprintf(&b, "| scenario | orders | e-mails | duplicates | lost | failed (expected) | time to drain |\n")
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

// cluster is one scenario's private deployment.
type cluster struct {
	t         *testing.T
	db        testenv.DB
	redis     *testenv.RedisServer
	redisURL  string // what the binaries get as REDIS_URL (the server above, or a Sentinel)
	sink      *smtpsink.Server
	lookupURL string
	apiURL    string
	api       *testenv.Process
	rec       *testenv.Process
	orders    []placed
	start     time.Time // the first order; time to drain counts from here
}

type placed struct {
	OrderID    uuid.UUID
	Email      string
	DeliveryID uuid.UUID
	Key        string
}

func newCluster(t *testing.T, sinkCfg smtpsink.Config) *cluster {
	t.Helper()
	return newClusterOn(t, testenv.NewDB(t), sinkCfg)
}

// newClusterOn is newCluster on a given database, such as one on a
// PostgreSQL server of the test's own.
func newClusterOn(t *testing.T, db testenv.DB, sinkCfg smtpsink.Config) *cluster {
	t.Helper()
	c := &cluster{t: t, db: db, redis: testenv.NewRedisServer(t)}
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
	return c
}

func merge(base map[string]string, extra []string) map[string]string {
	for i := 0; i+1 < len(extra); i += 2 {
		base[extra[i]] = extra[i+1]
	}
	return base
}

func (c *cluster) common() map[string]string {
	return map[string]string{
		"DATABASE_URL":   c.db.URL,
		"REDIS_URL":      c.redisURL,
		"DELIVERY_QUEUE": c.redis.Queue,
		"MAIL_FROM":      "orders@" + mailDomain,
		"LOG_LEVEL":      "info",
	}
}

// startAPI runs the API (built with failpoints) and waits until it listens.
func (c *cluster) startAPI(extra ...string) *testenv.Process {
	c.t.Helper()
	env := merge(merge(c.common(), []string{"HTTP_ADDR", "127.0.0.1:0", "ADMIN_TOKEN", adminToken}), extra)
	p := testenv.Start(c.t, "api", testenv.Binary(c.t, "./cmd/api", "failpoints"), env)
	c.apiURL = "http://" + p.WaitLog(c.t, "api listening", "addr", 60*time.Second)
	c.api = p
	return p
}

// startWorker runs a worker with short timeouts, so that crashes are
// repaired in seconds rather than minutes.
func (c *cluster) startWorker(extra ...string) *testenv.Process {
	c.t.Helper()
	env := merge(merge(c.common(), []string{
		"SMTP_HOST", c.sink.Host(), "SMTP_PORT", strconv.Itoa(c.sink.Port()), "SMTP_TLS", "none",
		"METRICS_ADDR", "127.0.0.1:0", "WORKER_CONCURRENCY", "4",
		"LOCK_TTL", "3s", "SMTP_TIMEOUT", "2s", "SEND_TIMEOUT", "6s", "SHUTDOWN_TIMEOUT", "20s", "MAX_ATTEMPTS", "10",
	}), extra)
	p := testenv.Start(c.t, "worker", testenv.Binary(c.t, "./cmd/worker", "failpoints"), env)
	p.WaitLog(c.t, "worker started", "worker_id", 60*time.Second)
	return p
}

func (c *cluster) startReconciler(extra ...string) *testenv.Process {
	c.t.Helper()
	env := merge(merge(c.common(), []string{
		"METRICS_ADDR", "127.0.0.1:0", "RECONCILE_INTERVAL", "500ms", "PENDING_REENQUEUE_AFTER", "2s",
		"MAIL_LOOKUP_URL", c.lookupURL, "MAIL_LOOKUP_API", "mailpit",
	}), extra)
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
	mayFail func(email string) bool // these may end failed, with no e-mail
	control bool                    // the naive handler: report duplicates, do not fail on them
}

// verdict checks every order in the database (not only those whose
// checkout answered): one e-mail at the sink, counted by recipient and by
// Message-ID, and its row sent — or failed with no e-mail, where the
// scenario made it so. It records the scenario's row of the summary.
func (c *cluster) verdict(scenario string, x expect) result {
	c.t.Helper()
	r := result{Scenario: scenario, Emails: c.sink.Count(), Drain: time.Since(c.start)}
	rows, err := c.db.Pool.Query(context.Background(),
		"SELECT recipient, idempotency_key, status, coalesce(last_error, '') FROM notification_deliveries WHERE template = 'order-confirmation'")
	if err != nil {
		c.t.Fatal(err)
	}
	type row struct{ email, key, status, lastError string }
	var all []row
	for rows.Next() {
		var x row
		if err := rows.Scan(&x.email, &x.key, &x.status, &x.lastError); err != nil {
			c.t.Fatal(err)
		}
		all = append(all, x)
	}
	rows.Close()
	if len(all) < len(c.orders) {
		c.t.Errorf("%d orders answered 201 but only %d deliveries exist", len(c.orders), len(all))
	}
	report := c.t.Errorf
	if x.control {
		report = c.t.Logf
	}
	r.Orders = len(all)
	for _, d := range all {
		byRcpt := len(c.sink.ByRecipient(d.email))
		byID := len(c.sink.ByMessageID(notify.MessageID(d.key, mailDomain)))
		if !x.control && byRcpt != byID {
			c.t.Errorf("%s: %d e-mails by recipient but %d by Message-ID", d.email, byRcpt, byID)
		}
		if d.status == string(notify.StatusFailed) && x.mayFail != nil && x.mayFail(d.email) {
			r.Failed++
			if byRcpt != 0 {
				c.t.Errorf("%s failed but %d e-mails reached the sink", d.email, byRcpt)
			}
			continue
		}
		if d.status != string(notify.StatusSent) {
			c.t.Errorf("%s: delivery %s, want sent (%s)", d.email, d.status, d.lastError)
		}
		if byRcpt == 0 {
			r.Lost++
			c.t.Errorf("%s: no e-mail (row %s)", d.email, d.status)
		}
		if byRcpt > 1 {
			r.Duplicates += byRcpt - 1
			report("%s: %d e-mails", d.email, byRcpt)
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
