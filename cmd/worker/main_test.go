package main

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/roster"
	"github.com/sekali-dev/sekali/internal/smtp"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// world is what a worker process needs: a database, a queue, a sink, and
// an order service that records and enqueues checkouts the way the API does.
type world struct {
	db     testenv.DB
	redis  testenv.Redis
	sink   *smtpsink.Server
	orders *order.Service
}

func newWorld(t *testing.T, sinkCfg smtpsink.Config) *world {
	t.Helper()
	w := &world{db: testenv.NewDB(t), redis: testenv.NewRedis(t)}
	sink, err := smtpsink.Start(sinkCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	w.sink = sink
	rdb := redisconn.NewClient(w.redis.Opt)
	t.Cleanup(func() { rdb.Close() })
	reg := prometheus.NewRegistry()
	w.orders = order.NewService(w.db.Pool, queue.NewEnqueuer(rdb, w.redis.Queue, slog.New(slog.NewTextHandler(io.Discard, nil)), reg), nil, time.Hour, reg)
	return w
}

func (w *world) env(extra ...string) map[string]string {
	m := map[string]string{
		"DATABASE_URL":   w.db.URL,
		"REDIS_URL":      w.redis.URL,
		"DELIVERY_QUEUE": w.redis.Queue,
		"SMTP_HOST":      w.sink.Host(),
		"SMTP_PORT":      strconv.Itoa(w.sink.Port()),
		"SMTP_TLS":       "none",
		"MAIL_FROM":      "orders@shop.example",
		"METRICS_ADDR":   "127.0.0.1:0",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

func (w *world) checkout(t *testing.T, email string) notify.Delivery {
	t.Helper()
	price := int64(2500)
	o, err := w.orders.Place(context.Background(), order.Checkout{
		CustomerEmail: email, CustomerName: "Sari", Currency: "USD",
		Items: []order.CheckoutItem{{SKU: "MUG", Name: "Mug", Quantity: 1, UnitPrice: &price}},
	}, order.Caller{}, "")
	if err != nil {
		t.Fatal(err)
	}
	d, err := notify.GetByKey(context.Background(), w.db.Pool, o.Notifications[0].IdempotencyKey)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (w *world) delivery(t *testing.T, d notify.Delivery) notify.Delivery {
	t.Helper()
	got, err := notify.Get(context.Background(), w.db.Pool, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestRunSendsQueuedDeliveriesAndStopsOnCancel(t *testing.T) {
	t.Parallel()
	w := newWorld(t, smtpsink.Config{})
	worker := testenv.StartRun(t, run, w.env())

	var ds []notify.Delivery
	for _, email := range []string{"r1@example.com", "r2@example.com", "r3@example.com"} {
		ds = append(ds, w.checkout(t, email))
	}
	testenv.WaitFor(t, "three e-mails", 30*time.Second, func() bool { return w.sink.Count() == 3 })
	testenv.WaitFor(t, "three sent rows", 30*time.Second, func() bool {
		for _, d := range ds {
			if w.delivery(t, d).Status != notify.StatusSent {
				return false
			}
		}
		return true
	})
	// Informational, never asserted: how long one e-mail takes to leave an
	// idle worker. make bench measures it properly.
	var lat []time.Duration
	for i := range 10 {
		start := time.Now()
		w.checkout(t, "idle"+strconv.Itoa(i)+"@example.com")
		testenv.WaitFor(t, "the idle e-mail", 30*time.Second, func() bool { return w.sink.Count() == 4+i })
		lat = append(lat, time.Since(start))
	}
	t.Logf("checkout commit to message at the sink, idle worker: %v", lat)

	if err := worker.Stop(t, 60*time.Second); err != nil {
		t.Errorf("run = %v", err)
	}
	if logs := worker.Logs.String(); !strings.Contains(logs, `"msg":"delivery attempt"`) || !strings.Contains(logs, `"result":"sent"`) {
		t.Errorf("no per-attempt log lines:\n%s", logs)
	}
}

func TestConfigRefusesPlainTextSMTPToARealHost(t *testing.T) {
	t.Parallel()
	env := map[string]string{"SMTP_HOST": "smtp.sendgrid.net", "SMTP_TLS": "none", "SHUTDOWN_TIMEOUT": "5s", "WORKER_CONCURRENCY": "0"}
	_, err := loadConfig(func(k string) string { return env[k] })
	if err == nil {
		t.Fatal("plain-text SMTP to a remote host was accepted")
	}
	for _, want := range []string{"SMTP_TLS=none", "SHUTDOWN_TIMEOUT", "WORKER_CONCURRENCY"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	env = map[string]string{"SMTP_HOST": "smtp.sendgrid.net", "SMTP_TLS": "starttls", "SMTP_PORT": "587"}
	if _, err := loadConfig(func(k string) string { return env[k] }); err != nil {
		t.Errorf("starttls to a remote host refused: %v", err)
	}
}

// The settings of a mail server's bad minute: the old count-based
// MAX_ATTEMPTS is refused rather than silently ignored, and a bad EHLO
// name or CA file is reported with the rest.
func TestConfigOfTheSMTPSession(t *testing.T) {
	t.Parallel()
	env := map[string]string{"MAX_ATTEMPTS": "5", "SMTP_HELO": "bad name", "SMTP_CA_FILE": "/nonexistent/ca.pem",
		"DELIVERY_MAX_AGE": "0s", "PROVIDER_PROBE_INTERVAL": "soon"}
	_, err := loadConfig(func(k string) string { return env[k] })
	if err == nil {
		t.Fatal("bad configuration accepted")
	}
	for _, want := range []string{"MAX_ATTEMPTS", "DELIVERY_MAX_AGE (default 120h)", "SMTP_HELO", "SMTP_CA_FILE", "DELIVERY_MAX_AGE=", "PROVIDER_PROBE_INTERVAL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	cfg, err := loadConfig(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	relay, ok := cfg.Senders[0].(smtp.Config)
	if !ok || cfg.MaxAge != 120*time.Hour || relay.HeloName == "" || relay.HeloName == "shop.example" {
		t.Errorf("defaults: max age %v, sender %+v", cfg.MaxAge, cfg.Senders)
	}
}

// --- The worker as a separate process, killed or frozen at failpoints. ---

func startWorker(t *testing.T, env map[string]string) *testenv.Process {
	t.Helper()
	return testenv.Start(t, "worker", testenv.Binary(t, "./cmd/worker", "failpoints"), env)
}

// The crash of the case study: the provider accepted the message, the
// process died before "sent" was recorded. The next run must not send
// blindly: the row waits for the reconciler with the ambiguity recorded.
func TestCrashAfterProviderAcceptedIsNotResentBlindly(t *testing.T) {
	t.Parallel()
	w := newWorld(t, smtpsink.Config{})
	p := startWorker(t, w.env("SEKALI_FAILPOINTS", "after-accept=kill", "LOCK_TTL", "2s", "SMTP_TIMEOUT", "1s"))
	d := w.checkout(t, "crash@example.com")

	select {
	case <-p.Done():
		if p.Err() == nil || !strings.Contains(p.Err().Error(), "killed") {
			t.Fatalf("worker exited with %v, want killed at the failpoint", p.Err())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the worker did not reach the failpoint")
	}
	if n := w.sink.Count(); n != 1 {
		t.Fatalf("%d e-mails at the sink before the re-run, want 1", n)
	}
	got := w.delivery(t, d)
	if got.Status != notify.StatusSending || got.HandedOverAt == nil {
		t.Fatalf("row after the crash: %+v", got)
	}

	// Re-run once the dead worker's lease has run out, as asynq's
	// redelivery would.
	testenv.WaitFor(t, "the dead worker's lease to expire", 30*time.Second, func() bool {
		l := w.delivery(t, d).LeaseExpiresAt
		return l != nil && l.Before(time.Now())
	})
	// asynq would hand the orphaned task to a live worker once its own
	// lease runs out; enqueue the same delivery again to get there sooner.
	rerun := startWorker(t, w.env())
	client := asynq.NewClient(w.redis.Opt)
	defer client.Close()
	if _, err := client.Enqueue(queue.NewDeliverTask(d), asynq.Queue(w.redis.Queue)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the re-run to look at the row", 30*time.Second, func() bool {
		return strings.Contains(rerun.Output(), `"result":"left_for_reconciler"`)
	})
	got = w.delivery(t, d)
	if got.Status != notify.StatusSending || !strings.HasPrefix(got.LastError, "ambiguous") {
		t.Errorf("row after the re-run: status %s, last_error %q", got.Status, got.LastError)
	}
	if n := w.sink.Count(); n != 1 {
		t.Errorf("%d e-mails after the re-run, want 1", n)
	}
}

// Worker A is frozen (SIGSTOP) right before the data, past its lock and
// lease; worker B takes over and sends. When A wakes, its last lease check
// is refused: it sends nothing and writes nothing. One e-mail.
func TestPausedWorkerIsFencedOutByTheOneThatTookOver(t *testing.T) {
	t.Parallel()
	w := newWorld(t, smtpsink.Config{})
	a := startWorker(t, w.env("SEKALI_FAILPOINTS", "before-data=stop", "LOCK_TTL", "2s", "SMTP_TIMEOUT", "1s"))
	d := w.checkout(t, "pause@example.com")
	testenv.WaitFor(t, "worker A to freeze before the data", 30*time.Second, a.Stopped)
	testenv.WaitFor(t, "A's lease to expire", 30*time.Second, func() bool {
		l := w.delivery(t, d).LeaseExpiresAt
		return l != nil && l.Before(time.Now())
	})

	// B: the same binary without the failpoint, fed the task again.
	b := startWorker(t, w.env("LOCK_TTL", "2s", "SMTP_TIMEOUT", "1s"))
	client := asynq.NewClient(w.redis.Opt)
	defer client.Close()
	if _, err := client.Enqueue(queue.NewDeliverTask(d), asynq.Queue(w.redis.Queue)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "B to send", 30*time.Second, func() bool { return w.delivery(t, d).Status == notify.StatusSent })
	a.Signal(t, syscall.SIGCONT)
	testenv.WaitFor(t, "A to be fenced out", 30*time.Second, func() bool { return strings.Contains(a.Output(), `"result":"fenced_out"`) })
	if n := w.sink.Count(); n != 1 {
		t.Errorf("%d e-mails, want 1", n)
	}
	if got := w.delivery(t, d); got.Status != notify.StatusSent || got.Attempts != 2 {
		t.Errorf("row: status %s attempts %d", got.Status, got.Attempts)
	}
	_ = b
}

// SIGTERM during a send lets it finish and record "sent" before exiting.
func TestSIGTERMLetsTheSendInProgressFinish(t *testing.T) {
	t.Parallel()
	inData := make(chan struct{}, 1)
	w := newWorld(t, smtpsink.Config{DataDelay: func(*smtpsink.Message) time.Duration {
		inData <- struct{}{}
		return time.Second
	}})
	p := startWorker(t, w.env())
	d := w.checkout(t, "term@example.com")
	select {
	case <-inData:
	case <-time.After(60 * time.Second):
		t.Fatal("the send never started")
	}
	p.Signal(t, syscall.SIGTERM)
	select {
	case <-p.Done():
		if p.Err() != nil {
			t.Errorf("worker exited with %v, want a clean exit", p.Err())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the worker did not exit after SIGTERM")
	}
	if got := w.delivery(t, d); got.Status != notify.StatusSent {
		t.Errorf("row after SIGTERM: %s (%s)", got.Status, got.LastError)
	}
	if n := w.sink.Count(); n != 1 {
		t.Errorf("%d e-mails, want 1", n)
	}
}

// PROVIDER names the sender; its settings are checked at start, all at
// once, and its request timeout must end before the lease can.
func TestConfigOfAnHTTPProvider(t *testing.T) {
	t.Parallel()
	env := map[string]string{"PROVIDER": "resend", "RESEND_BASE_URL": "http://api.resend.example", "PROVIDER_TIMEOUT": "30s", "LOCK_TTL": "30s"}
	_, err := loadConfig(func(k string) string { return env[k] })
	if err == nil {
		t.Fatal("bad configuration accepted")
	}
	for _, want := range []string{"RESEND_API_KEY", "http://api.resend.example", "PROVIDER_TIMEOUT"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if _, err := loadConfig(func(k string) string { return map[string]string{"PROVIDER": "sendgrid"}[k] }); err == nil || !strings.Contains(err.Error(), "PROVIDER") {
		t.Errorf("an unknown provider: %v", err)
	}
	env = map[string]string{"PROVIDER": "mailgun", "MAILGUN_API_KEY": "key-0123456789abcdef", "MAILGUN_DOMAIN": "mg.shop.example"}
	cfg, err := loadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if timeout, name := cfg.Senders[0].SendTimeout(); cfg.Providers[0].Name != "mailgun" || timeout != 15*time.Second || name != "PROVIDER_TIMEOUT" {
		t.Errorf("mailgun: %+v", cfg.Senders)
	}
}

// DKIM settings are the SMTP path's: with an HTTP provider, which signs
// with the domain verified with it, they are refused rather than ignored;
// with SMTP, a key that does not parse stops the worker at start.
func TestConfigOfDKIM(t *testing.T) {
	t.Parallel()
	env := map[string]string{"PROVIDER": "mailgun", "MAILGUN_API_KEY": "key-0123456789abcdef", "MAILGUN_DOMAIN": "mg.shop.example",
		"DKIM_DOMAIN": "shop.example"}
	if _, err := loadConfig(func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "DKIM_DOMAIN") {
		t.Errorf("DKIM with PROVIDER=mailgun: %v", err)
	}
	env = map[string]string{"MAIL_FROM": "Toko Ana <orders@shop.example>", "DKIM_DOMAIN": "shop.example", "DKIM_SELECTOR": "s1",
		"DKIM_PRIVATE_KEY_FILE": "/nonexistent/dkim.pem"}
	if _, err := loadConfig(func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "DKIM_PRIVATE_KEY_FILE") {
		t.Errorf("a DKIM key that cannot be read: %v", err)
	}
	delete(env, "DKIM_DOMAIN")
	delete(env, "DKIM_SELECTOR")
	delete(env, "DKIM_PRIVATE_KEY_FILE")
	if _, err := loadConfig(func(k string) string { return env[k] }); err != nil {
		t.Errorf("MAIL_FROM with a display name: %v", err)
	}
}

// The brand the layouts show is read and checked with the rest: every
// problem at once, the support address normalized.
func TestConfigOfTheBrand(t *testing.T) {
	t.Parallel()
	env := map[string]string{"BRAND_NAME": "Toko Ana", "BRAND_LOGO_URL": "https://shop.example/logo.png",
		"BRAND_ADDRESS": "Jl. Melati 7, Bandung", "BRAND_SUPPORT_EMAIL": "Help@Shop.Example"}
	cfg, err := loadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if want := (mailtemplate.Brand{Name: "Toko Ana", LogoURL: "https://shop.example/logo.png", Address: "Jl. Melati 7, Bandung", SupportEmail: "help@shop.example"}); !reflect.DeepEqual(cfg.Brand, want) {
		t.Errorf("Brand = %+v, want %+v", cfg.Brand, want)
	}
	// The default MAIL_FROM, a bare address, goes out under the brand's
	// name; one with a name of its own keeps it.
	if want := `"Toko Ana" <orders@shop.example>`; cfg.From != want {
		t.Errorf("From = %q, want %q", cfg.From, want)
	}
	env["MAIL_FROM"] = "Toko Ana Orders <orders@shop.example>"
	if cfg, err = loadConfig(func(k string) string { return env[k] }); err != nil || cfg.From != env["MAIL_FROM"] {
		t.Errorf("From = %q, %v; want MAIL_FROM's own name", cfg.From, err)
	}
	env = map[string]string{"BRAND_NAME": "Toko\nAna", "BRAND_LOGO_URL": "http://shop.example/logo.png", "BRAND_SUPPORT_EMAIL": "help",
		"SHOP_TIMEZONE": "Asia/Bandung", "SHOP_ORDER_URL": "http://shop.example/orders/{reference}", "SHOP_TRACKING_URLS": "JNE"}
	_, err = loadConfig(func(k string) string { return env[k] })
	for _, name := range []string{"BRAND_NAME", "BRAND_LOGO_URL", "BRAND_SUPPORT_EMAIL", "SHOP_TIMEZONE", "SHOP_ORDER_URL", "SHOP_TRACKING_URLS"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("error %v does not name %s", err, name)
		}
	}
}

// A worker with a subscription template refuses to start without
// one-click unsubscribe; UNSUBSCRIBE_URL must be https.
func TestSubscriptionTemplatesNeedUnsubscribe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"newsletter/schema.json":  `{"type": "object"}`,
		"newsletter/sample.json":  `{}`,
		"newsletter/meta.json":    `{"category": "subscription"}`,
		"newsletter/subject.tmpl": "Kabar",
		"newsletter/text.tmpl":    "Halo",
		"newsletter/html.tmpl":    "<p>Halo</p>",
	} {
		testenv.WriteFile(t, filepath.Join(dir, filepath.FromSlash(name)), body)
	}
	env := map[string]string{"TEMPLATES_DIR": dir, "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none"}
	err := run(context.Background(), nil, func(k string) string { return env[k] }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "UNSUBSCRIBE_URL") || !strings.Contains(err.Error(), "newsletter") {
		t.Errorf("a subscription template without UNSUBSCRIBE_*: %v", err)
	}
	env = map[string]string{"UNSUBSCRIBE_URL": "http://shop.example/sekali", "UNSUBSCRIBE_SECRET": "short"}
	if _, err := loadConfig(func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "UNSUBSCRIBE_URL") || !strings.Contains(err.Error(), "UNSUBSCRIBE_SECRET") {
		t.Errorf("http and a short secret: %v", err)
	}
}

// PROVIDERS is an ordered list, each provider reading its own settings;
// a name that does not send, a name twice, or PROVIDER beside it is
// refused at start.
func TestConfigOfProviders(t *testing.T) {
	t.Parallel()
	env := map[string]string{"PROVIDERS": "postmark, smtp", "POSTMARK_SERVER_TOKEN": "00000000-0000-0000-0000-000000000000",
		"SMTP_HOST": "relay.shop.example", "SMTP_PORT": "587", "SMTP_TLS": "starttls"}
	cfg, err := loadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if got := roster.Names(cfg.Providers); !slices.Equal(got, []string{"postmark", "smtp"}) || len(cfg.Senders) != 2 {
		t.Fatalf("providers %v, %d senders", got, len(cfg.Senders))
	}
	if relay, ok := cfg.Senders[1].(smtp.Config); !ok || relay.Host != "relay.shop.example" {
		t.Errorf("the second sender %+v, want smtp at relay.shop.example", cfg.Senders[1])
	}
	if got := senderNames(cfg.Senders); got != "postmark, then smtp relay.shop.example:587" {
		t.Errorf("start-up line %q", got)
	}
	for list, want := range map[string]string{
		"postmark,sendgrid": `"sendgrid" is not a provider that sends`,
		"smtp,smtp":         "smtp is named twice",
		"smtp,":             `"" is not a provider`,
	} {
		env := map[string]string{"PROVIDERS": list}
		if _, err := loadConfig(func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "PROVIDERS: ") || !strings.Contains(err.Error(), want) {
			t.Errorf("PROVIDERS=%s: %v, want %q", list, err, want)
		}
	}
	// Each provider's timeout must be under LOCK_TTL; PROVIDER_TIMEOUT,
	// which the HTTP providers share, is named once.
	slow := map[string]string{"PROVIDERS": "smtp,resend,postmark", "RESEND_API_KEY": "re_x", "POSTMARK_SERVER_TOKEN": "t",
		"LOCK_TTL": "10s", "SMTP_TIMEOUT": "10s", "PROVIDER_TIMEOUT": "12s"}
	if _, err := loadConfig(func(k string) string { return slow[k] }); err == nil ||
		strings.Count(err.Error(), "SMTP_TIMEOUT") != 1 || strings.Count(err.Error(), "PROVIDER_TIMEOUT") != 1 {
		t.Errorf("timeouts past LOCK_TTL: %v, want SMTP_TIMEOUT and PROVIDER_TIMEOUT named once each", err)
	}
	both := map[string]string{"PROVIDERS": "smtp", "PROVIDER": "smtp"}
	if _, err := loadConfig(func(k string) string { return both[k] }); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("PROVIDER and PROVIDERS: %v", err)
	}
	// DKIM signs the SMTP path: with smtp in the list it is taken.
	env["DKIM_DOMAIN"] = "shop.example"
	if _, err := loadConfig(func(k string) string { return env[k] }); err == nil || strings.Contains(err.Error(), "is for PROVIDER=smtp") ||
		!strings.Contains(err.Error(), "go together") {
		t.Errorf("partial DKIM with smtp second: %v, want smtp's own check", err)
	}
}
