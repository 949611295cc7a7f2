package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/order"
)

// GET /v1/notifications/{id} reads one notification, with its recipient,
// for the keys that may cancel it and no other: the shop's key (LIVE)
// reads its confirmation and the reminder a marketing tool's key (MKT)
// sent about its order; MKT reads its own reminder but not LIVE's
// confirmation (404, as for none), a test key no live notification, a
// key without orders:read nothing (403).
func TestReadOneNotification(t *testing.T) {
	t.Parallel()
	s := setup(t, setupOpts{templates: shopTemplates(t)})
	ctx := t.Context()
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	confirmation := o.Notifications[0]
	if confirmation.Recipient != "ana.maria@example.com" {
		t.Errorf("the checkout's notification names %q, want its recipient as recorded", confirmation.Recipient)
	}
	_, mkt, err := s.keys.Create(ctx, "test", "marketing tool", []apikey.Scope{apikey.ScopeNotificationsWrite, apikey.ScopeOrdersRead})
	if err != nil {
		t.Fatal(err)
	}
	var reminder order.Notification
	res := s.do(t, http.MethodPost, "/v1/orders/"+o.ID.String()+"/notifications", "application/json", strings.NewReader(
		`{"template":"payment-reminder","event_id":"due-1","recipient":"Budi@Example.com","send_at":"`+time.Now().Add(24*time.Hour).Format(time.RFC3339)+
			`","data":`+reminderData(o.ID)+`}`), asKey(mkt))
	res.decode(t, &reminder)
	if res.status != http.StatusCreated || reminder.Recipient != "budi@example.com" {
		t.Fatalf("MKT's reminder: %d %s; want 201 to budi@example.com", res.status, res.body)
	}

	read := func(id uuid.UUID, key map[string]string) (response, map[string]any) {
		t.Helper()
		res := s.do(t, http.MethodGet, "/v1/notifications/"+id.String(), "", nil, key)
		var got map[string]any
		if res.status == http.StatusOK {
			res.decode(t, &got)
		}
		return res, got
	}
	// As the order shows it, field by field.
	var seen order.Order
	s.do(t, http.MethodGet, "/v1/orders/"+o.ID.String(), "", nil, nil).decode(t, &seen)
	for i, n := range []order.Notification{confirmation, reminder} {
		res, got := read(n.ID, nil)
		var want map[string]any
		b, _ := json.Marshal(seen.Notifications[i])
		_ = json.Unmarshal(b, &want)
		if res.status != http.StatusOK || !jsonEqual(got, want) {
			t.Errorf("LIVE reads the %s: %d %s; want 200 with %s", n.Template, res.status, res.body, b)
		}
	}
	if res, got := read(reminder.ID, asKey(mkt)); res.status != http.StatusOK || got["recipient"] != "budi@example.com" {
		t.Errorf("MKT reads its reminder: %d %s; want 200 naming budi@example.com", res.status, res.body)
	}
	if res, _ := read(confirmation.ID, asKey(mkt)); res.status != http.StatusNotFound || strings.Contains(string(res.body), "ana.maria") {
		t.Errorf("MKT reads LIVE's confirmation: %d %s; want 404 telling nothing", res.status, res.body)
	}
	_, test, err := s.keys.CreateReplacing(ctx, "test", "shop ci", []apikey.Scope{apikey.ScopeOrdersRead}, uuid.Nil, apikey.ModeTest)
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := read(confirmation.ID, asKey(test)); res.status != http.StatusNotFound {
		t.Errorf("a test key reads a live notification: %d %s; want 404", res.status, res.body)
	}
	_, writeOnly, err := s.keys.Create(ctx, "test", "write only", []apikey.Scope{apikey.ScopeNotificationsWrite})
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := read(reminder.ID, asKey(writeOnly)); res.status != http.StatusForbidden {
		t.Errorf("a key without orders:read: %d %s; want 403", res.status, res.body)
	}
	if res, _ := read(uuid.New(), nil); res.status != http.StatusNotFound {
		t.Errorf("no such notification: %d %s; want 404", res.status, res.body)
	}
	if res := s.do(t, http.MethodGet, "/v1/notifications/not-a-uuid", "", nil, nil); res.status != http.StatusNotFound {
		t.Errorf("not a notification id: %d %s; want 404", res.status, res.body)
	}
}

// jsonEqual compares two decoded JSON documents.
func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
