package httpapi_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"html"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/order"
)

// A template an adopter added as a directory (deploy/templates, as the
// compose stack mounts it) is sent through the one trigger, once per
// event: the same event again is the same notification; another event is
// another e-mail; data that breaks the schema is refused field by field.
func TestTriggerATemplateFromADirectory(t *testing.T) {
	t.Parallel()
	templates, err := mailtemplate.Load(mailtemplate.Config{Dir: "../../deploy/templates", DefaultLanguage: "id"})
	if err != nil {
		t.Fatal(err)
	}
	s := setup(t, setupOpts{templates: templates})
	var o order.Order
	s.postOrder(t, strings.Replace(validCheckout, `"currency": "IDR",`, `"currency": "IDR", "locale": "en-GB",`, 1), nil).decode(t, &o)
	data := `{"order_id":"` + o.ID.String() + `","customer_name":"Ana","currency":"IDR","amount_due":21500050,` +
		`"due_at":"2026-12-03T17:00:00Z","payment_url":"https://shop.example/pay/1"}`
	path := "/v1/orders/" + o.ID.String() + "/notifications"
	post := func(body string) response {
		return s.do(t, http.MethodPost, path, "application/json", strings.NewReader(body), nil)
	}
	var first, again, second order.Notification
	res := post(`{"template":"payment-reminder","event_id":"reminder-1","data":` + data + `}`)
	if res.status != http.StatusCreated {
		t.Fatalf("first reminder: %d %s", res.status, res.body)
	}
	res.decode(t, &first)
	if want := "payment-reminder:" + o.ID.String() + ":reminder-1:ana.maria@example.com"; first.IdempotencyKey != want {
		t.Errorf("key %q, want %q", first.IdempotencyKey, want)
	}
	if res := post(`{"template":"payment-reminder","event_id":"reminder-1","data":` + data + `}`); res.status != http.StatusOK {
		t.Errorf("the same reminder again: %d", res.status)
	} else {
		res.decode(t, &again)
	}
	if again.ID != first.ID {
		t.Errorf("the same event made another notification: %s, %s", first.ID, again.ID)
	}
	post(`{"template":"payment-reminder","event_id":"reminder-2","data":`+data+`}`).decode(t, &second)
	if second.ID == first.ID || second.ID.String() == "00000000-0000-0000-0000-000000000000" {
		t.Errorf("a second event did not make a second notification")
	}
	if n := s.count(t, "notification_deliveries"); n != 3 {
		t.Errorf("%d deliveries, want the confirmation and two reminders", n)
	}
	// The delivery carries the order's language.
	var locale string
	if err := s.db.Pool.QueryRow(t.Context(), "SELECT locale FROM notification_deliveries WHERE id = $1", first.ID).Scan(&locale); err != nil || locale != "en-GB" {
		t.Errorf("the reminder's locale %q, %v", locale, err)
	}

	bad := post(`{"template":"payment-reminder","event_id":"reminder-3","data":{"order_id":"x","currency":"idr","amount_due":0,"coupon":1}}`)
	if bad.status != http.StatusUnprocessableEntity {
		t.Fatalf("bad data: %d %s", bad.status, bad.body)
	}
	for _, pointer := range []string{"/data/order_id", "/data/currency", "/data/amount_due", "/data/coupon", "/data/customer_name"} {
		if !strings.Contains(string(bad.body), `"pointer":"`+pointer+`"`) {
			t.Errorf("the problem does not name %s: %s", pointer, bad.body)
		}
	}
	if n := s.count(t, "notification_deliveries"); n != 3 {
		t.Errorf("bad data wrote a delivery: %d", n)
	}

	// Data the schema takes ("integer" takes 1.0 and 1e30) but the
	// template cannot render (money wants whole minor units) is refused
	// at the trigger as the preview refuses it, not recorded for the
	// worker to hold.
	for _, amount := range []string{"1.0", "1e30"} {
		unrenderable := strings.Replace(data, "21500050", amount, 1)
		res := post(`{"template":"payment-reminder","event_id":"reminder-` + amount + `","data":` + unrenderable + `}`)
		if res.status != http.StatusUnprocessableEntity || !strings.Contains(string(res.body), `"pointer":"/data"`) ||
			!strings.Contains(string(res.body), "cannot be rendered") {
			t.Errorf("amount_due %s: %d %s, want 422 at /data", amount, res.status, res.body)
		}
		preview := s.do(t, http.MethodPost, "/v1/templates/payment-reminder/preview", "application/json", strings.NewReader(unrenderable), nil)
		if preview.status != http.StatusUnprocessableEntity || !strings.Contains(string(preview.body), "cannot be rendered") {
			t.Errorf("the preview of amount_due %s: %d %s, want the trigger's 422", amount, preview.status, preview.body)
		}
	}
	if n := s.count(t, "notification_deliveries"); n != 3 {
		t.Errorf("data the template cannot render wrote a delivery: %d", n)
	}
}

