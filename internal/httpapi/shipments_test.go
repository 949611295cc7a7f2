package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/queue"
)

// Each shipment is recorded and sends its order-shipped e-mail, keyed by
// the shipment: the same shipment again is the same e-mail (200), a
// second parcel another (201), and the order shows both shipments with
// their e-mails.
func TestEachShipmentRecordsItsShippedEmail(t *testing.T) {
	t.Parallel()
	s := setup(t)
	res := s.postOrder(t, validCheckout, nil)
	var o order.Order
	res.decode(t, &o)
	path := "/v1/orders/" + o.ID.String() + "/shipments"
	body := `{"carrier": "JNE", "tracking_number": "JNE-0042-7781"}`

	first := s.do(t, http.MethodPost, path, "application/json", strings.NewReader(body), nil)
	if first.status != http.StatusCreated {
		t.Fatalf("first shipment = %d %s", first.status, first.body)
	}
	var n order.Notification
	first.decode(t, &n)
	if n.Template != "order-shipped" || n.Status != "pending" {
		t.Errorf("notification = %+v, want order-shipped pending", n)
	}
	if _, err := s.inspector.GetTaskInfo(s.redis.Queue, queue.TaskID(n.ID)); err != nil {
		t.Errorf("no task for the shipped e-mail: %v", err)
	}

	again := s.do(t, http.MethodPost, path, "application/json", strings.NewReader(body), nil)
	var n2 order.Notification
	again.decode(t, &n2)
	if again.status != http.StatusOK || n2.ID != n.ID {
		t.Errorf("the same shipment again = %d %s, want 200 with the first notification", again.status, again.body)
	}
	second := s.do(t, http.MethodPost, path, "application/json", strings.NewReader(`{"carrier": "JNE", "tracking_number": "JNE-0042-7782"}`), nil)
	var n3 order.Notification
	second.decode(t, &n3)
	if second.status != http.StatusCreated || n3.ID == n.ID {
		t.Errorf("a second parcel = %d %s, want 201 with an e-mail of its own", second.status, second.body)
	}
	if c := s.count(t, "notification_deliveries"); c != 3 {
		t.Errorf("%d deliveries, want the confirmation and two shipped", c)
	}

	got := s.do(t, http.MethodGet, "/v1/orders/"+o.ID.String(), "", nil, nil)
	var after order.Order
	got.decode(t, &after)
	if len(after.Notifications) != 3 || after.Notifications[1].Template != "order-shipped" {
		t.Errorf("order notifications = %+v", after.Notifications)
	}
	if len(after.Shipments) != 2 || after.Shipments[0].TrackingNumber != "JNE-0042-7781" || *after.Shipments[0].NotificationID != n.ID ||
		after.Shipments[1].TrackingNumber != "JNE-0042-7782" || *after.Shipments[1].NotificationID != n3.ID {
		t.Errorf("order shipments = %s", got.body)
	} else if want := "order-shipped:" + o.ID.String() + ":" + after.Shipments[0].ID.String() + ":ana.maria@example.com"; n.IdempotencyKey != want {
		t.Errorf("the shipped e-mail's key %s, want %s", n.IdempotencyKey, want)
	}

	for _, tc := range []struct {
		path, body string
		status     int
	}{
		{"/v1/orders/" + uuid.NewString() + "/shipments", body, 404},
		{"/v1/orders/nope/shipments", body, 404},
		{path, `{"carrier": "", "tracking_number": "x"}`, 422},
		{path, `{"carrier": "JNE"}`, 422},
		{path, `{"carrier": "JNE", "tracking_number": "x", "eta": 3}`, 400},
		{path, `not json`, 400},
	} {
		res := s.do(t, http.MethodPost, tc.path, "application/json", strings.NewReader(tc.body), nil)
		if res.status != tc.status || res.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("POST %s %s = %d %s, want %d", tc.path, tc.body, res.status, res.body, tc.status)
		}
	}
}

func TestTemplatePreview(t *testing.T) {
	t.Parallel()
	s := setup(t)
	list := s.do(t, http.MethodGet, "/v1/templates", "", nil, nil)
	if list.status != 200 || !strings.Contains(string(list.body), `"order-confirmation"`) || !strings.Contains(string(list.body), `"order-shipped"`) {
		t.Errorf("GET /v1/templates = %d %s", list.status, list.body)
	}
	res := s.do(t, http.MethodGet, "/v1/templates/order-confirmation/preview", "", nil, nil)
	var p struct{ Subject, Text, HTML string }
	res.decode(t, &p)
	if res.status != 200 || !strings.Contains(p.Subject, "confirmed") || !strings.Contains(p.Text, "IDR 215,000.50") || !strings.Contains(p.HTML, "<table") {
		t.Errorf("preview = %d %+v", res.status, p)
	}
	html := s.do(t, http.MethodGet, "/v1/templates/order-shipped/preview?format=html", "", nil, nil)
	if html.status != 200 || !strings.HasPrefix(html.header.Get("Content-Type"), "text/html") || !strings.Contains(string(html.body), "JNE-0042-7781") {
		t.Errorf("html preview = %d %s", html.status, html.header.Get("Content-Type"))
	}
	for path, status := range map[string]int{
		"/v1/templates/no-such/preview":                       404,
		"/v1/templates/order-confirmation/preview?format=pdf": 400,
	} {
		if res := s.do(t, http.MethodGet, path, "", nil, nil); res.status != status {
			t.Errorf("GET %s = %d, want %d", path, res.status, status)
		}
	}
}
