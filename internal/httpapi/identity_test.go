package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
)

// asKey is the Authorization of an API key's secret.
func asKey(secret string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + secret}
}

// recordedShipments are the shipments GET /v1/orders/{id} shows.
type recordedShipments struct {
	Shipments []struct {
		ID             uuid.UUID `json:"id"`
		Carrier        string    `json:"carrier"`
		TrackingNumber string    `json:"tracking_number"`
		NotificationID uuid.UUID `json:"notification_id"`
	} `json:"shipments"`
}

// Issue 40: key LIVE places order O; key MKT, holding only
// notifications:write (a key a shop hands to a marketing tool), triggers
// O's order-shipped first with data of its own (carrier FAKE, a tracking
// number that is a phone number, sent 29 days ahead). It used to be taken
// (201), and LIVE's real shipment then answered 200 with MKT's e-mail,
// which LIVE could not cancel (404), the real tracking number stored
// nowhere. Now the templates an endpoint of their own sends cannot be
// triggered by any key, the shipment's e-mail carries LIVE's data and is
// LIVE's to stop, and the shipment is recorded.
func TestAnotherKeyCannotTakeTheShipmentsEmail(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o) // LIVE: the backend's key
	mktKey, mkt, err := s.keys.Create(ctx, "test", "marketing tool", []apikey.Scope{apikey.ScopeNotificationsWrite})
	if err != nil {
		t.Fatal(err)
	}
	orderPath := "/v1/orders/" + o.ID.String()
	fakeData := `{"order_id":"` + o.ID.String() + `","customer_name":"Ana","carrier":"FAKE","tracking_number":"CALL-0800-SCAM",` +
		`"items":[{"sku":"TEA-01","name":"Teh","quantity":1}],"shipped_at":"2026-12-01T10:00:00Z"}`
	for _, body := range []string{
		`{"template":"order-shipped","send_at":"` + time.Now().Add(29*24*time.Hour).Format(time.RFC3339) + `","data":` + fakeData + `}`,
		`{"template":"order-shipped","event_id":"parcel-2","data":` + fakeData + `}`,
		`{"template":"order-confirmation","recipient":"someone@example.com","data":{}}`,
	} {
		for name, key := range map[string]map[string]string{"MKT": asKey(mkt), "LIVE": nil} {
			res := s.do(t, http.MethodPost, orderPath+"/notifications", "application/json", strings.NewReader(body), key)
			if res.status != http.StatusUnprocessableEntity || !strings.Contains(string(res.body), `"pointer":"/template"`) {
				t.Errorf("%s's trigger %s: %d %s; want 422 about /template (its endpoint sends it)", name, body, res.status, res.body)
			}
		}
	}

	res := s.do(t, http.MethodPost, orderPath+"/shipments", "application/json", strings.NewReader(`{"carrier":"JNE","tracking_number":"JNE-REAL-1"}`), nil)
	var shipped order.Notification
	res.decode(t, &shipped)
	if res.status != http.StatusCreated || shipped.SendAt != nil || shipped.Status != "pending" {
		t.Fatalf("LIVE's shipment: %d %s; want 201 with its own e-mail, at once", res.status, res.body)
	}
	if d := s.f.Get(shipped.ID); !strings.Contains(string(d.Data), `"JNE-REAL-1"`) || d.Owner == nil || *d.Owner != s.backendKeyID {
		t.Errorf("the shipment's e-mail has data %s, owner %v; want LIVE's tracking number and owner", d.Data, d.Owner)
	}
	var got recordedShipments
	s.do(t, http.MethodGet, orderPath, "", nil, nil).decode(t, &got)
	if len(got.Shipments) != 1 || got.Shipments[0].Carrier != "JNE" || got.Shipments[0].TrackingNumber != "JNE-REAL-1" ||
		got.Shipments[0].NotificationID != shipped.ID {
		t.Errorf("the order's shipments: %+v; want JNE-REAL-1 with its e-mail", got.Shipments)
	}
	res = s.do(t, http.MethodPost, "/v1/notifications/"+shipped.ID.String()+"/cancel", "", nil, nil)
	if res.status != http.StatusOK || !strings.Contains(string(res.body), `"status":"cancelled"`) {
		t.Errorf("LIVE's cancel of its shipment's e-mail: %d %s; want 200 cancelled", res.status, res.body)
	}

	// An order-shipped e-mail MKT made before this release, when the
	// generic trigger took it, is still there (recorded with the
	// domain's own statement): the shop's shipment does not answer with
	// it, and the shop, whose order it is, may stop it.
	var o2 order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o2)
	old, created, err := notify.Record(ctx, s.db.Pool, notify.Intent{
		OrderID: o2.ID, Template: order.TemplateShipped, Recipient: o2.CustomerEmail, Owner: mktKey.Owner,
		Data:      map[string]any{"carrier": "FAKE", "tracking_number": "CALL-0800-SCAM"},
		NotBefore: time.Now().Add(29 * 24 * time.Hour),
	}, time.Now())
	if err != nil || !created {
		t.Fatalf("record the old e-mail: %v, created %v", err, created)
	}
	res = s.do(t, http.MethodPost, "/v1/orders/"+o2.ID.String()+"/shipments", "application/json", strings.NewReader(`{"carrier":"JNE","tracking_number":"JNE-REAL-2"}`), nil)
	res.decode(t, &shipped)
	if res.status != http.StatusCreated || shipped.ID == old.ID || !strings.Contains(string(s.f.Get(shipped.ID).Data), `"JNE-REAL-2"`) {
		t.Errorf("LIVE's shipment after MKT's old e-mail: %d %s; want 201 with an e-mail of its own", res.status, res.body)
	}
	res = s.do(t, http.MethodPost, "/v1/notifications/"+old.ID.String()+"/cancel", "", nil, nil)
	if res.status != http.StatusOK || !strings.Contains(string(res.body), `"status":"cancelled"`) {
		t.Errorf("the order's owner's cancel of MKT's old e-mail: %d %s; want 200 cancelled", res.status, res.body)
	}
}

