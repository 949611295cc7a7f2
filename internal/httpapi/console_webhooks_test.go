package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/webhookout"
)

// hookReceiver is a shop's webhook receiver that answers its first
// request 503 with a note, and every later one 204.
func hookReceiver(t *testing.T) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		n++
		first := n == 1
		mu.Unlock()
		if first {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "down for maintenance")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The console manages the shop's webhook endpoints as the admin API does,
// each action recorded under the operator's name: Ana adds an endpoint
// (its secret shown once, never on the page again), sees its events with
// what the receiver answered (503 and its note, then 204), live and test
// apart, rotates its secret (the new one shown once), replays an event,
// disables it with a reason and enables it; the activity names her and
// links the endpoint.
func TestConsoleManagesWebhooks(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	ana, anaKey := s.operator(t, "Ana")
	anaActor := "operator:Ana (" + anaKey.Prefix + ")"
	rcv := hookReceiver(t)

	status, _, page := ana.do(http.MethodGet, "/admin/webhooks", nil)
	if status != http.StatusOK || !strings.Contains(page, `<a href="/admin/webhooks">Webhooks</a>`) || !strings.Contains(page, "No endpoint yet.") {
		t.Fatalf("the webhooks page = %d:\n%s", status, page)
	}
	csrf := ana.csrf(page)
	status, _, page = ana.do(http.MethodPost, "/admin/webhooks", url.Values{"csrf": {csrf}, "url": {"https://10.1.2.3/hooks"}})
	if status != http.StatusUnprocessableEntity || !strings.Contains(page, "Not added: url:") {
		t.Errorf("an endpoint on a private address: %d, want 422 saying why:\n%s", status, page)
	}
	status, _, page = ana.do(http.MethodPost, "/admin/webhooks", url.Values{"csrf": {csrf}, "url": {rcv.URL + "/hooks/sekali"},
		"event_types": {"notification.sent"}, "description": {"order service"}})
	secret := regexp.MustCompile(`id="secret">(whsec_[^<]+)<`).FindStringSubmatch(page)
	link := regexp.MustCompile(`<a href="(/admin/webhooks/([0-9a-f-]{36}))">` + regexp.QuoteMeta(rcv.URL) + `/hooks/sekali</a>`).FindStringSubmatch(page)
	if status != http.StatusCreated || secret == nil || link == nil || !strings.Contains(page, "order service") {
		t.Fatalf("adding an endpoint: %d, want 201 with its secret, once, and the endpoint listed:\n%s", status, page)
	}
	epPath, epID := link[1], uuid.MustParse(link[2])

	// Events: a live notification's and a test key's, posted once by the
	// reconciler's dispatcher (the receiver refuses the first).
	var live order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &live)
	_, testKey, err := s.keys.CreateReplacing(ctx, "test", "shop CI", []apikey.Scope{apikey.ScopeCheckout}, uuid.Nil, apikey.ModeTest)
	if err != nil {
		t.Fatal(err)
	}
	var test order.Order
	s.postOrder(t, strings.Replace(validCheckout, "  Ana.Maria@Example.COM ", "delivered@sekali.test", 1), asKey(testKey)).decode(t, &test)
	s.f.Sent(s.f.Get(live.Notifications[0].ID), "p-live")
	s.f.Sent(s.f.Get(test.Notifications[0].ID), "p-test")
	loopback := &webhookout.Guard{AllowHTTP: true, Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	d := webhookout.NewDispatcher(s.db.Pool, webhookout.Config{Guard: loopback, Concurrency: 1}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if _, err := d.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	status, _, page = ana.do(http.MethodGet, epPath, nil)
	if status != http.StatusOK || strings.Contains(page, secret[1]) || strings.Count(page, `class="badge-test"`) != 1 ||
		!strings.Contains(page, `<span class="answer-status down">503</span> answered 503: down for maintenance`) ||
		!strings.Contains(page, `<span class="answer-status up">204</span>`) || strings.Count(page, "<span class=\"up\">delivered</span>") != 1 {
		t.Errorf("the endpoint's page = %d; want its two events (one test), one refused 503 with the receiver's note, one taken 204, and no secret:\n%s", status, page)
	}
	for mode, want := range map[string]string{"live": "p-live", "test": "p-test"} {
		_, _, page := ana.do(http.MethodGet, epPath+"?mode="+mode, nil)
		msgs := regexp.MustCompile(`<code>(msg_[0-9]+)</code>`).FindAllStringSubmatch(page, -1)
		if len(msgs) != 1 || !strings.Contains(page, `<strong aria-current="page">`+mode+` only</strong>`) {
			t.Errorf("?mode=%s shows %d events (%s's alone wanted), its choice not current:\n%s", mode, len(msgs), want, page)
		}
	}

	// Rotate: a new secret, shown once, the previous one signing too.
	status, _, page = ana.do(http.MethodPost, epPath+"/rotate-secret", url.Values{"csrf": {csrf}})
	rotated := regexp.MustCompile(`id="secret">(whsec_[^<]+)<`).FindStringSubmatch(page)
	if status != http.StatusOK || rotated == nil || rotated[1] == secret[1] || !strings.Contains(page, "rotated: the previous one still signs too") {
		t.Errorf("rotate = %d; want the new secret once, and the endpoint rotating:\n%s", status, page)
	}

	// Replay the refused-then-taken live event.
	_, _, page = ana.do(http.MethodGet, epPath+"?mode=live", nil)
	msg := regexp.MustCompile(`<code>(msg_[0-9]+)</code>`).FindStringSubmatch(page)
	status, h, _ := ana.do(http.MethodPost, epPath+"/replay", url.Values{"csrf": {csrf}, "webhook_id": {msg[1]}})
	if status != http.StatusSeeOther || h.Get("Location") != epPath+"?replayed=1" {
		t.Fatalf("replay = %d to %q", status, h.Get("Location"))
	}
	_, _, page = ana.do(http.MethodGet, h.Get("Location"), nil)
	if !strings.Contains(page, `id="replayed">Sent again: 1 event,`) || !strings.Contains(page, "next attempt") {
		t.Errorf("after the replay the page does not say so, or the event waits for no attempt:\n%s", page)
	}
	if status, _, _ := ana.do(http.MethodPost, epPath+"/replay", url.Values{"csrf": {csrf}}); status != http.StatusUnprocessableEntity {
		t.Errorf("a replay of nothing named: %d, want 422", status)
	}

	// Disable (a reason is required), then enable.
	if status, _, _ := ana.do(http.MethodPost, epPath+"/disable", url.Values{"csrf": {csrf}, "reason": {" "}}); status != http.StatusUnprocessableEntity {
		t.Errorf("disable without a reason: %d, want 422", status)
	}
	if status, _, _ := ana.do(http.MethodPost, epPath+"/disable", url.Values{"csrf": {csrf}, "reason": {"the receiver moves"}}); status != http.StatusSeeOther {
		t.Errorf("disable: %d, want 303", status)
	}
	if _, _, page := ana.do(http.MethodGet, epPath, nil); !strings.Contains(page, `<span class="down">disabled</span> since`) ||
		!strings.Contains(page, ": the receiver moves;") || !strings.Contains(page, `id="enable"`) {
		t.Errorf("the disabled endpoint's page:\n%s", page)
	}
	if status, _, _ := ana.do(http.MethodPost, epPath+"/enable", url.Values{"csrf": {csrf}}); status != http.StatusSeeOther {
		t.Errorf("enable: %d, want 303", status)
	}
	if status, _, _ := ana.do(http.MethodPost, "/admin/webhooks/"+uuid.NewString()+"/rotate-secret", url.Values{"csrf": {csrf}}); status != http.StatusNotFound {
		t.Errorf("rotating no endpoint: %d, want 404", status)
	}

	// Each action is Ana's, in the activity, which links the endpoint.
	actions, err := notify.NewOperator(s.db.Pool, nil, nil, nil).Actions(ctx, 0, 20)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range actions {
		if a.Target == "webhook_endpoint:"+epID.String() && a.Actor == anaActor {
			got = append(got, a.Action)
		}
	}
	if want := "webhook_endpoint.enable webhook_endpoint.disable webhook_endpoint.replay webhook_endpoint.rotate_secret webhook_endpoint.create"; strings.Join(got, " ") != want {
		t.Errorf("Ana's actions on the endpoint, newest first: %v, want %s", got, want)
	}
	if _, _, page := ana.do(http.MethodGet, "/admin/activity", nil); !strings.Contains(page, `<a href="`+epPath+`">webhook_endpoint:`+epID.String()+`</a>`) {
		t.Errorf("the activity does not link the endpoint:\n%s", page)
	}
}

// The lists with test rows filter them: the deliveries' search, the
// suppression list and the API keys show live and test, or one mode.
func TestConsoleListsFilterLiveAndTest(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	_, testKey, err := s.keys.CreateReplacing(ctx, "test", "shop CI", []apikey.Scope{apikey.ScopeCheckout}, uuid.Nil, apikey.ModeTest)
	if err != nil {
		t.Fatal(err)
	}
	var live, test order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &live)
	s.postOrder(t, strings.Replace(validCheckout, "  Ana.Maria@Example.COM ", "bounced@sekali.test", 1), asKey(testKey)).decode(t, &test)
	ops := notify.NewOperator(s.db.Pool, nil, nil, nil)
	if _, _, err := ops.Suppress(ctx, "gone@example.com", "asked by phone", "test"); err != nil {
		t.Fatal(err)
	}
	// Test mode's list is its test provider's reports': this one is
	// written as the reconciler records a magic recipient's bounce.
	if _, err := s.db.Pool.Exec(ctx, `INSERT INTO suppressions (recipient, source, reason, test) VALUES ('bounced@sekali.test', 'bounce', 'test bounce', true)`); err != nil {
		t.Fatal(err)
	}
	b, _ := s.operator(t, "Ana")

	for _, c := range []struct {
		path, mode string
		want, not  []string
	}{
		{"/admin/deliveries?order=newest", "", []string{live.Notifications[0].ID.String(), test.Notifications[0].ID.String()}, nil},
		{"/admin/deliveries?order=newest", "live", []string{live.Notifications[0].ID.String()}, []string{test.Notifications[0].ID.String()}},
		{"/admin/deliveries?order=newest", "test", []string{test.Notifications[0].ID.String()}, []string{live.Notifications[0].ID.String()}},
		{"/admin/suppressions", "", []string{">gone@example.com<", ">bounced@sekali.test<"}, nil},
		{"/admin/suppressions", "live", []string{">gone@example.com<"}, []string{">bounced@sekali.test<"}},
		{"/admin/suppressions", "test", []string{">bounced@sekali.test<"}, []string{">gone@example.com<"}},
		{"/admin/api-keys", "live", []string{"<td>Ana</td>"}, []string{"shop CI"}},
		{"/admin/api-keys", "test", []string{"shop CI"}, []string{"<td>Ana</td>"}},
	} {
		path := c.path
		if c.mode != "" {
			path += map[bool]string{true: "&", false: "?"}[strings.Contains(path, "?")] + "mode=" + c.mode
		}
		status, _, page := b.do(http.MethodGet, path, nil)
		for _, w := range c.want {
			if status != http.StatusOK || !strings.Contains(page, w) {
				t.Errorf("%s = %d, lacks %s:\n%s", path, status, w, page)
			}
		}
		for _, n := range c.not {
			if strings.Contains(page, n) {
				t.Errorf("%s shows %s", path, n)
			}
		}
	}
	// The search keeps its mode on its next page and in a bulk retry.
	if _, _, page := b.do(http.MethodGet, "/admin/deliveries?status=failed&mode=test", nil); !strings.Contains(page, `<option value="test" selected>test only</option>`) ||
		!strings.Contains(page, `<input type="hidden" name="mode" value="test">`) {
		t.Errorf("the search does not keep its mode:\n%s", page)
	}
}

// A delivery's timeline shows each row's detail as labelled fields, not
// as JSON.
func TestConsoleTimelineShowsLabelledFields(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	s.f.Failed(s.f.Get(o.Notifications[0].ID), "550 5.1.1 no such user")
	b, _ := s.operator(t, "Ana")
	_, _, page := b.do(http.MethodGet, "/admin/deliveries/"+o.Notifications[0].ID.String(), nil)
	_, timeline, _ := strings.Cut(page, `id="timeline"`)
	timeline, _, _ = strings.Cut(timeline, "</table>")
	if strings.Contains(timeline, "{&#34;") || strings.Contains(timeline, `{"`) {
		t.Errorf("the timeline shows raw JSON:\n%s", timeline)
	}
	if !regexp.MustCompile(`<td class="detail"><div><span class="note">[a-z_]+:</span> [^<]*550 5.1.1 no such user</div>`).MatchString(timeline) {
		t.Errorf("the failure's detail is not a labelled field:\n%s", timeline)
	}
}
