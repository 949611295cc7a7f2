package httpapi_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/notify/notifytest"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// receiptTemplates is a TEMPLATES_DIR with one template, receipt, whose
// subject and body say which version they are.
func receiptTemplates(t *testing.T, subject, html string) *mailtemplate.Templates {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{
		"schema.json":  `{"type":"object","required":["customer_name"],"properties":{"customer_name":{"type":"string"}}}`,
		"sample.json":  `{"customer_name":"Sari"}`,
		"subject.tmpl": subject,
		"text.tmpl":    "Hi {{.customer_name}}.\n",
		"html.tmpl":    html,
	} {
		testenv.WriteFile(t, filepath.Join(dir, "receipt", name), content)
	}
	tmpl, err := mailtemplate.Load(mailtemplate.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// The console shows a delivery's e-mail as it was sent: after the
// template changed, the page and its frame render the version that
// rendered the message then, with the subject that went out. Where that
// version is unknown (a hand-over older than the record, a version not
// kept), the page says so and shows the subject as sent, not today's
// template in its place; a delivery not yet handed over shows today's
// template, and says that is what it is.
func TestConsoleShowsTheEmailAsItWasSent(t *testing.T) {
	t.Parallel()
	sent := receiptTemplates(t, "Your receipt, {{.customer_name}}", "<p>Version one for {{.customer_name}}</p>")
	today := receiptTemplates(t, "Receipt for {{.customer_name}} (new)", "<p>Version two for {{.customer_name}}</p>")
	s := setup(t, setupOpts{templates: today})
	worker := s
	worker.templates = sent // the worker that sent it had the template before it changed
	sink := worker.startWorker(t, nil)

	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	var n order.Notification
	res := s.do(t, http.MethodPost, "/v1/orders/"+o.ID.String()+"/notifications", "application/json",
		strings.NewReader(`{"template": "receipt", "event_id": "r1", "data": {"customer_name": "Ana"}}`), nil)
	if res.status != http.StatusCreated {
		t.Fatalf("trigger = %d %s", res.status, res.body)
	}
	res.decode(t, &n)
	testenv.WaitFor(t, "the receipt sent", 30*time.Second, func() bool { return s.f.Get(n.ID).Status == notify.StatusSent })
	var one bool
	for _, m := range sink.ByRecipient("ana.maria@example.com") {
		one = one || strings.Contains(string(m.Data), "Version one for Ana")
	}
	if !one {
		t.Fatal("the sink did not get version one of the receipt")
	}

	b, _ := s.operator(t, "Ana")
	path := "/admin/deliveries/" + n.ID.String()
	_, _, page := b.do(http.MethodGet, path, nil)
	if !strings.Contains(page, `id="email-subject">Your receipt, Ana<`) || !strings.Contains(page, `id="email-version">`+sent.Version("receipt")+`<`) ||
		!strings.Contains(page, "in en") || !strings.Contains(page, `src="`+path+`/email"`) || strings.Contains(page, `id="email-unknown"`) {
		t.Errorf("the page of the sent receipt does not say what was sent (subject, version %s, language):\n%s", sent.Version("receipt"), page)
	}
	status, _, frame := b.do(http.MethodGet, path+"/email", nil)
	if status != http.StatusOK || !strings.Contains(frame, "Version one for Ana") || strings.Contains(frame, "Version two") {
		t.Errorf("the frame = %d %q, want the version that was sent", status, frame)
	}

	// The version not kept (removed on purpose): said plainly, with the
	// subject as sent, and no frame.
	if _, err := s.db.Pool.Exec(context.Background(), `DELETE FROM template_versions WHERE digest = $1`, sent.Version("receipt")); err != nil {
		t.Fatal(err)
	}
	_, _, page = b.do(http.MethodGet, path, nil)
	if !strings.Contains(page, `id="email-unknown"`) || !strings.Contains(page, "is not kept") ||
		!strings.Contains(page, "Subject as sent: “Your receipt, Ana”") || strings.Contains(page, "<iframe") {
		t.Errorf("the page of a receipt whose version is not kept:\n%s", page)
	}
	if status, _, frame := b.do(http.MethodGet, path+"/email", nil); status != http.StatusNotFound || strings.Contains(frame, "Version two") {
		t.Errorf("the frame of a receipt whose version is not kept = %d %q, want 404 and not today's template", status, frame)
	}

	// A hand-over older than the record of versions: a factory without
	// the worker's templates records none.
	before := notifytest.New(t, s.db.Pool)
	old := before.Sent(before.Scheduled(o.ID, "receipt", "budi@example.com", map[string]any{"customer_name": "Budi"}, time.Now()), "p-1")
	_, _, page = b.do(http.MethodGet, "/admin/deliveries/"+old.ID.String(), nil)
	if !strings.Contains(page, `id="email-unknown"`) || !strings.Contains(page, "older than the record of versions") ||
		!strings.Contains(page, "Subject as sent: not recorded") || strings.Contains(page, "<iframe") {
		t.Errorf("the page of a delivery handed over before versions were recorded:\n%s", page)
	}

	// Not handed over yet: today's template, and the page says so.
	later := s.f.Scheduled(o.ID, "receipt", "citra@example.com", map[string]any{"customer_name": "Citra"}, time.Now().Add(time.Hour))
	path = "/admin/deliveries/" + later.ID.String()
	_, _, page = b.do(http.MethodGet, path, nil)
	if !strings.Contains(page, "Not handed to a provider yet: today's template, rendered now") || !strings.Contains(page, `src="`+path+`/email"`) {
		t.Errorf("the page of a delivery not handed over:\n%s", page)
	}
	if _, _, frame := b.do(http.MethodGet, path+"/email", nil); !strings.Contains(frame, "Version two for Citra") {
		t.Errorf("the frame of a delivery not handed over: %q, want today's template", frame)
	}
}