// Issue 40, the same with a template the generic trigger sends: MKT
// triggers O's payment-reminder of event reminder-1 first, with its own
// payment_url, 29 days ahead. LIVE's trigger of the same event used to
// answer 200 with MKT's reminder, and LIVE could not cancel it. Now a
// trigger of an event that has a notification with other data (its data,
// or only its send_at) is 409 notification-conflict naming that
// notification, the same trigger again is still 200, and the order's
// owner sees and may cancel every notification on its order, whichever
// key made it; MKT still may not cancel LIVE's.
func TestATriggerOfAnEventWithOtherDataIsAConflict(t *testing.T) {
	t.Parallel()
	s := setup(t, setupOpts{templates: shopTemplates(t)})
	ctx := t.Context()
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	_, mkt, err := s.keys.Create(ctx, "test", "marketing tool", []apikey.Scope{apikey.ScopeNotificationsWrite})
	if err != nil {
		t.Fatal(err)
	}
	orderPath := "/v1/orders/" + o.ID.String()
	reminder := func(event, payURL string, sendAt time.Time) string {
		return `{"template":"payment-reminder","event_id":"` + event + `","send_at":"` + sendAt.Format(time.RFC3339) + `","data":{"order_id":"` + o.ID.String() +
			`","customer_name":"Ana","currency":"IDR","amount_due":21500050,"due_at":"2026-12-03T17:00:00Z","payment_url":"` + payURL + `"}}`
	}
	trigger := func(body string, key map[string]string) (response, order.Notification) {
		res := s.do(t, http.MethodPost, orderPath+"/notifications", "application/json", strings.NewReader(body), key)
		var n order.Notification
		if res.status < 300 {
			res.decode(t, &n)
		}
		return res, n
	}
	later, sooner := time.Now().Add(29*24*time.Hour).Truncate(time.Second), time.Now().Add(12*time.Hour).Truncate(time.Second)
	mktReminder := reminder("reminder-1", "https://pay.example.net/"+o.ID.String(), later)
	res, first := trigger(mktReminder, asKey(mkt))
	if res.status != http.StatusCreated {
		t.Fatalf("MKT's reminder: %d %s", res.status, res.body)
	}

	for what, body := range map[string]string{
		"its own data":        reminder("reminder-1", "https://shop.example/pay/"+o.ID.String(), sooner),
		"another send_at":     reminder("reminder-1", "https://pay.example.net/"+o.ID.String(), sooner),
		"another payment_url": reminder("reminder-1", "https://shop.example/pay/"+o.ID.String(), later),
	} {
		res, _ := trigger(body, nil)
		var p struct {
			Type         string             `json:"type"`
			Notification order.Notification `json:"notification"`
		}
		res.decode(t, &p)
		if res.status != http.StatusConflict || p.Type != "urn:sekali:problem:notification-conflict" || p.Notification.ID != first.ID {
			t.Errorf("LIVE's trigger of reminder-1 with %s: %d %s; want 409 notification-conflict naming MKT's reminder", what, res.status, res.body)
		}
	}
	// The same trigger again, whoever sends it, is the same notification;
	// data spelt otherwise (members in another order) is the same data.
	respelt := strings.Replace(mktReminder, `"amount_due":21500050,"due_at":"2026-12-03T17:00:00Z"`, `"due_at": "2026-12-03T17:00:00Z", "amount_due": 21500050`, 1)
	for _, body := range []string{mktReminder, respelt} {
		if res, again := trigger(body, nil); res.status != http.StatusOK || again.ID != first.ID {
			t.Errorf("the same trigger again: %d %s; want 200 with the first", res.status, res.body)
		}
	}
	if n := s.count(t, "notification_deliveries WHERE template = 'payment-reminder'"); n != 1 {
		t.Errorf("%d reminders recorded, want MKT's alone", n)
	}

	// The order's owner sees MKT's reminder, and stops it.
	var seen order.Order
	s.do(t, http.MethodGet, orderPath, "", nil, nil).decode(t, &seen)
	if len(seen.Notifications) != 2 || seen.Notifications[1].ID != first.ID {
		t.Errorf("the order shows %+v; want the confirmation and MKT's reminder", seen.Notifications)
	}
	res = s.do(t, http.MethodPost, "/v1/notifications/"+first.ID.String()+"/cancel", "", nil, nil)
	if res.status != http.StatusOK || !strings.Contains(string(res.body), `"status":"cancelled"`) {
		t.Errorf("LIVE's cancel of MKT's reminder on its order: %d %s; want 200 cancelled", res.status, res.body)
	}

	// LIVE's own reminder, under an event of its own: not MKT's to stop,
	// one by one or by template; LIVE's cancel by template lists both.
	res, own := trigger(reminder("reminder-2", "https://shop.example/pay/"+o.ID.String(), sooner), nil)
	if res.status != http.StatusCreated {
		t.Fatalf("LIVE's reminder-2: %d %s", res.status, res.body)
	}
	if res := s.do(t, http.MethodPost, "/v1/notifications/"+own.ID.String()+"/cancel", "", nil, asKey(mkt)); res.status != http.StatusNotFound {
		t.Errorf("MKT's cancel of LIVE's reminder: %d %s; want 404", res.status, res.body)
	}
	res = s.do(t, http.MethodPost, orderPath+"/notifications/cancel", "application/json", strings.NewReader(`{"template":"payment-reminder"}`), asKey(mkt))
	if res.status != http.StatusOK || strings.Contains(string(res.body), own.ID.String()) || !strings.Contains(string(res.body), first.ID.String()) {
		t.Errorf("MKT's cancel by template: %d %s; want its own reminder and not LIVE's", res.status, res.body)
	}
	if got := s.f.Get(own.ID); got.Status != notify.StatusPending {
		t.Errorf("after MKT's cancels LIVE's reminder is %s, want pending", got.Status)
	}
	var both struct {
		Cancelled    []order.Notification `json:"cancelled"`
		NotCancelled []order.Notification `json:"not_cancelled"`
	}
	res = s.do(t, http.MethodPost, orderPath+"/notifications/cancel", "application/json", strings.NewReader(`{"template":"payment-reminder"}`), nil)
	res.decode(t, &both)
	if res.status != http.StatusOK || len(both.Cancelled) != 2 || len(both.NotCancelled) != 0 {
		t.Errorf("LIVE's cancel by template: %d %s; want both reminders cancelled", res.status, res.body)
	}
}
