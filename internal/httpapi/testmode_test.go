package httpapi_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/order"
)

// A test key is made with "mode":"test" (admin API) or the console's
// box, reads sekali_test_…, places orders marked test, and sees no live
// order, as a live key sees no test one; the console marks test
// notifications and keys, and leaves them out of the last hour's
// curves, counting them apart.
func TestTestModeThroughTheAPIAndTheConsole(t *testing.T) {
	t.Parallel()
	s := setup(t, setupOpts{templates: shopTemplates(t)})
	var created struct {
		APIKey apikey.Key `json:"api_key"`
		Secret string     `json:"secret"`
	}
	r := s.do(t, http.MethodPost, "/admin/v1/api-keys", "application/json",
		strings.NewReader(`{"name":"shop CI","scopes":["checkout","orders:read","notifications:write"],"mode":"test"}`),
		map[string]string{"Authorization": "Bearer " + adminToken})
	if r.status != http.StatusCreated {
		t.Fatalf("create a test key: %d %s", r.status, r.body)
	}
	r.decode(t, &created)
	if !strings.HasPrefix(created.Secret, "sekali_test_") || created.APIKey.Mode != apikey.ModeTest {
		t.Fatalf("the test key: %s", r.body)
	}
	for _, body := range []string{
		`{"name":"ops","scopes":["admin"],"mode":"test"}`,
		`{"name":"x","scopes":["checkout"],"mode":"sandbox"}`,
	} {
		if r := s.do(t, http.MethodPost, "/admin/v1/api-keys", "application/json", strings.NewReader(body),
			map[string]string{"Authorization": "Bearer " + adminToken}); r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "/mode") {
			t.Errorf("create %s: %d %s, want 422 naming /mode", body, r.status, r.body)
		}
	}

	test := map[string]string{"Authorization": "Bearer " + created.Secret}
	var testOrder, liveOrder order.Order
	r = s.postOrder(t, strings.Replace(validCheckout, "  Ana.Maria@Example.COM ", "bounced@sekali.test", 1), test)
	if r.status != http.StatusCreated || !strings.Contains(string(r.body), `"test":true`) {
		t.Fatalf("a test key's checkout: %d %s", r.status, r.body)
	}
	r.decode(t, &testOrder)
	s.postOrder(t, validCheckout, nil).decode(t, &liveOrder)
	if strings.Contains(string(s.do(t, http.MethodGet, "/v1/orders/"+liveOrder.ID.String(), "", nil, nil).body), `"test"`) {
		t.Error("a live order says test")
	}
	if r := s.do(t, http.MethodGet, "/v1/orders/"+liveOrder.ID.String(), "", nil, test); r.status != http.StatusNotFound {
		t.Errorf("the test key reads the live order: %d", r.status)
	}
	if r := s.do(t, http.MethodGet, "/v1/orders/"+testOrder.ID.String(), "", nil, nil); r.status != http.StatusNotFound {
		t.Errorf("the live key reads the test order: %d", r.status)
	}
	if r := s.do(t, http.MethodGet, "/v1/orders/"+testOrder.ID.String(), "", nil, test); r.status != http.StatusOK {
		t.Errorf("the test key reads its order: %d", r.status)
	}
	if r := s.do(t, http.MethodPost, "/v1/notifications/"+testOrder.Notifications[0].ID.String()+"/cancel", "", nil, nil); r.status != http.StatusNotFound {
		t.Errorf("the live key cancels the test notification: %d", r.status)
	}
	for _, to := range []string{"delivered@sekali.test", "x@sub.sekali.test", "X@A.B.SEKALI.TEST"} {
		if r := s.postOrder(t, strings.Replace(validCheckout, "  Ana.Maria@Example.COM ", to, 1), nil); r.status != http.StatusUnprocessableEntity {
			t.Errorf("a live key's checkout to %s: %d, want 422", to, r.status)
		}
	}
	reminder, err := s.templates.Sample("payment-reminder")
	if err != nil {
		t.Fatal(err)
	}
	if r := s.do(t, http.MethodPost, "/v1/orders/"+liveOrder.ID.String()+"/notifications", "application/json", strings.NewReader(
		`{"template":"payment-reminder","event_id":"r1","recipient":"x@sub.sekali.test","data":`+string(reminder)+`}`), nil); r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), `"/recipient"`) {
		t.Errorf("a live key's trigger to x@sub.sekali.test: %d %s, want 422 at /recipient", r.status, r.body)
	}

	b, _ := s.operator(t, "Ana")
	_, _, page := b.do(http.MethodGet, "/admin/deliveries?order=newest", nil)
	if strings.Count(page, `class="badge-test"`) != 1 {
		t.Errorf("the deliveries: want one test badge, for the test key's:\n%s", page)
	}
	if _, _, page := b.do(http.MethodGet, "/admin/deliveries/"+testOrder.Notifications[0].ID.String(), nil); !strings.Contains(page, `id="test-mode"`) {
		t.Errorf("the test delivery's page does not say test:\n%s", page)
	}
	if _, _, page := b.do(http.MethodGet, "/admin/deliveries/"+liveOrder.Notifications[0].ID.String(), nil); strings.Contains(page, `id="test-mode"`) {
		t.Errorf("the live delivery's page says test")
	}
	_, _, page = b.do(http.MethodGet, "/admin/", nil)
	if !strings.Contains(page, `id="test-last-hour"`) || !strings.Contains(page, "1 test notifications recorded in the last hour") ||
		!strings.Contains(page, "1 recorded") {
		t.Errorf("the overview: want the last hour's 1 live recorded and the 1 test apart:\n%s", page)
	}

	_, _, page = b.do(http.MethodGet, "/admin/api-keys", nil)
	status, _, page := b.do(http.MethodPost, "/admin/api-keys", url.Values{"csrf": {b.csrf(page)}, "name": {"CI two"}, "scopes": {"checkout"}, "mode": {"test"}})
	if status != http.StatusCreated || !strings.Contains(page, "sekali_test_") {
		t.Errorf("a test key from the console: %d\n%s", status, page)
	}
	ks, err := s.keys.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var tests int
	for _, k := range ks {
		if k.Test() {
			tests++
		}
	}
	if tests != 2 {
		t.Errorf("%d test keys, want 2", tests)
	}
}