// A trigger with a recipient sends the e-mail to that address, not to
// the order's customer, under a key that names it: the same trigger
// again is the same notification, and the same trigger for the customer
// is another. A recipient that is not one bare address is a 422 naming
// it, and records nothing.
func TestTriggerWithARecipient(t *testing.T) {
	t.Parallel()
	s := setup(t, setupOpts{templates: shopTemplates(t)})
	sink := s.startWorker(t, nil)
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	path := "/v1/orders/" + o.ID.String() + "/notifications"
	post := func(recipient string) response {
		body := `{"template": "payment-reminder", "event_id": "gift", "data": ` + reminderData(o.ID)
		if recipient != "" {
			body += `, "recipient": ` + recipient
		}
		return s.do(t, http.MethodPost, path, "application/json", strings.NewReader(body+"}"), nil)
	}

	res := post(`" Budi.Santoso@Example.com "`)
	var n order.Notification
	res.decode(t, &n)
	if want := "payment-reminder:" + o.ID.String() + ":gift:budi.santoso@example.com"; res.status != http.StatusCreated || n.IdempotencyKey != want {
		t.Fatalf("with a recipient: %d %s, want 201 with key %s", res.status, res.body, want)
	}
	var again order.Notification
	if res := post(`"budi.santoso@example.com"`); res.status != http.StatusOK {
		t.Errorf("the same trigger again: %d %s", res.status, res.body)
	} else if res.decode(t, &again); again.ID != n.ID {
		t.Errorf("the same trigger again made notification %s, want %s", again.ID, n.ID)
	}
	var forCustomer order.Notification
	post("").decode(t, &forCustomer)
	if want := "payment-reminder:" + o.ID.String() + ":gift:ana.maria@example.com"; forCustomer.IdempotencyKey != want || forCustomer.ID == n.ID {
		t.Errorf("the trigger without a recipient: %+v, want a notification of its own with key %s", forCustomer, want)
	}

	// The confirmation and the reminder go to the customer; the one with
	// a recipient goes to that address alone.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := sink.WaitForCount(ctx, 3); err != nil {
		t.Fatal(err)
	}
	toBudi := sink.ByRecipient("budi.santoso@example.com")
	if len(toBudi) != 1 || !slices.Equal(toBudi[0].To, []string{"budi.santoso@example.com"}) ||
		!strings.Contains(toBudi[0].Header.Get("To"), "budi.santoso@example.com") || strings.Contains(toBudi[0].Header.Get("To"), "ana") {
		t.Errorf("to the recipient: %d messages, %+v", len(toBudi), toBudi)
	}
	if toAna := sink.ByRecipient("ana.maria@example.com"); len(toAna) != 2 {
		t.Errorf("%d messages to the customer, want the confirmation and her reminder", len(toAna))
	}
	var recipient string
	if err := s.db.Pool.QueryRow(ctx, "SELECT recipient FROM notification_deliveries WHERE id = $1", n.ID).Scan(&recipient); err != nil || recipient != "budi.santoso@example.com" {
		t.Errorf("the delivery's recipient %q, %v", recipient, err)
	}

	for _, bad := range []string{
		`"not an address"`,
		`"Budi <budi@example.com>"`,
		`"budi@example.com, eve@example.com"`,
		`"budi@example.com\r\nRCPT TO:<eve@example.com>"`,
		`"budi@1.2.3.4"`,
		`"  "`,
	} {
		res := post(bad)
		if res.status != http.StatusUnprocessableEntity || !strings.Contains(string(res.body), `"pointer":"/recipient"`) {
			t.Errorf("recipient %s: %d %s, want 422 naming /recipient", bad, res.status, res.body)
		}
	}
	if res := post(`42`); res.status != http.StatusBadRequest || !strings.Contains(string(res.body), `"pointer":"/recipient"`) {
		t.Errorf("a recipient that is a number: %d %s", res.status, res.body)
	}
	if n := s.count(t, "notification_deliveries"); n != 3 {
		t.Errorf("%d deliveries after bad recipients, want 3", n)
	}
}

