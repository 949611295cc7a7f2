//go:build browser

package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// A tracking pixel in an e-mail the console shows stays unfetched in a
// real browser (Chromium enforcing the frame's policy) until the
// operator clicks "Load remote images"; then the frame reloads and
// fetches it.
func TestConsoleEmailRemoteImagesInABrowser(t *testing.T) {
	chromium := chromiumPath(t)
	var fetched atomic.Int64
	pixel := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched.Add(1)
		w.Header().Set("Content-Type", "image/gif")
		_, _ = w.Write([]byte("GIF89a\x01\x00\x01\x00\x00\x00\x00;"))
	}))
	defer pixel.Close()

	dir := t.TempDir()
	for name, content := range map[string]string{
		"schema.json":  `{"type":"object","required":["pixel"],"properties":{"pixel":{"type":"string","pattern":"^https://"}}}`,
		"sample.json":  `{"pixel":"https://shop.example/p.gif"}`,
		"subject.tmpl": `Kabar dari Toko Ana`,
		"text.tmpl":    "Kabar dari Toko Ana\n",
		"html.tmpl":    `<p>Kabar dari Toko Ana</p><img src="{{.pixel}}" alt="">`,
	} {
		testenv.WriteFile(t, filepath.Join(dir, "tracked-news", name), content)
	}
	templates, err := mailtemplate.Load(mailtemplate.Config{Dir: dir, DefaultLanguage: "id"})
	if err != nil {
		t.Fatal(err)
	}
	s := setup(t, setupOpts{templates: templates})
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	res := s.do(t, http.MethodPost, "/v1/orders/"+o.ID.String()+"/notifications", "application/json",
		strings.NewReader(`{"template": "tracked-news", "data": {"pixel": "`+pixel.URL+`/open.gif"}}`), nil)
	var n order.Notification
	res.decode(t, &n)
	if res.status != http.StatusCreated {
		t.Fatalf("the notification: %d %s", res.status, res.body)
	}
	_, token, err := s.keys.Create(context.Background(), "test", "Ana Operator", []apikey.Scope{apikey.ScopeAdmin})
	if err != nil {
		t.Fatal(err)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("ignore-certificate-errors", true)) // the pixel's server is httptest's
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 90*time.Second)
	defer cancel()

	err = chromedp.Do(ctx,
		chromedp.Navigate(s.url+"/admin/sign-in"),
		chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SendKeys(chromedp.ID("key"), token),
	)
	if err != nil {
		t.Fatalf("sign in: %v", err)
	}
	if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("sign-in"))); err != nil {
		t.Fatalf("sign in: %v", err)
	}
	// Navigate returns on the page's load event, which waits for the
	// frame's; the frame's images were tried by then.
	err = chromedp.Do(ctx,
		chromedp.Navigate(s.url+"/admin/deliveries/"+n.ID.String()),
		chromedp.WaitVisible(chromedp.ID("remote-images")),
	)
	if err != nil {
		t.Fatalf("open the delivery: %v", err)
	}
	if got := fetched.Load(); got != 0 {
		t.Fatalf("the e-mail's remote image was fetched %d times before the operator asked", got)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("remote-images"))); err != nil {
		t.Fatalf("load remote images: %v", err)
	}
	testenv.WaitFor(t, "the frame to fetch the remote image once asked", 30*time.Second, func() bool { return fetched.Load() > 0 })
}
