//go:build browser

package httpapi_test

import (
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/webhookout"
)

// The console's webhooks in a real browser (Debian's headless Chromium):
// an operator adds the shop's endpoint from the list (its secret shown
// once), opens it and finds its event with the receiver's answer, rotates
// its secret (the new one shown once) and replays the event; the activity
// names the operator for each, and the console's policy refuses nothing.
func TestConsoleWebhooksInABrowser(t *testing.T) {
	chromium := chromiumPath(t)
	s := setup(t)
	rcv := hookReceiver(t)
	k, token, err := s.keys.Create(context.Background(), "test", "Ana Operator", []apikey.Scope{apikey.ScopeAdmin})
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1300, 1500), chromedp.UserDataDir(t.TempDir()))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 90*time.Second)
	defer cancel()

	var mu sync.Mutex
	var console []string
	var wg sync.WaitGroup
	lctx, stopListening := context.WithCancel(ctx)
	messages := chromedp.Console(lctx)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m, err := range messages {
			if err != nil {
				return
			}
			mu.Lock()
			console = append(console, m.String())
			mu.Unlock()
		}
	}()
	defer func() { stopListening(); wg.Wait() }()

	click := func(what string, sel chromedp.CSS) {
		t.Helper()
		if _, err := chromedp.RunResponse(ctx, chromedp.Click(sel)); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(id string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID(id)))
		if err != nil {
			t.Fatalf("#%s: %v", id, err)
		}
		return s
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(s.url+"/admin/"), chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SendKeys(chromedp.ID("key"), token)); err != nil {
		t.Fatalf("sign in: %v", err)
	}
	click("sign in", "#sign-in")

	// Add the endpoint, for the sent events.
	click("open the webhooks", `header a[href="/admin/webhooks"]`)
	if err := chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.ID("webhook-url")),
		chromedp.SendKeys(chromedp.ID("webhook-url"), rcv.URL+"/hooks/sekali"),
		chromedp.SendKeys(chromedp.ID("webhook-description"), "order service"),
		chromedp.Click(chromedp.CSS(`input[name=event_types][value="notification.sent"]`)),
	); err != nil {
		t.Fatalf("the form to add an endpoint: %v", err)
	}
	click("add", "#add-webhook")
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("secret"))); err != nil {
		t.Fatalf("after adding: %v", err)
	}
	first, endpoints := text("secret"), text("endpoints")
	if !strings.HasPrefix(first, "whsec_") || !strings.Contains(endpoints, rcv.URL+"/hooks/sekali") ||
		!strings.Contains(endpoints, "notification.sent") || !strings.Contains(endpoints, "order service") {
		t.Fatalf("after adding: the secret %q, the list:\n%s", first, endpoints)
	}

	// An event, posted once by the dispatcher; the receiver refuses it.
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	s.f.Sent(s.f.Get(o.Notifications[0].ID), "p-1")
	loopback := &webhookout.Guard{AllowHTTP: true, Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	d := webhookout.NewDispatcher(s.db.Pool, webhookout.Config{Guard: loopback}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if _, err := d.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	click("open the endpoint", `#endpoints a`)
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("messages"))); err != nil {
		t.Fatalf("the endpoint's page: %v", err)
	}
	if msgs := text("messages"); !strings.Contains(msgs, "notification.sent") || !strings.Contains(msgs, "503 answered 503: down for maintenance") {
		t.Errorf("the endpoint's events do not show the receiver's answer:\n%s", msgs)
	}
	if strings.Contains(text("endpoint"), first) {
		t.Error("the endpoint's page shows its secret again")
	}

	// Rotate the secret, then replay the event.
	click("rotate", "#rotate")
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("secret"))); err != nil {
		t.Fatalf("after the rotation: %v", err)
	}
	if second := text("secret"); !strings.HasPrefix(second, "whsec_") || second == first || !strings.Contains(text("endpoint-secret"), "rotated") {
		t.Errorf("after the rotation: the secret %q (the first %q), the endpoint's %q", second, first, text("endpoint-secret"))
	}
	click("replay", `#messages button`)
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("replayed"))); err != nil {
		t.Fatalf("after the replay: %v", err)
	}
	if got := text("replayed"); !strings.Contains(got, "Sent again: 1 event") {
		t.Errorf("after the replay: %q", got)
	}

	click("open the activity", `header a[href="/admin/activity"]`)
	activity := text("activity")
	for _, action := range []string{"webhook_endpoint.create", "webhook_endpoint.rotate_secret", "webhook_endpoint.replay"} {
		if !strings.Contains(activity, action) {
			t.Errorf("the activity lacks %s", action)
		}
	}
	if n := strings.Count(activity, "operator:Ana Operator ("+k.Prefix+")"); n < 3 {
		t.Errorf("the activity names the operator %d times, want each of the three:\n%s", n, activity)
	}
	mu.Lock()
	defer mu.Unlock()
	if refused := policyMessages(console); len(refused) > 0 {
		t.Errorf("the console's policy refused something:\n%s", strings.Join(refused, "\n"))
	}
}