// The gallery shows every template in every language, its subject, its
// HTML in a sandboxed frame and its text, and lets no script run.
func TestGalleryShowsEveryTemplateInEveryLanguage(t *testing.T) {
	t.Parallel()
	templates, err := mailtemplate.Load(mailtemplate.Config{Dir: "../../deploy/templates", DefaultLanguage: "id"})
	if err != nil {
		t.Fatal(err)
	}
	s := bare(t, templates)
	res := s.do(t, http.MethodGet, "/templates", "", nil, nil)
	if res.status != http.StatusOK || !strings.HasPrefix(res.header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /templates = %d %s", res.status, res.header.Get("Content-Type"))
	}
	if csp := res.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy %q lets scripts run", csp)
	}
	page := string(res.body)
	for _, name := range templates.Names() {
		sample, _ := templates.Sample(name)
		for _, lang := range templates.Languages(name) {
			out, err := templates.RenderLocale(name, sample, lang)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(page, `id="`+name+`"`) || !strings.Contains(page, ">"+lang+"<") {
				t.Errorf("the gallery lacks %s in %s", name, lang)
			}
			if !strings.Contains(page, html.EscapeString(out.Subject)) {
				t.Errorf("the gallery lacks the %s subject of %s: %q", lang, name, out.Subject)
			}
		}
	}
	if strings.Count(page, "<iframe") != strings.Count(page, `sandbox srcdoc="`) || strings.Contains(page, "<script") {
		t.Error("a frame without sandbox, or a script, in the gallery")
	}
}

// Every HTML answer — the gallery, a preview's body — carries a policy
// that lets no script run and no page frame it, and every answer says
// nosniff, so that a browser takes none of them for what it is not.
func TestHTMLAnswersLetNoScriptRun(t *testing.T) {
	t.Parallel()
	s := bare(t, nil)
	for _, path := range []string{"/templates", "/v1/templates/order-confirmation/preview?format=html", "/v1/templates/order-confirmation/preview?format=text", "/v1/templates", "/nope"} {
		res := s.do(t, http.MethodGet, path, "", nil, nil)
		if got := res.header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s: X-Content-Type-Options %q", path, got)
		}
		if !strings.HasPrefix(res.header.Get("Content-Type"), "text/html") {
			continue
		}
		csp := res.header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "frame-ancestors 'none'", "form-action 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: Content-Security-Policy %q lacks %s", path, csp, want)
			}
		}
		if strings.Contains(csp, "script-src") {
			t.Errorf("%s: Content-Security-Policy %q names scripts", path, csp)
		}
	}
}

