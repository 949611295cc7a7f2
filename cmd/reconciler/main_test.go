package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify/notifytest"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// reconciler --once runs one pass and prints what it did.
func TestOncePrintsWhatItDid(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	dead := redisconn.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:1"})
	defer dead.Close()
	reg := prometheus.NewRegistry()
	orders := order.NewService(db.Pool, queue.NewEnqueuer(dead, rd.Queue, slog.New(slog.NewTextHandler(io.Discard, nil)), reg), nil, time.Hour, reg)
	price := int64(100)
	var ids []uuid.UUID
	f := notifytest.New(t, db.Pool)
	for _, email := range []string{"o1@example.com", "o2@example.com", "held@example.com"} {
		o, err := orders.Place(ctx, order.Checkout{CustomerEmail: email, CustomerName: "N", Currency: "USD",
			Items: []order.CheckoutItem{{SKU: "A", Name: "A", Quantity: 1, UnitPrice: &price}}}, order.Caller{}, "")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, o.Notifications[0].ID)
		d := f.Get(o.Notifications[0].ID)
		if email == "held@example.com" { // its worker died a minute after handing it over
			d = f.HandedOver(d, time.Minute).Delivery
		}
		f.Aged(d, time.Hour) // the orphans untouched for an hour
	}

	// A one-off pass runs beside the daemon, whose PPROF_ADDR is taken:
	// it must not try to serve profiles there.
	daemon, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer daemon.Close()
	env := map[string]string{
		"DATABASE_URL": db.URL, "REDIS_URL": rd.URL, "DELIVERY_QUEUE": rd.Queue,
		"RECONCILE_DEFAULT_POLICY": "hold", "PENDING_REENQUEUE_AFTER": "1m",
		"PPROF_ADDR": daemon.Addr().String(),
	}
	var stdout, stderr bytes.Buffer
	if err := run(ctx, []string{"--once"}, func(k string) string { return env[k] }, &stdout, &stderr); err != nil {
		t.Fatalf("run --once: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"stale_sending=1", "held=1", "requeued_pending=2", "policy_hold=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("report %q lacks %s", out, want)
		}
	}
	if !strings.Contains(stderr.String(), `"decision":"policy_hold"`) {
		t.Errorf("no decision log line:\n%s", stderr.String())
	}
	ins := asynq.NewInspector(rd.Opt)
	defer ins.Close()
	pending, err := ins.ListPendingTasks(rd.Queue)
	if err != nil {
		t.Fatal(err)
	}
	queued := map[uuid.UUID]bool{} // in a task of its own or a task of many
	for _, info := range pending {
		task, err := queue.ParseTask(info.Payload)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range task.Deliveries {
			queued[p.DeliveryID] = true
		}
	}
	for _, id := range ids[:2] {
		if !queued[id] {
			t.Errorf("delivery %s not queued: %v", id, pending)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"RECONCILE_POLICIES":       "order-confirmation=resend,order-cancelled=hold,order-shipped=maybe",
		"RECONCILE_DEFAULT_POLICY": "sometimes",
		"MAIL_LOOKUP_API":          "sendgrid",
		"MAIL_LOOKUP_URL":          "ftp://mail.example",
		"RECONCILE_INTERVAL":       "0s",
		"DELIVERY_RETENTION":       "-1h",
		"TASK_BATCH":               "0",
	}
	err := run(context.Background(), []string{"--once"}, func(k string) string { return env[k] }, io.Discard, io.Discard)
	if err == nil {
		t.Fatal("bad configuration accepted")
	}
	for _, want := range []string{"order-cancelled", "order-shipped=maybe", "RECONCILE_DEFAULT_POLICY", "MAIL_LOOKUP_API", "MAIL_LOOKUP_URL", "RECONCILE_INTERVAL", "DELIVERY_RETENTION", "TASK_BATCH"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

// Zero means "keep" however it is written.
func TestZeroRetentionIsOneRule(t *testing.T) {
	t.Parallel()
	templates, err := mailtemplate.LoadBuiltin()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"", "0", "0s", "0h"} {
		cfg, err := loadConfig(func(k string) string { return map[string]string{"DELIVERY_RETENTION": v}[k] }, templates)
		if err != nil || cfg.Reconcile.DeliveryRetention != 0 {
			t.Errorf("DELIVERY_RETENTION=%q: %v, retention %v", v, err, cfg.Reconcile.DeliveryRetention)
		}
	}
}

// A look-up URL that answers, but not the configured API, stops the
// reconciler at start with a message that says what to do; auto finds
// the right one.
func TestWrongLookupAPIStopsTheReconcilerAtStart(t *testing.T) {
	t.Parallel()
	mp := testenv.StartMailpit(t, testenv.MailpitOptions{})
	db := testenv.NewDB(t)
	rd := testenv.NewRedis(t)
	env := map[string]string{
		"DATABASE_URL": db.URL, "REDIS_URL": rd.URL, "DELIVERY_QUEUE": rd.Queue,
		"MAIL_LOOKUP_URL": mp.URL, "MAIL_LOOKUP_API": "mailhog",
	}
	start := time.Now()
	err := run(context.Background(), []string{"--once"}, func(k string) string { return env[k] }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "not the mailhog API") || !strings.Contains(err.Error(), "MAIL_LOOKUP_API=auto") {
		t.Fatalf("run with MailHog's API against Mailpit: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a server that answered the wrong API was retried for %v", took)
	}
	env["MAIL_LOOKUP_API"] = "auto"
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"--once"}, func(k string) string { return env[k] }, &stdout, io.Discard); err != nil {
		t.Fatalf("auto: %v", err)
	}
}

