package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// Behind PgBouncer in transaction pooling mode, as docs/deploy.md says to
// run it: the api, worker and reconciler binaries, built as they ship,
// reach PostgreSQL only through a bouncer with two server connections
// for their eleven-odd client connections, with
// default_query_exec_mode=cache_describe in DATABASE_URL. Each migrates
// at start; a checkout (and its replay by Idempotency-Key) goes through
// the API, its task is lost and the reconciler queues it again, the
// worker sends it; a second order goes the usual way. Each order gets one
// e-mail.
func TestBinariesThroughPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	rd := testenv.NewRedis(t)
	sink, err := smtpsink.Start(smtpsink.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	lookup := httptest.NewServer(sink.Handler())
	t.Cleanup(lookup.Close)
	const poolSize = 2
	bouncer := testenv.NewPgBouncer(t, db, testenv.PgBouncerOptions{PoolSize: poolSize})
	inspector := asynq.NewInspector(rd.Opt)
	t.Cleanup(func() { inspector.Close() })

	// Each binary names itself, so that the bouncer's SHOW CLIENTS tells
	// them apart.
	env := func(app string, extra ...string) map[string]string {
		dbURL := testenv.WithParams(t, bouncer.URL, "default_query_exec_mode", "cache_describe", "application_name", app, "pool_max_conns", "4")
		m := map[string]string{"DATABASE_URL": dbURL, "REDIS_URL": rd.URL, "DELIVERY_QUEUE": rd.Queue,
			"MAIL_FROM": "orders@shop.example", "METRICS_ADDR": "127.0.0.1:0", "LOG_LEVEL": "info"}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	api := testenv.Start(t, "api", testenv.Binary(t, "./cmd/api"), env("sekali-api", "HTTP_ADDR", "127.0.0.1:0", "RATE_LIMIT_PUBLIC", "0"))
	apiURL := "http://" + api.WaitLog(t, "api listening", "addr", 60*time.Second)
	rec := testenv.Start(t, "reconciler", testenv.Binary(t, "./cmd/reconciler"), env("sekali-reconciler",
		"RECONCILE_INTERVAL", "200ms", "PENDING_REENQUEUE_AFTER", "1s", "MAIL_LOOKUP_URL", lookup.URL))
	rec.WaitLog(t, "reconciler started", "actor", 60*time.Second)

	backendKey := newBackendKey(t, apikey.NewService(db.Pool))
	checkout := func(email, key string) (order.Order, http.Header) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, apiURL+"/v1/orders", strings.NewReader(
			`{"customer_email":"`+email+`","customer_name":"Rina","currency":"IDR","items":[{"sku":"S","name":"Sambal","quantity":1,"unit_price":2500000}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+backendKey)
		req.Header.Set("Idempotency-Key", key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var o order.Order
		if err := json.NewDecoder(res.Body).Decode(&o); err != nil || res.StatusCode != http.StatusCreated {
			t.Fatalf("checkout %s: %d %v", email, res.StatusCode, err)
		}
		return o, res.Header
	}
	pending := func() int {
		info, err := inspector.GetQueueInfo(rd.Queue)
		if err != nil {
			return -1
		}
		return info.Pending
	}
	sent := func(o order.Order) func() bool {
		return func() bool {
			d, err := notify.Get(ctx, db.Pool, o.Notifications[0].ID)
			return err == nil && d.Status == notify.StatusSent
		}
	}

	// The checkout transaction, its Idempotency-Key lock
	// (pg_try_advisory_xact_lock) and the replay.
	first, _ := checkout("ana@example.com", "bouncer-1")
	again, h := checkout("ana@example.com", "bouncer-1")
	if again.ID != first.ID || h.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: order %s (replayed %q), want %s replayed", again.ID, h.Get("Idempotent-Replayed"), first.ID)
	}

	// No worker yet: the task waits in the queue. It is lost; the
	// reconciler finds the pending delivery and queues it again.
	testenv.WaitFor(t, "the checkout's task", 10*time.Second, func() bool { return pending() == 1 })
	if n, err := inspector.DeleteAllPendingTasks(rd.Queue); err != nil || n != 1 {
		t.Fatalf("delete the task: %d %v", n, err)
	}
	testenv.WaitFor(t, "the reconciler to queue the delivery again", 30*time.Second, func() bool { return pending() == 1 })

	worker := testenv.Start(t, "worker", testenv.Binary(t, "./cmd/worker"), env("sekali-worker",
		"SMTP_HOST", sink.Host(), "SMTP_PORT", strconv.Itoa(sink.Port()), "SMTP_TLS", "none", "SMTP_HELO", "e2e-worker.test",
		"WORKER_CONCURRENCY", "4"))
	worker.WaitLog(t, "worker started", "worker_id", 60*time.Second)
	testenv.WaitFor(t, "the first order's confirmation to be sent", 30*time.Second, sent(first))

	second, _ := checkout("budi@example.com", "bouncer-2")
	testenv.WaitFor(t, "the second order's confirmation to be sent", 30*time.Second, sent(second))

	byID := map[string]int{}
	for _, m := range sink.Messages() {
		byID[m.MessageID]++
	}
	for _, o := range []order.Order{first, second} {
		id := mail.MessageID(o.Notifications[0].IdempotencyKey, "shop.example")
		if byID[id] != 1 {
			t.Errorf("order %s: %d e-mails with Message-ID %s, want 1", o.ID, byID[id], id)
		}
	}
	if n := sink.Count(); n != 2 {
		t.Errorf("%d e-mails at the sink, want 2", n)
	}

	// The bouncer carried all three, on no more server connections than
	// its pool has.
	var apps []string
	for _, c := range bouncer.Admin(t, "SHOW CLIENTS") {
		if c["database"] == db.Name {
			apps = append(apps, c["application_name"])
		}
	}
	for _, app := range []string{"sekali-api", "sekali-worker", "sekali-reconciler"} {
		if !slices.Contains(apps, app) {
			t.Errorf("%s has no connection through the bouncer (clients: %v)", app, apps)
		}
	}
	if servers := len(bouncer.Admin(t, "SHOW SERVERS")); servers > poolSize || servers >= len(apps) {
		t.Errorf("%d server connections for %d clients, want at most %d and fewer than the clients", servers, len(apps), poolSize)
	}
}
