package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/webhookout"
)

// Every operator action, in the console or through the admin API, is
// recorded with who did it: the console's operator, an operator's key,
// or the shared token's request. The console's activity page and
// GET /admin/v1/actions list them newest first.
func TestOperatorActionsAreRecordedWithWhoDidThem(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	var failed, held, pending order.Order
	for _, o := range []*order.Order{&failed, &held, &pending} {
		s.postOrder(t, validCheckout, nil).decode(t, o)
	}
	s.f.Failed(s.f.Get(failed.Notifications[0].ID), "550 no such user")
	s.f.Held(s.f.Get(held.Notifications[0].ID), "outcome unknown")
	ana, anaKey := s.operator(t, "Ana")
	anaActor := "operator:Ana (" + anaKey.Prefix + ")"
	budi, budiToken, err := s.keys.Create(ctx, "test", "Budi", []apikey.Scope{apikey.ScopeAdmin})
	if err != nil {
		t.Fatal(err)
	}
	budiActor := "operator:Budi (" + budi.Prefix + ")"
	asBudi := map[string]string{"Authorization": "Bearer " + budiToken}
	asToken := map[string]string{"Authorization": "Bearer " + adminToken, "X-Request-Id": "req-activity-1"}

	// before is what was recorded already (the keys made above); want,
	// every action in the order made: action, actor, target.
	var before struct {
		Actions []notify.Action `json:"actions"`
	}
	s.admin(t, http.MethodGet, "/admin/v1/actions", "").decode(t, &before)
	type rec struct{ action, actor, target string }
	var want []rec
	post := func(path string, form url.Values, r rec) {
		t.Helper()
		_, _, page := ana.do(http.MethodGet, "/admin/", nil)
		form.Set("csrf", ana.csrf(page))
		if status, _, body := ana.do(http.MethodPost, path, form); status >= 400 {
			t.Fatalf("console %s = %d:\n%s", path, status, body)
		}
		want = append(want, r)
	}
	api := func(method, path, body string, header map[string]string, r rec) response {
		t.Helper()
		ct := ""
		if body != "" {
			ct = "application/json"
		}
		res := s.do(t, method, path, ct, strings.NewReader(body), header)
		if res.status >= 300 {
			t.Fatalf("%s %s = %d %s", method, path, res.status, res.body)
		}
		want = append(want, r)
		return res
	}

	// The console, as Ana.
	post("/admin/queue/pause", url.Values{"note": {"provider incident"}}, rec{"queue.pause", anaActor, "queue:" + s.redis.Queue})
	post("/admin/queue/resume", url.Values{"note": {"provider back"}}, rec{"queue.resume", anaActor, "queue:" + s.redis.Queue})
	later := "queue:" + s.redis.Queue + "-later"
	post("/admin/queue/pause", url.Values{"note": {"flash sale"}, "lane": {"later"}}, rec{"queue.pause", anaActor, later})
	if _, _, page := ana.do(http.MethodGet, "/admin/", nil); !regexp.MustCompile(`id="later-lane">Later lane<div class="n">0</div><div class="note"><span class="down">paused</span>`).MatchString(page) ||
		!strings.Contains(page, `<div class="n">running</div>`) || !strings.Contains(page, ">Resume the later lane</button>") {
		t.Errorf("the overview after pausing the later lane does not show it paused and the queue running:\n%s", page)
	}
	post("/admin/queue/resume", url.Values{"note": {"sale over"}, "lane": {"later"}}, rec{"queue.resume", anaActor, later})
	post("/admin/blocks", url.Values{"kind": {"recipient"}, "value": {"Ana.Maria@Example.com"}, "reason": {"complaint"}, "ttl": {"1h"}},
		rec{"block.add", anaActor, ""})
	_, _, blocks := ana.do(http.MethodGet, "/admin/blocks", nil)
	lift := regexp.MustCompile(`action="/admin/blocks/([0-9]+)/remove"`).FindStringSubmatch(blocks)
	if lift == nil {
		t.Fatalf("no block to lift:\n%s", blocks)
	}
	want[len(want)-1].target = "block:" + lift[1]
	post("/admin/blocks/"+lift[1]+"/remove", url.Values{}, rec{"block.remove", anaActor, "block:" + lift[1]})
	post("/admin/suppressions", url.Values{"recipient": {"Gone@Example.com"}, "note": {"asked by phone"}},
		rec{"suppression.add", anaActor, "recipient:gone@example.com"})
	post("/admin/suppressions/remove", url.Values{"recipient": {"gone@example.com"}, "note": {"wrong person"}},
		rec{"suppression.remove", anaActor, "recipient:gone@example.com"})
	post("/admin/api-keys", url.Values{"name": {"shop-backend-2027"}, "scopes": {"checkout"}}, rec{"api_key.create", anaActor, ""})
	keys, err := s.keys.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	made := keys[len(keys)-1]
	want[len(want)-1].target = "api_key:" + made.Prefix
	post("/admin/api-keys/"+made.ID.String()+"/revoke", url.Values{}, rec{"api_key.revoke", anaActor, "api_key:" + made.Prefix})
	failedID := failed.Notifications[0].ID.String()
	post("/admin/deliveries/"+failedID+"/retry", url.Values{"note": {"address fixed"}}, rec{"delivery.retry", anaActor, "delivery:" + failedID})

	// The admin API, with Budi's key and with the shared token.
	heldID, pendingID := held.Notifications[0].ID.String(), pending.Notifications[0].ID.String()
	api("POST", "/admin/v1/deliveries/"+heldID+"/mark-sent", `{"provider_message_id": "MH-1", "note": "in the log"}`, asBudi,
		rec{"delivery.mark_sent", budiActor, "delivery:" + heldID})
	api("POST", "/admin/v1/deliveries/"+pendingID+"/cancel", `{"note": "refunded"}`, asBudi, rec{"delivery.cancel", budiActor, "delivery:" + pendingID})
	api("PUT", "/admin/v1/queue/concurrency", `{"per_worker": 3}`, asToken, rec{"queue.concurrency", "admin:req-activity-1", "queue:" + s.redis.Queue})
	api("POST", "/admin/v1/queue/pause", `{"note": "deploy"}`, asToken, rec{"queue.pause", "admin:req-activity-1", "queue:" + s.redis.Queue})
	hook := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer hook.Close()
	var ep struct {
		Endpoint webhookout.Endpoint `json:"webhook_endpoint"`
	}
	res := api("POST", "/admin/v1/webhook-endpoints", `{"url": "`+hook.URL+`/hooks"}`, asBudi, rec{"webhook_endpoint.create", budiActor, ""})
	res.decode(t, &ep)
	epPath, epTarget := "/admin/v1/webhook-endpoints/"+ep.Endpoint.ID.String(), "webhook_endpoint:"+ep.Endpoint.ID.String()
	want[len(want)-1].target = epTarget
	api("POST", epPath+"/rotate-secret", "", asBudi, rec{"webhook_endpoint.rotate_secret", budiActor, epTarget})
	api("POST", epPath+"/disable", `{"reason": "receiver moves"}`, asBudi, rec{"webhook_endpoint.disable", budiActor, epTarget})
	api("POST", epPath+"/enable", "", asBudi, rec{"webhook_endpoint.enable", budiActor, epTarget})
	api("POST", epPath+"/replay", `{"since": "2026-01-01T00:00:00Z"}`, asBudi, rec{"webhook_endpoint.replay", budiActor, epTarget})
	api("DELETE", epPath, "", asBudi, rec{"webhook_endpoint.delete", budiActor, epTarget})

	// The API lists them newest first, a page at a time.
	var got struct {
		Actions []notify.Action `json:"actions"`
	}
	s.admin(t, http.MethodGet, fmt.Sprintf("/admin/v1/actions?limit=%d", len(want)), "").decode(t, &got)
	if len(got.Actions) != len(want) {
		t.Fatalf("%d actions recorded, want %d: %+v", len(got.Actions), len(want), got.Actions)
	}
	for i, a := range got.Actions {
		w := want[len(want)-1-i]
		if a.Action != w.action || a.Actor != w.actor || a.Target != w.target {
			t.Errorf("action %d (newest first): %s by %q on %q, want %s by %q on %q", i, a.Action, a.Actor, a.Target, w.action, w.actor, w.target)
		}
	}
	if d := string(got.Actions[len(want)-1].Detail); !strings.Contains(d, `"note":"provider incident"`) {
		t.Errorf("the pause's detail %s lacks its note", d)
	}
	var next struct {
		Actions []notify.Action `json:"actions"`
	}
	s.admin(t, http.MethodGet, fmt.Sprintf("/admin/v1/actions?limit=2&before=%d", got.Actions[1].ID), "").decode(t, &next)
	if len(next.Actions) != 2 || next.Actions[0].ID != got.Actions[2].ID || next.Actions[1].ID != got.Actions[3].ID {
		t.Errorf("the page before action %d: %+v, want actions %d and %d", got.Actions[1].ID, next.Actions, got.Actions[2].ID, got.Actions[3].ID)
	}

	// The console shows them, linked from every page, with a link to
	// what has a page of its own.
	_, _, page := ana.do(http.MethodGet, "/admin/", nil)
	if !strings.Contains(page, `href="/admin/activity"`) {
		t.Error("the console's pages do not link to the activity")
	}
	status, _, page := ana.do(http.MethodGet, "/admin/activity", nil)
	rows := regexp.MustCompile(`(?s)<tr><td>[0-9-]+ [0-9:]+</td>.*?</tr>`).FindAllString(page, -1)
	if status != http.StatusOK || len(rows) != len(before.Actions)+len(want) {
		t.Fatalf("the activity page = %d with %d rows, want %d:\n%s", status, len(rows), len(before.Actions)+len(want), page)
	}
	if !strings.Contains(rows[0], "webhook_endpoint.delete") || !strings.Contains(rows[0], budiActor) ||
		!strings.Contains(rows[len(want)-1], "queue.pause") || !strings.Contains(rows[len(want)-1], "provider incident") {
		t.Errorf("the activity page is not newest first, with actor and note:\n%s", page)
	}
	if !strings.Contains(page, `<a href="/admin/deliveries/`+failedID+`">delivery:`+failedID+`</a>`) {
		t.Errorf("the retry does not link to its delivery:\n%s", page)
	}
}
