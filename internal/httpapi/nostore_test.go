package httpapi_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/httpapi"
	"github.com/sekali-dev/sekali/internal/order"
)

// cacheable are the routes whose answers a cache may keep: they carry
// no secret and nobody's data (renders of the templates' samples or of
// what the caller sent, this document, health), or set their own
// headers (the unsubscribe page and the providers' webhooks, whose
// answers say nothing).
var cacheable = map[string]bool{
	"GET /healthz":                      true,
	"GET /readyz":                       true,
	"GET /openapi.yaml":                 true,
	"GET /v1/templates":                 true,
	"GET /v1/templates/{name}/preview":  true,
	"POST /v1/templates/{name}/preview": true,
	"GET /templates":                    true,
	"GET /v1/unsubscribe/{token}":       true,
	"POST /v1/unsubscribe/{token}":      true,
	"POST /v1/webhooks/{provider}":      true,
}

// Answers with secrets or personal data are kept by no cache: every
// answer of the checkout's, the backend's and the admin API's routes,
// their refusals and errors included, carries Cache-Control: no-store.
// The routes come from routes.go itself (chi.Walk), so a route added
// there is checked without a line here; only those in cacheable may go
// without it.
func TestSecretsAndPersonalDataAreNotStored(t *testing.T) {
	t.Parallel()
	s := setup(t, setupOpts{rateLimits: httpapi.RateLimits{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")},
	}})
	noStore := func(what string, res response) {
		t.Helper()
		if got := res.header.Get("Cache-Control"); got != "no-store" {
			t.Errorf("%s = %d with Cache-Control %q, want no-store: %.200s", what, res.status, got, res.body)
		}
	}
	admin := func(method, path, body string) response {
		t.Helper()
		res := s.admin(t, method, path, body)
		noStore(method+" "+path, res)
		return res
	}

	// The answers that carry secrets, each seen once with its secret.
	res := s.postOrder(t, validCheckout, nil)
	noStore("the checkout's answer, with the order's access_token", res)
	var o order.Order
	res.decode(t, &o)
	if o.AccessToken == "" || len(o.Notifications) == 0 {
		t.Fatalf("checkout: %d %s", res.status, res.body)
	}
	orderPath := "/v1/orders/" + o.ID.String()
	noStore("the order read with a key", s.do(t, http.MethodGet, orderPath, "", nil, nil))
	noStore("the order read with its access token", s.do(t, http.MethodGet, orderPath, "", nil, map[string]string{"Authorization": "Bearer " + o.AccessToken}))
	if res := admin(http.MethodPost, "/admin/v1/api-keys", `{"name": "next backend", "scopes": ["orders:read"]}`); res.status != http.StatusCreated {
		t.Errorf("a new API key: %d %s", res.status, res.body)
	}
	hook := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer hook.Close()
	var made struct {
		Endpoint struct {
			ID string `json:"id"`
		} `json:"webhook_endpoint"`
	}
	res = admin(http.MethodPost, "/admin/v1/webhook-endpoints", `{"url": "`+hook.URL+`/hooks"}`)
	res.decode(t, &made)
	if res.status != http.StatusCreated {
		t.Fatalf("a new webhook endpoint: %d %s", res.status, res.body)
	}
	if res := admin(http.MethodPost, "/admin/v1/webhook-endpoints/"+made.Endpoint.ID+"/rotate-secret", ""); res.status != http.StatusOK {
		t.Errorf("a rotated webhook secret: %d %s", res.status, res.body)
	}

	// Every other route, without credentials and with them: whatever it
	// answers (200, 404, 422, 401, 429, …) is not stored.
	srv := httpapi.NewServer(httpapi.Deps{Log: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	param := regexp.MustCompile(`\{([^}:]+)(:[^}]*)?\}`)
	ids := map[string]string{
		"/v1/orders/":                  o.ID.String(),
		"/v1/notifications/":           o.Notifications[0].ID.String(),
		"/admin/v1/deliveries/":        o.Notifications[0].ID.String(),
		"/admin/v1/webhook-endpoints/": made.Endpoint.ID,
		"/admin/v1/suppressions/":      "gone@example.com",
	}
	walked := 0
	err := chi.Walk(srv.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if cacheable[method+" "+route] {
			return nil
		}
		walked++
		path := param.ReplaceAllStringFunc(route, func(string) string { return "00000000-0000-4000-8000-000000000000" })
		for prefix, id := range ids {
			if strings.HasPrefix(route, prefix) {
				path = param.ReplaceAllString(route, id)
			}
		}
		ct, body := "", ""
		if method == http.MethodPost || method == http.MethodPut {
			ct, body = "application/json", "{}"
		}
		for who, authorization := range map[string]string{
			"no credentials": "",
			"a wrong key":    "Bearer sekali_key_aaaaaaaaaaaaaaaa_wrong",
		} {
			noStore(method+" "+path+" with "+who, s.do(t, method, path, ct, strings.NewReader(body),
				map[string]string{"Authorization": authorization, "X-Forwarded-For": "203.0.113.1"}))
		}
		good := "Bearer " + s.backendKey
		if strings.HasPrefix(route, "/admin/") {
			good = "Bearer " + adminToken
		}
		noStore(method+" "+path, s.do(t, method, path, ct, strings.NewReader(body),
			map[string]string{"Authorization": good, "X-Forwarded-For": "203.0.113.2"}))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if walked < 30 {
		t.Errorf("walked %d routes; routes.go has more", walked)
	}
}
