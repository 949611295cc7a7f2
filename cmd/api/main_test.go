package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// sock is a checkout of one pair of socks for name at email.
func sock(email, name string) string {
	return `{"customer_email":"` + email + `","customer_name":"` + name + `","currency":"USD","items":[{"sku":"S","name":"Sock","quantity":1,"unit_price":500}]}`
}

// checkout posts body to base's checkout, with the API key if one is
// given, and returns the status.
func checkout(t *testing.T, base, key, body string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/orders", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// CHECKOUT_MODE=public takes checkouts without a key, held to the public
// rules and to the hourly caps, counted in Redis: per recipient, and per
// client address the distinct recipients it has mailed.
func TestRunTakesPublicCheckouts(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	rd := testenv.NewRedis(t)
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	api := testenv.StartRun(t, run, map[string]string{
		"DATABASE_URL": db.URL, "REDIS_URL": rd.URL, "HTTP_ADDR": "127.0.0.1:0", "METRICS_ADDR": metricsAddr, "DELIVERY_QUEUE": rd.Queue,
		"CHECKOUT_MODE": "public", "PUBLIC_CHECKOUT_PER_RECIPIENT": "1", "PUBLIC_CHECKOUT_PER_CLIENT": "2",
	})
	base := "http://" + api.WaitLog(t, "api listening", "addr", 30*time.Second)
	if !strings.Contains(api.Logs.String(), "TRUSTED_PROXIES is not set: the public checkout's cap per client and its share per network count each connection's peer") {
		t.Error("no warning that without TRUSTED_PROXIES the cap per client counts the load balancer")
	}
	if !strings.Contains(api.Logs.String(), "a network's share 10%, kept for networks not seen 20%") {
		t.Error("the start-up line does not name the defaults of the share per network and of the part kept")
	}
	for _, tt := range []struct {
		body   string
		status int
	}{
		{sock("ana@example.com", "Ana"), http.StatusCreated},
		{sock("ana@example.com", "Ana"), http.StatusTooManyRequests}, // one confirmation an hour to her
		{sock("budi@example.com", "Budi, see https://evil.test"), http.StatusUnprocessableEntity},
		{strings.Replace(sock("budi@example.com", "Budi"), `"unit_price":500`, `"unit_price":0`, 1), http.StatusUnprocessableEntity},
		{sock("budi@example.com", "Budi"), http.StatusCreated},
		{sock("citra@example.com", "Citra"), http.StatusTooManyRequests}, // this address's third stranger
	} {
		if got := checkout(t, base, "", tt.body); got != tt.status {
			t.Errorf("%s: %d, want %d", tt.body, got, tt.status)
		}
	}
	res, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, m := range []string{`sekali_public_checkouts_total{result="admitted"} 2`, `sekali_public_checkouts_total{result="recipient"} 1`,
		`sekali_public_checkouts_total{result="client"} 1`} {
		if !strings.Contains(string(metrics), m) {
			t.Errorf("/metrics lacks %q", m)
		}
	}
	if err := api.Stop(t, 20*time.Second); err != nil {
		t.Errorf("run after cancel = %v, want nil", err)
	}
}

func TestRunServesCheckoutsAndShutsDownOnCancel(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	rd := testenv.NewRedis(t)
	pprofAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	env := map[string]string{
		"DATABASE_URL":   db.URL,
		"REDIS_URL":      rd.URL,
		"HTTP_ADDR":      "127.0.0.1:0",
		"METRICS_ADDR":   metricsAddr,
		"DELIVERY_QUEUE": rd.Queue,
		"PPROF_ADDR":     pprofAddr,
	}
	api := testenv.StartRun(t, run, env)
	addr := api.WaitLog(t, "api listening", "addr", 30*time.Second)
	base := "http://" + addr

	healthEnv := map[string]string{"HTTP_ADDR": addr}
	if err := run(context.Background(), []string{"healthcheck"}, func(k string) string { return healthEnv[k] }, io.Discard, io.Discard); err != nil {
		t.Errorf("api healthcheck against the running API: %v", err)
	}

	res, err := http.Get(base + "/readyz")
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("readyz: %v %v", res, err)
	}
	res.Body.Close()
	// By default a checkout needs the shop's server's key.
	if status := checkout(t, base, "", sock("budi@example.com", "Budi")); status != http.StatusUnauthorized {
		t.Errorf("a checkout without an API key = %d, want 401", status)
	}
	_, key, err := apikey.NewService(db.Pool).Create(context.Background(), "test", "checkout server", []apikey.Scope{apikey.ScopeCheckout})
	if err != nil {
		t.Fatal(err)
	}
	if status := checkout(t, base, key, sock("budi@example.com", "Budi")); status != http.StatusCreated {
		t.Fatalf("a keyed checkout = %d", status)
	}
	// /metrics is on METRICS_ADDR only, never on the public listener.
	res, err = http.Get(base + "/metrics")
	if err != nil || res.StatusCode != http.StatusNotFound {
		t.Errorf("/metrics on HTTP_ADDR: %v %v, want 404", res, err)
	}
	res.Body.Close()
	res, err = http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, m := range []string{"sekali_orders_created_total 1", "go_goroutines", "process_resident_memory_bytes", "sekali_http_request_duration_seconds_bucket"} {
		if !strings.Contains(string(metrics), m) {
			t.Errorf("/metrics lacks %q", m)
		}
	}

	// PPROF_ADDR serves the runtime profiles on their own listener.
	res, err = http.Get("http://" + pprofAddr + "/debug/pprof/cmdline")
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("profiles on PPROF_ADDR %s: %v %v", pprofAddr, res, err)
	}
	res.Body.Close()

	if err := api.Stop(t, 20*time.Second); err != nil {
		t.Errorf("run after cancel = %v, want nil", err)
	}
	if res, err := http.Get("http://" + pprofAddr + "/debug/pprof/cmdline"); err == nil {
		res.Body.Close()
		t.Error("the profile server still answers after the API stopped")
	}
	if err := run(context.Background(), []string{"healthcheck"}, func(k string) string { return healthEnv[k] }, io.Discard, io.Discard); err == nil {
		t.Error("api healthcheck passed with the API stopped")
	}
}

