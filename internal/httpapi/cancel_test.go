package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
)

// A notification belongs to the owner of the key that made it: with the
// queue paused, the shop's checkout key places an order and schedules a
// reminder; a key handed to a marketing tool (notifications:write only)
// cancels neither — 404, as for notifications it cannot see — and its
// cancel by template lists nothing. The key that replaces the shop's
// (rotation, the old one revoked) may cancel them, and an operator may
// cancel any.
func TestAnotherKeyCannotCancel(t *testing.T) {
	t.Parallel()
	s := setup(t, setupOpts{templates: shopTemplates(t)})
	ctx := context.Background()
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	confirmation := o.Notifications[0]
	var reminder order.Notification
	s.do(t, http.MethodPost, "/v1/orders/"+o.ID.String()+"/notifications", "application/json", strings.NewReader(
		`{"template":"payment-reminder","event_id":"later","send_at":"`+time.Now().Add(24*time.Hour).Format(time.RFC3339)+`","data":`+reminderData(o.ID)+`}`), nil).decode(t, &reminder)

	_, marketing, err := s.keys.Create(ctx, "test", "marketing tool", []apikey.Scope{apikey.ScopeNotificationsWrite})
	if err != nil {
		t.Fatal(err)
	}
	as := func(key string) map[string]string { return map[string]string{"Authorization": "Bearer " + key} }
	for _, n := range []order.Notification{confirmation, reminder} {
		res := s.do(t, http.MethodPost, "/v1/notifications/"+n.ID.String()+"/cancel", "", nil, as(marketing))
		if res.status != http.StatusNotFound || !strings.Contains(string(res.body), "urn:sekali:problem:not-found") || strings.Contains(string(res.body), n.Template) {
			t.Errorf("another key's cancel of the %s: %d %s; want 404 telling nothing", n.Template, res.status, res.body)
		}
	}
	res := s.do(t, http.MethodPost, "/v1/orders/"+o.ID.String()+"/notifications/cancel", "application/json",
		strings.NewReader(`{"template":"payment-reminder"}`), as(marketing))
	if res.status != http.StatusOK || string(res.body) != `{"cancelled":[],"not_cancelled":[]}`+"\n" {
		t.Errorf("another key's cancel by template: %d %s; want both lists empty", res.status, res.body)
	}
	if n := s.count(t, "notification_deliveries WHERE status = 'cancelled'"); n != 0 {
		t.Fatalf("%d notifications cancelled by another key", n)
	}

	// Rotation: the next key replaces the shop's, which is revoked.
	next, nextSecret, err := s.keys.CreateReplacing(ctx, "test", "test backend 2", apikey.BackendScopes, s.backendKeyID, apikey.ModeLive)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.keys.Revoke(ctx, "test", s.backendKeyID); err != nil {
		t.Fatal(err)
	}
	if next.Owner != s.backendKeyID {
		t.Errorf("the replacing key's owner is %s, want the first key's id %s", next.Owner, s.backendKeyID)
	}
	res = s.do(t, http.MethodPost, "/v1/notifications/"+reminder.ID.String()+"/cancel", "", nil, as(nextSecret))
	if res.status != http.StatusOK || !strings.Contains(string(res.body), `"status":"cancelled"`) {
		t.Errorf("the replacing key's cancel of the reminder: %d %s; want 200 cancelled", res.status, res.body)
	}
	res = s.do(t, http.MethodPost, "/admin/v1/deliveries/"+confirmation.ID.String()+"/cancel", "application/json",
		strings.NewReader(`{"note":"the customer asked"}`), as(adminToken))
	if res.status != http.StatusOK || !strings.Contains(string(res.body), `"status":"cancelled"`) {
		t.Errorf("an operator's cancel of the confirmation: %d %s; want 200 cancelled", res.status, res.body)
	}

	// The admin API's rotation names the key it replaces, and refuses one
	// that does not exist.
	res = s.do(t, http.MethodPost, "/admin/v1/api-keys", "application/json",
		strings.NewReader(`{"name":"test backend 3","scopes":["checkout"],"replaces":"`+next.ID.String()+`"}`), as(adminToken))
	if res.status != http.StatusCreated || !strings.Contains(string(res.body), `"owner":"`+s.backendKeyID.String()+`"`) {
		t.Errorf("create a key replacing another: %d %s; want 201 with the first key's owner", res.status, res.body)
	}
	res = s.do(t, http.MethodPost, "/admin/v1/api-keys", "application/json",
		strings.NewReader(`{"name":"test backend 4","scopes":["checkout"],"replaces":"`+uuid.NewString()+`"}`), as(adminToken))
	if res.status != http.StatusUnprocessableEntity || !strings.Contains(string(res.body), `"/replaces"`) {
		t.Errorf("create a key replacing none: %d %s; want 422 about /replaces", res.status, res.body)
	}
}