// The payment reminder of deploy/templates, end to end through the API:
// scheduled for its time (shown by the trigger's answer and by the order),
// and, once the order is paid, cancelled with one call, which says which
// reminders it stopped and which were too far along; the same call again
// answers the same.
func TestRemindUnlessPaid(t *testing.T) {
	t.Parallel()
	templates, err := mailtemplate.Load(mailtemplate.Config{Dir: "../../deploy/templates", DefaultLanguage: "id"})
	if err != nil {
		t.Fatal(err)
	}
	s := setup(t, setupOpts{templates: templates})
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	data := `{"order_id":"` + o.ID.String() + `","customer_name":"Ana","currency":"IDR","amount_due":21500050,` +
		`"due_at":"2026-12-03T17:00:00Z","payment_url":"https://shop.example/pay/1"}`
	path := "/v1/orders/" + o.ID.String() + "/notifications"
	at := time.Now().Add(12 * time.Hour).Truncate(time.Second)
	remind := func(event, sendAt string) order.Notification {
		t.Helper()
		var n order.Notification
		res := s.do(t, http.MethodPost, path, "application/json", strings.NewReader(
			`{"template":"payment-reminder","event_id":"`+event+`","send_at":"`+sendAt+`","data":`+data+`}`), nil)
		if res.status != http.StatusCreated {
			t.Fatalf("%s: %d %s", event, res.status, res.body)
		}
		res.decode(t, &n)
		return n
	}
	first := remind("in-12h", at.In(time.FixedZone("WIB", 7*3600)).Format(time.RFC3339))
	if first.SendAt == nil || !first.SendAt.Equal(at) {
		t.Errorf("send_at answered %v, want %v", first.SendAt, at)
	}
	past := remind("in-the-past", time.Now().Add(-time.Hour).Format(time.RFC3339))
	if past.SendAt != nil {
		t.Errorf("a send_at in the past answered send_at %v, want none (now)", past.SendAt)
	}
	s.f.Claimed(s.f.Get(past.ID), time.Minute) // a worker has it

	var got order.Order
	s.do(t, http.MethodGet, "/v1/orders/"+o.ID.String(), "", nil, nil).decode(t, &got)
	for _, n := range got.Notifications {
		if n.ID == first.ID && (n.SendAt == nil || !n.SendAt.Equal(at)) {
			t.Errorf("the order shows the reminder with send_at %v, want %v", n.SendAt, at)
		}
	}

	var answers [2]string
	for i := range answers {
		res := s.do(t, http.MethodPost, path+"/cancel", "application/json", strings.NewReader(`{"template":"payment-reminder"}`), nil)
		if res.status != http.StatusOK {
			t.Fatalf("cancel: %d %s", res.status, res.body)
		}
		var ans struct {
			Cancelled    []order.Notification `json:"cancelled"`
			NotCancelled []order.Notification `json:"not_cancelled"`
		}
		res.decode(t, &ans)
		if len(ans.Cancelled) != 1 || ans.Cancelled[0].ID != first.ID || ans.Cancelled[0].Status != "cancelled" ||
			len(ans.NotCancelled) != 1 || ans.NotCancelled[0].ID != past.ID || ans.NotCancelled[0].Status != "sending" {
			t.Errorf("cancel answered %s", res.body)
		}
		answers[i] = string(res.body)
	}
	if answers[0] != answers[1] {
		t.Errorf("the same cancel again answered\n%s\nthen\n%s", answers[0], answers[1])
	}
	if n := s.count(t, "notification_deliveries WHERE template = 'order-confirmation' AND status = 'cancelled'"); n != 0 {
		t.Errorf("%d other templates' notifications cancelled", n)
	}
}

// The link of a subscription message: following it shows a page and
// changes nothing (mail scanners follow links); the one-click POST
// unsubscribes, without a login, once; a link this service did not sign
// is 404.
func TestOneClickUnsubscribe(t *testing.T) {
	t.Parallel()
	s := setup(t)
	path := "/v1/unsubscribe/" + mail.UnsubscribeToken(unsubscribeSecret, "ana@example.com", "subscription", time.Now())
	anon := map[string]string{"Authorization": ""}
	res := s.do(t, http.MethodGet, path, "", nil, anon)
	if res.status != http.StatusOK || !strings.Contains(string(res.body), `id="unsubscribe"`) || s.count(t, "unsubscribes") != 0 {
		t.Fatalf("GET = %d, %d rows: %s", res.status, s.count(t, "unsubscribes"), res.body)
	}
	if csp := res.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("policy %q", csp)
	}
	for range 2 {
		res = s.do(t, http.MethodPost, path, "application/x-www-form-urlencoded", strings.NewReader("List-Unsubscribe=One-Click"), anon)
		if res.status != http.StatusOK || !strings.Contains(string(res.body), `id="done"`) {
			t.Fatalf("POST = %d: %s", res.status, res.body)
		}
	}
	if n := s.count(t, "unsubscribes WHERE recipient = 'ana@example.com' AND category = 'subscription'"); n != 1 {
		t.Errorf("%d unsubscribe rows, want 1", n)
	}
	forged := "/v1/unsubscribe/" + mail.UnsubscribeToken("a-secret-that-is-not-ours-0123456789", "budi@example.com", "subscription", time.Now())
	if res := s.do(t, http.MethodPost, forged, "", nil, anon); res.status != http.StatusNotFound {
		t.Errorf("a forged link = %d, want 404", res.status)
	}
	if n := s.count(t, "unsubscribes"); n != 1 {
		t.Errorf("%d unsubscribe rows after a forged link, want 1", n)
	}
}

