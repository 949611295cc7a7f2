package e2e_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// Test mode as a shop's CI meets it (docs/testmode.md), on the three
// binaries as they ship, with a real provider configured: the worker's
// SMTP relay is a sink that records whatever reaches it. A test key's
// checkout to bounced@sekali.test produces, without any provider, the
// recipient's suppression and a notification.bounced at the shop's
// endpoint that the Standard Webhooks library verifies, marked test; a
// test key's checkout to a real-looking address is sent (the state
// machine runs to sent) and never reaches the relay; the live key's
// checkout, the control, does. A test key does not see the live order,
// nor the live key the test one; the worker counts the two modes apart.
func TestATestKeysBounceReachesTheShopWithoutAProvider(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	rd := testenv.NewRedis(t)
	sink, err := smtpsink.Start(smtpsink.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	rcv := newHookReceiver(t)
	const adminToken = "test-admin-token-0123456789"
	env := func(extra ...string) map[string]string {
		m := map[string]string{"DATABASE_URL": db.URL, "REDIS_URL": rd.URL, "DELIVERY_QUEUE": rd.Queue,
			"MAIL_FROM": "orders@shop.example", "METRICS_ADDR": "127.0.0.1:0", "LOG_LEVEL": "info",
			"WEBHOOK_ALLOW_HTTP": "true", "WEBHOOK_ALLOW_NETWORKS": "127.0.0.0/8"}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	api := testenv.Start(t, "api", testenv.Binary(t, "./cmd/api"), env("HTTP_ADDR", "127.0.0.1:0", "ADMIN_TOKEN", adminToken))
	apiURL := "http://" + api.WaitLog(t, "api listening", "addr", 60*time.Second)
	worker := testenv.Start(t, "worker", testenv.Binary(t, "./cmd/worker"), env(
		"SMTP_HOST", sink.Host(), "SMTP_PORT", strconv.Itoa(sink.Port()), "SMTP_TLS", "none"))
	workerMetrics := worker.WaitLog(t, "worker started", "metrics_addr", 60*time.Second)
	rec := testenv.Start(t, "reconciler", testenv.Binary(t, "./cmd/reconciler"), env(
		"RECONCILE_INTERVAL", "100ms", "WEBHOOK_INTERVAL", "100ms"))
	recMetrics := rec.WaitLog(t, "reconciler started", "metrics_addr", 60*time.Second)

	call := func(method, path, token, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, apiURL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(res.Body).Decode(&out)
		return res.StatusCode, out
	}
	status, out := call(http.MethodPost, "/admin/v1/webhook-endpoints", adminToken, `{"url":"`+rcv.URL+`/hooks","description":"shop CI"}`)
	if status != http.StatusCreated {
		t.Fatalf("register the endpoint: %d %v", status, out)
	}
	hookSecret, _ := out["secret"].(string)
	key := func(mode string) string {
		t.Helper()
		status, out := call(http.MethodPost, "/admin/v1/api-keys", adminToken,
			`{"name":"shop `+mode+`","scopes":["checkout","orders:read","notifications:write"],"mode":"`+mode+`"}`)
		if status != http.StatusCreated {
			t.Fatalf("create a %s key: %d %v", mode, status, out)
		}
		secret, _ := out["secret"].(string)
		return secret
	}
	testKey, liveKey := key("test"), key("live")
	if !strings.HasPrefix(testKey, "sekali_test_") || !strings.HasPrefix(liveKey, "sekali_key_") {
		t.Fatalf("keys %q and %q: want sekali_test_… and sekali_key_…", testKey[:12], liveKey[:11])
	}
	checkout := func(token, email string) (orderID, notificationID string, test bool) {
		t.Helper()
		status, out := call(http.MethodPost, "/v1/orders", token, `{"customer_email":"`+email+`","customer_name":"Ana","currency":"IDR",`+
			`"items":[{"sku":"TEA-01","name":"Teh melati","quantity":2,"unit_price":4500000}]}`)
		if status != http.StatusCreated {
			t.Fatalf("checkout to %s: %d %v", email, status, out)
		}
		ns, _ := out["notifications"].([]any)
		n, _ := ns[0].(map[string]any)
		test, _ = out["test"].(bool)
		return out["id"].(string), n["id"].(string), test
	}
	bouncedOrder, bouncedNotification, bouncedTest := checkout(testKey, "bounced@sekali.test")
	strangerOrder, _, _ := checkout(testKey, "stranger@example.com")
	liveOrder, liveNotification, liveTest := checkout(liveKey, "budi@example.com")
	if !bouncedTest || liveTest {
		t.Errorf(`"test" in the answers: %v for the test key's order, %v for the live key's; want true and absent`, bouncedTest, liveTest)
	}

	// The signed bounce, at the shop's endpoint.
	var bounce hookRequest
	testenv.WaitFor(t, "notification.bounced at the shop's endpoint", 60*time.Second, func() bool {
		for _, r := range rcv.got() {
			if strings.Contains(string(r.body), `"notification.bounced"`) {
				bounce = r
				return true
			}
		}
		return false
	})
	wh, err := standardwebhooks.NewWebhook(hookSecret)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(bounce.body, bounce.header); err != nil {
		t.Errorf("the Standard Webhooks library does not verify the bounce: %v", err)
	}
	var ev struct {
		Type string `json:"type"`
		Data struct {
			NotificationID    string `json:"notification_id"`
			OrderID           string `json:"order_id"`
			ProviderMessageID string `json:"provider_message_id"`
			Test              bool   `json:"test"`
		} `json:"data"`
	}
	if err := json.Unmarshal(bounce.body, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Type != "notification.bounced" || ev.Data.NotificationID != bouncedNotification || ev.Data.OrderID != bouncedOrder ||
		!ev.Data.Test || !strings.HasPrefix(ev.Data.ProviderMessageID, "test_") {
		t.Errorf("the bounce: %s", bounce.body)
	}
	// The recipient is suppressed, as after a provider's hard bounce.
	if status, out := call(http.MethodGet, "/admin/v1/suppressions/bounced@sekali.test", adminToken, ""); status != http.StatusOK {
		t.Errorf("bounced@sekali.test on the suppression list: %d %v, want 200", status, out)
	}

	// The stranger's confirmation is sent by the test provider and
	// never mailed; the live one is, through the relay.
	notificationStatus := func(token, orderID string) string {
		_, out := call(http.MethodGet, "/v1/orders/"+orderID, token, "")
		ns, _ := out["notifications"].([]any)
		if len(ns) == 0 {
			return ""
		}
		s, _ := ns[0].(map[string]any)["status"].(string)
		return s
	}
	testenv.WaitFor(t, "the test and live confirmations to be sent", 30*time.Second, func() bool {
		return notificationStatus(testKey, strangerOrder) == "sent" && notificationStatus(liveKey, liveOrder) == "sent"
	})
	testenv.WaitFor(t, "the live confirmation at the relay", 30*time.Second, func() bool { return sink.Count() >= 1 })
	if got := sink.ByRecipient("stranger@example.com"); len(got) != 0 {
		t.Errorf("a test key's checkout to stranger@example.com reached the provider: %d messages", len(got))
	}
	if got := sink.ByRecipient("bounced@sekali.test"); len(got) != 0 {
		t.Errorf("a test key's checkout to bounced@sekali.test reached the provider: %d messages", len(got))
	}
	if sink.Count() != 1 || len(sink.ByRecipient("budi@example.com")) != 1 {
		t.Errorf("the relay has %d messages, want the live confirmation alone", sink.Count())
	}

	// Test and live never mix: each key's other-mode order and
	// notification are not there.
	if status, _ := call(http.MethodGet, "/v1/orders/"+liveOrder, testKey, ""); status != http.StatusNotFound {
		t.Errorf("the test key reads the live order: %d, want 404", status)
	}
	if status, _ := call(http.MethodGet, "/v1/orders/"+bouncedOrder, liveKey, ""); status != http.StatusNotFound {
		t.Errorf("the live key reads the test order: %d, want 404", status)
	}
	if status, _ := call(http.MethodPost, "/v1/notifications/"+liveNotification+"/cancel", testKey, ""); status != http.StatusNotFound {
		t.Errorf("the test key cancels the live notification: %d, want 404", status)
	}
	if status, _ := call(http.MethodPost, "/v1/orders/"+liveOrder+"/notifications/cancel", testKey,
		`{"template":"order-confirmation"}`); status != http.StatusNotFound {
		t.Errorf("the test key cancels the live order's confirmations: %d, want 404", status)
	}
	// A live key may not mail test mode's domain.
	if status, _ := call(http.MethodPost, "/v1/orders", liveKey, `{"customer_email":"bounced@sekali.test","customer_name":"Ana","currency":"IDR",`+
		`"items":[{"sku":"TEA-01","name":"Teh","quantity":1,"unit_price":4500000}]}`); status != http.StatusUnprocessableEntity {
		t.Errorf("a live key's checkout to bounced@sekali.test: %d, want 422", status)
	}

	// Metrics label the modes apart.
	sent := func(mode string) float64 {
		return scrape(t, workerMetrics, `sekali_deliveries_total{mode="`+mode+`",outcome="sent",template="order-confirmation"}`)
	}
	if got, want := sent("test"), 2.0; got != want {
		t.Errorf(`sekali_deliveries_total{mode="test",outcome="sent"} = %v, want %v`, got, want)
	}
	if got, want := sent("live"), 1.0; got != want {
		t.Errorf(`sekali_deliveries_total{mode="live",outcome="sent"} = %v, want %v`, got, want)
	}
	if got := scrape(t, recMetrics, `sekali_test_feedback_total{kind="bounced"}`); got != 1 {
		t.Errorf(`sekali_test_feedback_total{kind="bounced"} = %v, want 1`, got)
	}
}

// hookReceiver is the shop's webhook endpoint: it records each request
// and answers 204.
type hookReceiver struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []hookRequest
}

type hookRequest struct {
	header http.Header
	body   []byte
}

func newHookReceiver(t *testing.T) *hookReceiver {
	r := &hookReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.reqs = append(r.reqs, hookRequest{header: req.Header.Clone(), body: body})
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *hookReceiver) got() []hookRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hookRequest(nil), r.reqs...)
}
