// Package e2e_test drives the API, the worker and the reconciler together
// against the real PostgreSQL, Redis and an SMTP sink: in one process, or
// as the binaries they ship as (pgbouncer_test.go).
package e2e_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/httpapi"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/notify/notifytest"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/reconcile"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/smtp"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
	"github.com/sekali-dev/sekali/internal/worker"
	"github.com/sekali-dev/sekali/internal/worker/workertest"
)

// component is one binary's registry and log.
type component struct {
	reg  *prometheus.Registry
	logs *testenv.Buffer
	log  *slog.Logger
}

func newComponent(wrap func(slog.Handler) slog.Handler) component {
	c := component{reg: prometheus.NewRegistry(), logs: &testenv.Buffer{}}
	var h slog.Handler = slog.NewJSONHandler(c.logs, nil)
	if wrap != nil {
		h = wrap(h)
	}
	c.log = slog.New(h)
	return c
}

func (c component) value(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	return testenv.Metric(t, c.reg, name, labels...)
}

// lines decodes a JSON log.
func (c component) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(c.logs.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON log line: %q", l)
		}
		out = append(out, m)
	}
	return out
}

// The case study's observability test: a duplicate task, a lock
// contention, a retry and a reconciled row, each visible in the counters
// that name it and in log lines that carry the fields an on-call engineer
// needs, with no e-mail address anywhere.
func TestEverySignalMovesAndLogsCarryTheirFields(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	rd := testenv.NewRedis(t)
	var refusedOnce atomic.Bool
	sink, err := smtpsink.Start(smtpsink.Config{OnRcpt: func(to string) error {
		if strings.HasPrefix(to, "retry.me") && refusedOnce.CompareAndSwap(false, true) {
			return &gosmtp.SMTPError{Code: 451, EnhancedCode: gosmtp.EnhancedCode{4, 3, 0}, Message: "try later"}
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	lookupAPI := httptest.NewServer(sink.Handler())
	t.Cleanup(lookupAPI.Close)
	rdb := redisconn.NewClient(rd.Opt)
	t.Cleanup(func() { rdb.Close() })
	client := asynq.NewClient(rd.Opt)
	t.Cleanup(func() { client.Close() })
	inspector := asynq.NewInspector(rd.Opt)
	t.Cleanup(func() { inspector.Close() })
	templates, err := mailtemplate.LoadBuiltin()
	if err != nil {
		t.Fatal(err)
	}

	// API
	api := newComponent(httpapi.LogHandler)
	enq := queue.NewEnqueuer(rdb, rd.Queue, api.log, api.reg)
	orders := order.NewService(db.Pool, enq, templates, time.Hour, api.reg)
	keys := apikey.NewService(db.Pool)
	backendKey := newBackendKey(t, keys)
	apiSrv := httptest.NewServer(httpapi.NewServer(httpapi.Deps{Log: api.log, Orders: orders, Templates: templates, Keys: keys,
		Registry: api.reg, Admin: httpapi.Admin{Ops: notify.NewOperator(db.Pool, enq, inspector, rdb)}}))
	t.Cleanup(apiSrv.Close)

	// Worker
	wk := newComponent(nil)
	provider, err := smtp.New(smtp.Config{Host: sink.Host(), Port: sink.Port(), TLS: smtp.TLSNone,
		From: "orders@shop.example", IdempotencyHeader: "Idempotency-Key", Timeout: 5 * time.Second, MaxIdle: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(provider.Close)
	w := worker.New(db.Pool, rdb, worker.Only("smtp", provider), templates, worker.Config{
		LockTTL: 5 * time.Second, MaxAge: time.Hour, ProbeInterval: time.Second, SendTimeout: 10 * time.Second, MessageIDDomain: "shop.example",
		WorkerID: "e2e-worker", Queue: rd.Queue, Concurrency: 4,
	}, wk.log, worker.NewMetrics(wk.reg))
	workertest.Serve(t, w, worker.ServerConfig{Redis: rd.Opt, DelayedTaskCheckInterval: 100 * time.Millisecond, RetryBase: 200 * time.Millisecond})

	// Reconciler
	rc := newComponent(nil)
	lookup, err := smtp.NewLookup(ctx, smtp.APIMailpit, lookupAPI.URL)
	if err != nil {
		t.Fatal(err)
	}
	rec := reconcile.New(db.Pool, enq, inspector, reconcile.Config{PendingAfter: time.Minute, Batch: 10,
		DefaultPolicy: reconcile.PolicyHold, MessageIDDomain: "shop.example", Actor: "e2e-reconciler",
		Providers: []reconcile.Provider{{Name: "smtp", Lookup: lookup}}}, rc.log, rc.reg)

	checkout := func(email, key string) order.Order {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, apiSrv.URL+"/v1/orders", strings.NewReader(
			`{"customer_email":"`+email+`","customer_name":"Rina","currency":"IDR","items":[{"sku":"S","name":"Sambal","quantity":1,"unit_price":2500000}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+backendKey)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var o order.Order
		if err := json.NewDecoder(res.Body).Decode(&o); err != nil || res.StatusCode != http.StatusCreated {
			t.Fatalf("checkout: %d %v", res.StatusCode, err)
		}
		return o
	}
	sent := func(o order.Order) func() bool {
		return func() bool {
			d, err := notify.Get(ctx, db.Pool, o.Notifications[0].ID)
			return err == nil && d.Status == notify.StatusSent
		}
	}

	// A producer resend: the same Idempotency-Key twice.
	first := checkout("dup.producer@example.com", "key-1")
	checkout("dup.producer@example.com", "key-1")
	testenv.WaitFor(t, "the first order to be sent", 30*time.Second, sent(first))

	// A broker redelivery: the same task again, after it was sent.
	delivery, _ := notify.Get(ctx, db.Pool, first.Notifications[0].ID)
	if _, err := client.Enqueue(queue.NewDeliverTask(delivery), asynq.Queue(rd.Queue)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the redelivery to be suppressed", 30*time.Second, func() bool {
		return wk.value(t, "sekali_duplicate_detected_total", "layer", "cache") >= 1
	})

	// Lock contention: another holder has the delivery's lock when its
	// task arrives (the task is queued after the lock is taken).
	contended := checkoutWithoutTask(t, ctx, db, "contended@example.com")
	workertest.HoldLock(t, rdb, contended, time.Minute)
	if err := enq.Enqueue(ctx, contended); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the lock to be found busy", 30*time.Second, func() bool { return wk.value(t, "sekali_lock_acquire_failed_total") >= 1 })
	rdb.Del(ctx, workertest.LockKey(contended))
	testenv.WaitFor(t, "the contended delivery to be sent", 30*time.Second, func() bool {
		d, _ := notify.Get(ctx, db.Pool, contended.ID)
		return d.Status == notify.StatusSent
	})

	// A retry: the provider answers 451 once.
	retried := checkout("retry.me@example.com", "")
	testenv.WaitFor(t, "the retried delivery to be sent", 30*time.Second, sent(retried))

	// A reconciled row: a worker died after handing it over; the provider
	// never got it.
	stranded := checkoutWithoutTask(t, ctx, db, "stranded@example.com")
	f := notifytest.New(t, db.Pool)
	f.Aged(f.HandedOver(stranded, 59*time.Second).Delivery, time.Minute)
	if _, err := rec.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the reconciled delivery to be sent", 30*time.Second, func() bool {
		d, _ := notify.Get(ctx, db.Pool, stranded.ID)
		return d.Status == notify.StatusSent
	})

	// Counters.
	for _, c := range []struct {
		comp   component
		name   string
		labels []string
	}{
		{api, "sekali_duplicate_detected_total", []string{"layer", "api_idempotency"}},
		{api, "sekali_orders_created_total", nil},
		{wk, "sekali_duplicate_detected_total", []string{"layer", "cache"}},
		{wk, "sekali_lock_acquire_success_total", nil},
		{wk, "sekali_lock_acquire_failed_total", nil},
		{wk, "sekali_job_retry_total", []string{"reason", "smtp_4xx"}},
		{wk, "sekali_job_retry_total", []string{"reason", "lock_busy"}},
		{wk, "sekali_deliveries_total", []string{"outcome", "sent", "template", "order-confirmation"}},
		{wk, "sekali_deliveries_total", []string{"outcome", "retried"}},
		{rc, "sekali_reconciler_decisions_total", []string{"decision", reconcile.DecisionNotFound}},
		{rc, "sekali_stale_processing_records", nil},
	} {
		if v := c.comp.value(t, c.name, c.labels...); v < 1 {
			t.Errorf("%s%v = %v, want it to have moved", c.name, c.labels, v)
		}
	}
	for _, histogram := range []string{"sekali_job_processing_duration_seconds", "sekali_provider_send_duration_seconds"} {
		if !gathered(t, wk.reg, histogram) {
			t.Errorf("%s has no observations", histogram)
		}
	}

	// Log fields.
	attempts := 0
	for _, l := range wk.lines(t) {
		if l["msg"] != "delivery attempt" {
			continue
		}
		attempts++
		for _, f := range []string{"task_id", "retry", "worker_id", "delivery_id", "key_hash", "result", "duration_ms"} {
			if _, ok := l[f]; !ok {
				t.Errorf("attempt line lacks %s: %v", f, l)
			}
		}
		switch l["result"] {
		case "sent":
			for _, f := range []string{"order_id", "template", "attempt", "lock_key", "lock", "from_status", "to_status", "provider_message_id"} {
				if _, ok := l[f]; !ok {
					t.Errorf("sent line lacks %s: %v", f, l)
				}
			}
		case "retried":
			if l["error_class"] != "temporary" || l["smtp_code"] != float64(451) {
				t.Errorf("retried line: %v", l)
			}
		}
	}
	if attempts < 5 {
		t.Errorf("%d attempt lines", attempts)
	}
	for _, l := range api.lines(t) {
		if _, ok := l["request_id"]; !ok {
			t.Errorf("API line without request_id: %v", l)
		}
	}
	reconciled := false
	for _, l := range rc.lines(t) {
		reconciled = reconciled || (l["msg"] == "reconciled" && l["key_hash"] != nil && l["decision"] == reconcile.DecisionNotFound)
	}
	if !reconciled {
		t.Errorf("no reconciler decision line:\n%s", rc.logs)
	}
	for name, c := range map[string]component{"api": api, "worker": wk, "reconciler": rc} {
		if strings.Contains(c.logs.String(), "@example.com") {
			t.Errorf("the %s log carries an e-mail address", name)
		}
	}
}

func checkoutWithoutTask(t *testing.T, ctx context.Context, db testenv.DB, email string) notify.Delivery {
	t.Helper()
	// An order recorded by a service whose queue is unreachable: the
	// intent exists, no task does.
	dead := redisconn.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:1"})
	defer dead.Close()
	reg := prometheus.NewRegistry()
	svc := order.NewService(db.Pool, queue.NewEnqueuer(dead, "none", slog.New(slog.NewTextHandler(io.Discard, nil)), reg), nil, time.Hour, reg)
	price := int64(100)
	o, err := svc.Place(ctx, order.Checkout{CustomerEmail: email, CustomerName: "N", Currency: "IDR",
		Items: []order.CheckoutItem{{SKU: "S", Name: "S", Quantity: 1, UnitPrice: &price}}}, order.Caller{}, "")
	if err != nil {
		t.Fatal(err)
	}
	d, err := notify.Get(ctx, db.Pool, o.Notifications[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func gathered(t *testing.T, reg *prometheus.Registry, name string) bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == name && m.GetHistogram().GetSampleCount() > 0 {
				return true
			}
		}
	}
	return false
}

// newBackendKey makes the API key a shop's backend checks out with.
func newBackendKey(t *testing.T, keys *apikey.Service) string {
	t.Helper()
	_, key, err := keys.Create(context.Background(), "test", "e2e backend", []apikey.Scope{apikey.ScopeCheckout})
	if err != nil {
		t.Fatal(err)
	}
	return key
}