// Several replicas starting at once against an empty database all come
// up: goose's advisory lock lets one migrate while the others wait.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	// Start from an empty schema, not the template's migrated one.
	if _, err := db.Pool.Exec(context.Background(), "DROP SCHEMA public CASCADE; CREATE SCHEMA public"); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"DATABASE_URL": db.URL}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = run(context.Background(), []string{"migrate"}, func(k string) string { return env[k] }, io.Discard, io.Discard)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: %v", i, err)
		}
	}
	var tables int
	if err := db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'
		 AND table_name IN ('orders', 'order_items', 'notification_deliveries', 'idempotency_keys')`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 4 {
		t.Errorf("%d of 4 tables exist after migrate", tables)
	}
}

func TestConfigErrorsAreReportedTogether(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"REDIS_URL":                  "http://localhost:6379",
		"LOG_LEVEL":                  "chatty",
		"IDEMPOTENCY_KEY_TTL":        "forever",
		"HTTP_ADDR":                  ":8080",
		"METRICS_ADDR":               ":8080",
		"TRUSTED_PROXIES":            "10.0.0.0/8,not-a-cidr",
		"RATE_LIMIT_PUBLIC":          "-1",
		"PUBLIC_CHECKOUT_PER_CLIENT": "a few",
		// Tokens carry their issue day: a lifetime under a day is none.
		"UNSUBSCRIBE_TOKEN_TTL": "12h",
		// A webhook half configured is an error, not a webhook that
		// accepts anything.
		"RESEND_WEBHOOK_SECRET": "whsec_not*base64",
		"POSTMARK_WEBHOOK_USER": "hooks",
		"SES_SNS_TOPIC_ARNS":    "arn:aws:sqs:eu-west-1:123456789012:not-a-topic",
		// The previews render the brand: a logo a mail client would
		// refuse is refused here too.
		"BRAND_LOGO_URL":      "http://shop.example/logo.png",
		"BRAND_SUPPORT_EMAIL": "help at shop.example",
		// The previews write times in the shop's zone.
		"SHOP_TIMEZONE": "Asia/Bandung",
		// A task of more than 100 deliveries no worker would take.
		"TASK_BATCH": "101",
	}
	err := run(context.Background(), nil, func(k string) string { return env[k] }, io.Discard, io.Discard)
	if err == nil {
		t.Fatal("run with bad configuration returned nil")
	}
	for _, name := range []string{"REDIS_URL", "LOG_LEVEL", "IDEMPOTENCY_KEY_TTL", "METRICS_ADDR", "TRUSTED_PROXIES", "RATE_LIMIT_PUBLIC",
		"PUBLIC_CHECKOUT_PER_CLIENT", "UNSUBSCRIBE_TOKEN_TTL", "RESEND_WEBHOOK_SECRET", "POSTMARK_WEBHOOK_PASSWORD", "SES_SNS_TOPIC_ARNS", "BRAND_LOGO_URL", "BRAND_SUPPORT_EMAIL", "SHOP_TIMEZONE", "TASK_BATCH"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not name %s", err, name)
		}
	}
}

func TestRedisSentinelURLIsAccepted(t *testing.T) {
	t.Parallel()
	env := map[string]string{"REDIS_URL": "redis-sentinel://:secret@10.0.0.1:26379,10.0.0.2/2?master=mymaster"}
	if _, err := loadConfig(func(k string) string { return env[k] }); err != nil {
		t.Fatalf("sentinel URL refused: %v", err)
	}
}

// `api templates check DIR` prints each problem of a broken directory, as
// file:line: message, and fails; a good directory passes.
func TestTemplatesCheck(t *testing.T) {
	t.Parallel()
	dir := testenv.TemplatesDir(t, false)
	var out strings.Builder
	if err := run(context.Background(), []string{"templates", "check", dir}, func(string) string { return "" }, &out, io.Discard); err != nil {
		t.Fatalf("a good directory: %v\n%s", err, out.String())
	}
	testenv.WriteFile(t, filepath.Join(dir, "payment-reminder/text.tmpl"), "Halo {{.customer_name}},\n{{monye 1}}\n")
	testenv.WriteFile(t, filepath.Join(dir, "order-confirmation/subject.tmpl"), `clash`)
	out.Reset()
	err := run(context.Background(), []string{"templates", "check", dir}, func(string) string { return "" }, &out, io.Discard)
	if err == nil {
		t.Fatalf("a broken directory passed:\n%s", out.String())
	}
	for _, want := range []string{"payment-reminder/text.tmpl:2:", "monye", "order-confirmation"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
}

// `api templates check DIR` checks the layouts and partials too, each
// problem at its file and line, and the directory's layout with the
// deploy's brand.
func TestTemplatesCheckLayoutsAndPartials(t *testing.T) {
	t.Parallel()
	env := map[string]string{"BRAND_NAME": "Toko Ana"}
	getenv := func(k string) string { return env[k] }
	dir := testenv.LayoutsDir(t, false)
	var out strings.Builder
	if err := run(context.Background(), []string{"templates", "check", dir}, getenv, &out, io.Discard); err != nil {
		t.Fatalf("a good directory: %v\n%s", err, out.String())
	}
	dir = testenv.LayoutsDir(t, true)
	out.Reset()
	err := run(context.Background(), []string{"templates", "check", dir}, getenv, &out, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "4 problems") {
		t.Errorf("a broken directory: %v, want 4 problems:\n%s", err, out.String())
	}
	for _, want := range []string{
		filepath.Join(dir, "payment-reminder/html.tmpl") + `:2: no partial "signature": add _partials/signature.html.tmpl`,
		filepath.Join(dir, "_layouts/bare/html.tmpl") + ": has no content slot",
		filepath.Join(dir, "payment-overdue/meta.json") + `:1: layout "shpo": no such layout (there are bare, default, shop)`,
		filepath.Join(dir, "order-delayed/en/text.tmpl") + `:2: does not render sample.json: at <.delay_reason>: map has no entry for key "delay_reason"`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
	// A brand the binaries would refuse is refused here too.
	env["BRAND_LOGO_URL"] = "http://shop.example/logo.png"
	if err := run(context.Background(), []string{"templates", "check", testenv.LayoutsDir(t, false)}, getenv, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "BRAND_LOGO_URL") {
		t.Errorf("an http logo: %v", err)
	}
}
