package e2e_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// docs/testmode.md's recipe for a shop's CI runs as it is written, on
// the three binaries: its shell blocks, after the page's definitions
// (API, ADMIN_TOKEN, admin), with API, ADMIN_TOKEN and HOOKS set to this
// test's and bin/api the built API, make the CI's test key, register
// the receiver, place the checkout to bounced+RUN@sekali.test and wait
// for its suppression; the receiver gets the signed notification.bounced
// of that order, marked test.
func TestTheTestModeRecipeRunsAsWritten(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	rd := testenv.NewRedis(t)
	sink, err := smtpsink.Start(smtpsink.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	rcv := newHookReceiver(t)
	const adminToken = "test-admin-token-recipe-0123456789"
	env := func(extra ...string) map[string]string {
		m := map[string]string{"DATABASE_URL": db.URL, "REDIS_URL": rd.URL, "DELIVERY_QUEUE": rd.Queue,
			"MAIL_FROM": "orders@shop.example", "METRICS_ADDR": "127.0.0.1:0",
			"WEBHOOK_ALLOW_HTTP": "true", "WEBHOOK_ALLOW_NETWORKS": "127.0.0.0/8"}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	apiBin := testenv.Binary(t, "./cmd/api")
	api := testenv.Start(t, "api", apiBin, env("HTTP_ADDR", "127.0.0.1:0", "ADMIN_TOKEN", adminToken))
	apiURL := "http://" + api.WaitLog(t, "api listening", "addr", 60*time.Second)
	worker := testenv.Start(t, "worker", testenv.Binary(t, "./cmd/worker"), env(
		"SMTP_HOST", sink.Host(), "SMTP_PORT", strconv.Itoa(sink.Port()), "SMTP_TLS", "none"))
	worker.WaitLog(t, "worker started", "metrics_addr", 60*time.Second)
	rec := testenv.Start(t, "reconciler", testenv.Binary(t, "./cmd/reconciler"), env(
		"RECONCILE_INTERVAL", "200ms", "WEBHOOK_INTERVAL", "200ms"))
	rec.WaitLog(t, "reconciler started", "metrics_addr", 60*time.Second)

	// The page's commands, from a directory whose bin/api is the API.
	doc := "../../docs/testmode.md"
	script := testenv.ShellBlocks(t, doc, "Test keys")[0] +
		strings.Join(testenv.ShellBlocks(t, doc, "A recipe for the shop's CI"), "") +
		`printf '\nthe order: %s\n' "$ORDER"` + "\n"
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(apiBin, filepath.Join(dir, "bin", "api")); err != nil {
		t.Fatal(err)
	}
	sh := exec.Command("bash", "-euo", "pipefail", "-c", script)
	sh.Dir = dir
	sh.Env = append(os.Environ(), "API="+apiURL, "ADMIN_TOKEN="+adminToken, "HOOKS="+rcv.URL+"/hooks/sekali", "DATABASE_URL="+db.URL)
	out, err := sh.Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("the recipe failed: %v\n%s\n%s\nthe script:\n%s", err, out, stderr, script)
	}
	order := regexp.MustCompile(`the order: ([0-9a-f-]{36})\n`).FindSubmatch(out)
	secret := regexp.MustCompile(`"secret":"(whsec_[^"]+)"`).FindSubmatch(out)
	if order == nil || secret == nil || !strings.Contains(string(out), `"source":"bounce"`) || !strings.Contains(string(out), `"test":true`) {
		t.Fatalf("the recipe printed\n%s\nwant the endpoint's secret, the suppression of test mode's bounce, and the order", out)
	}

	var bounce hookRequest
	testenv.WaitFor(t, "the recipe's notification.bounced at the receiver", 30*time.Second, func() bool {
		for _, r := range rcv.got() {
			if strings.Contains(string(r.body), `"notification.bounced"`) {
				bounce = r
				return true
			}
		}
		return false
	})
	wh, err := standardwebhooks.NewWebhook(string(secret[1]))
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(bounce.body, bounce.header); err != nil {
		t.Errorf("the Standard Webhooks library does not verify the bounce under the recipe's secret: %v", err)
	}
	var ev struct {
		Data struct {
			OrderID   string `json:"order_id"`
			Recipient string `json:"recipient"`
			Test      bool   `json:"test"`
		} `json:"data"`
	}
	if err := json.Unmarshal(bounce.body, &ev); err != nil || ev.Data.OrderID != string(order[1]) || !ev.Data.Test ||
		!strings.HasPrefix(ev.Data.Recipient, "bounced+") {
		t.Errorf("the bounce: %s (%v); want the recipe's order %s, its recipient, marked test", bounce.body, err, order[1])
	}
	if n := sink.Count(); n != 0 {
		t.Errorf("the relay got %d messages from the recipe's test key, want none", n)
	}
}