// An unsubscribe link is this service's only as it signed it: one whose
// signature is spelled another way (a set trailing bit in its last
// character, a line break) is 404, and so is one signed for a category
// other than a subscription or for no address. It works for UNSUBSCRIBE_TOKEN_TTL
// after the day its mail was recorded; past that, the page says the
// link has expired (410) and nothing changes. A link of the first
// format, without a day, in mail sent before tokens carried one, keeps
// working.
func TestUnsubscribeLinksAreCanonicalAndExpire(t *testing.T) {
	t.Parallel()
	s := setup(t)
	anon := map[string]string{"Authorization": ""}
	post := func(token string) response {
		t.Helper()
		return s.do(t, http.MethodPost, "/v1/unsubscribe/"+url.PathEscape(token), "application/x-www-form-urlencoded", strings.NewReader("List-Unsubscribe=One-Click"), anon)
	}
	good := mail.UnsubscribeToken(unsubscribeSecret, "ana@example.com", "subscription", time.Now())
	payload, sig, _ := strings.Cut(good, ".")
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, sig[len(sig)-1])
	for name, token := range map[string]string{
		"a set trailing bit": payload + "." + sig[:len(sig)-1] + string(alphabet[last^1]),
		"a line break":       payload + "." + sig[:20] + "\n" + sig[20:],
		"padding":            good + "=",
		// Signed, but of nothing the worker signs: a category that is
		// not a subscription (the one a recipient can leave), a
		// recipient that is not an address.
		"another category":    mail.UnsubscribeToken(unsubscribeSecret, "ana@example.com", "newsletter", time.Now()),
		"transactional":       mail.UnsubscribeToken(unsubscribeSecret, "ana@example.com", "transactional", time.Now()),
		"NUL in the category": mail.UnsubscribeToken(unsubscribeSecret, "ana@example.com", "subscription\x00", time.Now()),
		"NUL in the address":  mail.UnsubscribeToken(unsubscribeSecret, "ana\x00@example.com", "subscription", time.Now()),
	} {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			if res := s.do(t, method, "/v1/unsubscribe/"+url.PathEscape(token), "application/x-www-form-urlencoded",
				strings.NewReader("List-Unsubscribe=One-Click"), anon); res.status != http.StatusNotFound {
				t.Errorf("%s %s: %d %s, want 404", method, name, res.status, res.body)
			}
		}
	}

	for _, method := range []string{http.MethodGet, http.MethodPost} {
		old := mail.UnsubscribeToken(unsubscribeSecret, "budi@example.com", "subscription", time.Now().Add(-mail.DefaultUnsubscribeTTL-48*time.Hour))
		res := s.do(t, method, "/v1/unsubscribe/"+old, "", nil, anon)
		if res.status != http.StatusGone || !strings.Contains(string(res.body), `id="expired"`) || !strings.Contains(string(res.body), "365 days") ||
			strings.Contains(string(res.body), `id="unsubscribe"`) || res.header.Get("Cache-Control") != "no-store" {
			t.Errorf("%s of an expired link: %d %s", method, res.status, res.body)
		}
	}
	if n := s.count(t, "unsubscribes"); n != 0 {
		t.Errorf("%d unsubscribe rows after expired and malformed links, want 0", n)
	}
	// Within its lifetime, a year less two days on.
	if res := post(mail.UnsubscribeToken(unsubscribeSecret, "citra@example.com", "subscription", time.Now().Add(-mail.DefaultUnsubscribeTTL+48*time.Hour))); res.status != http.StatusOK {
		t.Errorf("a link 363 days old: %d %s", res.status, res.body)
	}

	// The first format, made here as the worker made it: base64url of
	// category "\n" recipient, and its HMAC-SHA256 under the secret.
	legacyPayload := base64.RawURLEncoding.EncodeToString([]byte("subscription\ndewi@example.com"))
	m := hmac.New(sha256.New, []byte("sekali unsubscribe\x00"+unsubscribeSecret))
	m.Write([]byte(legacyPayload))
	legacy := legacyPayload + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	if res := post(legacy); res.status != http.StatusOK || !strings.Contains(string(res.body), `id="done"`) {
		t.Errorf("a link of the first format: %d %s", res.status, res.body)
	}
	if n := s.count(t, "unsubscribes WHERE recipient IN ('citra@example.com', 'dewi@example.com')"); n != 2 {
		t.Errorf("%d unsubscribe rows, want the two good links'", n)
	}
	if !strings.Contains(s.logs.String(), `"legacy_token":true`) {
		t.Error("the log does not say a link of the first format was used")
	}
}
