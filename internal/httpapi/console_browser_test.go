//go:build browser

package httpapi_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/order"
)

// The console in a real browser (Debian's headless Chromium, driven
// through the DevTools protocol by chromedp): an operator signs in, finds
// a failed delivery by its recipient, opens it, retries it with a note,
// and sees the history row with their name, then finds the retry in the
// activity and follows its link back. With CONSOLE_SCREENSHOT (the
// overview's picture, docs/console.png) the delivery's page is saved
// beside it, as console-delivery.png (docs/console-delivery.png, for the
// runbook).
func TestConsoleInABrowser(t *testing.T) {
	chromium := chromiumPath(t)
	s := setup(t)
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	id := o.Notifications[0].ID
	s.f.Failed(s.f.Get(id), "550 5.1.1 mailbox unavailable")
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

	link := chromedp.CSS(`a[href="/admin/deliveries/` + id.String() + `"]`)
	// A click that loads a page runs through RunResponse, which waits for
	// that page: a query of the old one while the new one loads finds
	// nodes that are gone.
	click := func(what string, sel chromedp.CSS) {
		t.Helper()
		if _, err := chromedp.RunResponse(ctx, chromedp.Click(sel)); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	err = chromedp.Do(ctx,
		chromedp.Navigate(s.url+"/admin/"),
		chromedp.WaitVisible(chromedp.ID("key")), // sent to sign in
		chromedp.SendKeys(chromedp.ID("key"), token),
	)
	if err != nil {
		t.Fatalf("sign in: %v", err)
	}
	click("sign in", "#sign-in")
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("operator"))); err != nil {
		t.Fatalf("sign in: %v", err)
	}
	who, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("operator")))
	if err != nil {
		t.Fatal(err)
	}
	err = chromedp.Do(ctx,
		chromedp.Navigate(s.url+"/admin/deliveries"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=recipient]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=recipient]`), "ana.maria@example.com"),
		chromedp.SetValue(chromedp.CSS(`select[name=status]`), "failed"),
	)
	if err != nil {
		t.Fatalf("search: %v", err)
	}
	click("search", "#search")
	if err := chromedp.Do(ctx, chromedp.WaitVisible(link)); err != nil {
		t.Fatalf("search: %v", err)
	}
	results, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("results")))
	if err != nil {
		t.Fatal(err)
	}
	click("open the delivery", link)
	err = chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.ID("retry-note")),
		chromedp.SendKeys(chromedp.ID("retry-note"), "address fixed by the customer"),
	)
	if err != nil {
		t.Fatalf("open the delivery: %v", err)
	}
	click("retry", "#retry")
	err = chromedp.Do(ctx,
		chromedp.WaitNotPresent(chromedp.ID("retry")), // a pending delivery offers no retry
		chromedp.WaitVisible(chromedp.ID("timeline")),
	)
	if err != nil {
		t.Fatalf("after the retry: %v", err)
	}
	location, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	status, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("status")))
	if err != nil {
		t.Fatal(err)
	}
	timeline, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("timeline")))
	if err != nil {
		t.Fatal(err)
	}
	if who != "Ana Operator" {
		t.Errorf("signed in as %q", who)
	}
	if !strings.Contains(results, "ana.maria@example.com") || !strings.Contains(results, "failed") {
		t.Errorf("the search results: %q", results)
	}
	if location != s.url+"/admin/deliveries/"+id.String() || strings.TrimSpace(status) != "pending" {
		t.Errorf("after the retry: at %s, status %q", location, status)
	}
	if !strings.Contains(timeline, "operator:Ana Operator ("+k.Prefix+")") || !strings.Contains(timeline, "address fixed by the customer") {
		t.Errorf("the timeline does not name the operator and the note:\n%s", timeline)
	}
	if shot := os.Getenv("CONSOLE_SCREENSHOT"); shot != "" {
		shot = filepath.Join(filepath.Dir(shot), "console-delivery.png")
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(shot, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot in %s", shot)
	}

	// The retry is in the activity, under the operator's name, with its
	// note and a link back to the delivery.
	click("open the activity", `header a[href="/admin/activity"]`)
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("activity"))); err != nil {
		t.Fatalf("the activity: %v", err)
	}
	activity, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("activity")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(activity, "delivery.retry") || !strings.Contains(activity, "operator:Ana Operator ("+k.Prefix+")") ||
		!strings.Contains(activity, "address fixed by the customer") {
		t.Errorf("the activity does not show the retry by the operator with its note:\n%s", activity)
	}
	click("back to the delivery", link)
	if location, err := chromedp.Run(ctx, chromedp.Location()); err != nil || location != s.url+"/admin/deliveries/"+id.String() {
		t.Errorf("the activity's link leads to %s (%v), want the delivery", location, err)
	}
}