// With an HTTP provider the reconciler settles ambiguous sends that
// provider's way: a Mailpit look-up is refused next to it, and Resend's
// dedup window defaults to just under the 24 hours Resend keeps a key.
func TestProviderSettings(t *testing.T) {
	t.Parallel()
	templates, err := mailtemplate.LoadBuiltin()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"PROVIDER": "resend", "MAIL_LOOKUP_URL": "http://mailpit:8025"}
	if _, err := loadConfig(func(k string) string { return env[k] }, templates); err == nil || !strings.Contains(err.Error(), "MAIL_LOOKUP_URL") {
		t.Errorf("a Mailpit look-up with PROVIDER=resend: %v", err)
	}
	env = map[string]string{"PROVIDER": "postmark", "POSTMARK_SERVER_TOKEN": "token", "MAIL_LOOKUP_API": "sendgrid"}
	if _, err := loadConfig(func(k string) string { return env[k] }, templates); err == nil || !strings.Contains(err.Error(), "MAIL_LOOKUP_API") {
		t.Errorf("MAIL_LOOKUP_API with PROVIDER=postmark: %v", err)
	}
	cfg, err := loadConfig(func(k string) string { return map[string]string{"PROVIDER": "resend"}[k] }, templates)
	if err != nil {
		t.Fatal(err)
	}
	if w := cfg.Reconcile.Providers[0].DedupWindow; w != 23*time.Hour {
		t.Errorf("resend's dedup window = %v, want 23h", w)
	}
	cfg, err = loadConfig(func(string) string { return "" }, templates)
	if err != nil {
		t.Fatal(err)
	}
	if w := cfg.Reconcile.Providers[0].DedupWindow; w != 0 {
		t.Errorf("smtp's dedup window = %v, want none", w)
	}
	// With failover, each provider is settled its own way: Resend by its
	// key, Postmark by its search, the relay by Mailpit's.
	env = map[string]string{"PROVIDERS": "resend,postmark,smtp", "POSTMARK_SERVER_TOKEN": "token", "MAIL_LOOKUP_URL": "http://127.0.0.1:8025"}
	if cfg, err = loadConfig(func(k string) string { return env[k] }, templates); err != nil {
		t.Fatal(err)
	}
	if cfg.Lookups[0] != nil || cfg.Lookups[1] == nil || cfg.Lookups[2] == nil {
		t.Fatalf("look-ups %v: want none for resend, one for postmark and the relay", cfg.Lookups)
	}
	// Postmark's opens without a request; the relay's would ask Mailpit.
	if cfg.Reconcile.Providers[1].Lookup, err = cfg.Lookups[1](context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := providerLine(cfg.Reconcile.Providers), "resend (dedup 23h0m0s), postmark (look-up), smtp (policy)"; got != want {
		t.Errorf("providers %q, want %q", got, want)
	}
	env = map[string]string{"PROVIDER": "postmark", "POSTMARK_RETENTION": "9000h"}
	if _, err := loadConfig(func(k string) string { return env[k] }, templates); err == nil || !strings.Contains(err.Error(), "POSTMARK") {
		t.Errorf("postmark without a token, retention past a year: %v", err)
	}
}