// A provider took the message but its answer was lost (a 5xx after the
// request was written): the delivery is pending again, pinned to the
// provider. A cancel now would say "not sent" of a message the provider
// may hold, so the shop's cancel, its cancel by template and the
// operator's are all refused with may-have-been-sent, the order shows
// the notification as possibly sent, and nothing is cancelled.
func TestCancelRefusesWhatAProviderMayHave(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	d := s.f.MaybeAccepted(s.f.Get(o.Notifications[0].ID), "resend")

	res := s.do(t, http.MethodPost, "/v1/notifications/"+d.ID.String()+"/cancel", "", nil, nil)
	var p struct {
		Type         string             `json:"type"`
		Notification order.Notification `json:"notification"`
	}
	res.decode(t, &p)
	if res.status != http.StatusConflict || p.Type != "urn:sekali:problem:may-have-been-sent" ||
		p.Notification.Status != "pending" || !p.Notification.MayHaveBeenSent {
		t.Errorf("the shop's cancel: %d %s; want 409 may-have-been-sent with the notification pending and may_have_been_sent", res.status, res.body)
	}
	res = s.do(t, http.MethodPost, "/v1/orders/"+o.ID.String()+"/notifications/cancel", "application/json",
		strings.NewReader(`{"template":"order-confirmation"}`), nil)
	if res.status != http.StatusOK || !strings.Contains(string(res.body), `"cancelled":[]`) || !strings.Contains(string(res.body), `"may_have_been_sent":true`) {
		t.Errorf("the cancel by template: %d %s; want nothing cancelled, the confirmation among not_cancelled as may_have_been_sent", res.status, res.body)
	}
	res = s.do(t, http.MethodPost, "/admin/v1/deliveries/"+d.ID.String()+"/cancel", "application/json",
		strings.NewReader(`{"note":"paid"}`), map[string]string{"Authorization": "Bearer " + adminToken})
	if res.status != http.StatusConflict || !strings.Contains(string(res.body), "urn:sekali:problem:may-have-been-sent") {
		t.Errorf("the operator's cancel: %d %s; want 409 may-have-been-sent", res.status, res.body)
	}
	var got order.Order
	defer func() {
		res := s.do(t, http.MethodPost, "/admin/v1/deliveries/"+d.ID.String()+"/cancel", "application/json",
			strings.NewReader(`{"note":"resend has no such message","not_at_provider":true}`), map[string]string{"Authorization": "Bearer " + adminToken})
		if res.status != http.StatusOK || !strings.Contains(string(res.body), `"status":"cancelled"`) {
			t.Errorf("the operator's cancel after checking Resend's log: %d %s; want 200 cancelled", res.status, res.body)
		}
	}()
	s.do(t, http.MethodGet, "/v1/orders/"+o.ID.String(), "", nil, nil).decode(t, &got)
	if n := got.Notifications[0]; n.Status != "pending" || !n.MayHaveBeenSent {
		t.Errorf("the order shows %+v; want pending and may_have_been_sent", n)
	}
	res = s.do(t, http.MethodGet, "/admin/v1/deliveries/"+d.ID.String(), "", nil, map[string]string{"Authorization": "Bearer " + adminToken})
	if !strings.Contains(string(res.body), `"may_have_been_sent":true`) {
		t.Errorf("the admin API's delivery: %s; want may_have_been_sent", res.body)
	}
	if after := s.f.Get(d.ID); after.Status != notify.StatusPending || s.count(t, "delivery_events WHERE event = 'cancelled'") != 0 {
		t.Errorf("after the cancels: %s, %d cancelled events; want pending and none", after.Status, s.count(t, "delivery_events WHERE event = 'cancelled'"))
	}
}

// shopTemplates are the built-in templates and a shop's own,
// payment-reminder (deploy/templates, as the compose stack mounts it):
// the generic trigger's, which sends none of the built-in ones.
func shopTemplates(t *testing.T) *mailtemplate.Templates {
	t.Helper()
	templates, err := mailtemplate.Load(mailtemplate.Config{Dir: "../../deploy/templates", DefaultLanguage: "id"})
	if err != nil {
		t.Fatal(err)
	}
	return templates
}

// reminderData is payment-reminder's data about order id.
func reminderData(id uuid.UUID) string {
	return `{"order_id":"` + id.String() + `","customer_name":"Ana","currency":"IDR","amount_due":21500050,` +
		`"due_at":"2026-12-03T17:00:00Z","payment_url":"https://shop.example/pay/1"}`
}
