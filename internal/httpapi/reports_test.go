package httpapi_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/order"
)

// resendEvent is a Resend webhook body of type typ (email.delivered,
// email.complained, …) about the message emailID.
func resendEvent(typ, emailID, to string, at time.Time) string {
	return fmt.Sprintf(`{"type":%q,"created_at":%q,"data":{"email_id":%q,"to":[%q]}}`, typ, at.UTC().Format(time.RFC3339Nano), emailID, to)
}

// What the provider reports after it took an e-mail stands beside its
// status wherever a notification is shown (issue 40: a bounce read sent
// in GET /v1/orders/{id} and the console's list, and showed only in the
// timeline and the webhooks). A confirmation Resend reports delivered
// and then bounced reads sent, bounced, at the bounce's time; another
// reads delivered. The admin API and the console list the bounced one
// alone when asked for bounces and complaints, and the console's list
// marks it.
func TestABounceShowsBesideTheStatus(t *testing.T) {
	t.Parallel()
	s, secret := hookStack(t)
	var bounced, delivered order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &bounced)
	s.postOrder(t, strings.Replace(validCheckout, "  Ana.Maria@Example.COM ", "budi@example.com", 1), nil).decode(t, &delivered)
	s.sentVia(t, bounced, "re-bounced")
	s.sentVia(t, delivered, "re-delivered")
	now := time.Now().UTC().Truncate(time.Microsecond)
	for i, body := range []string{
		resendEvent("email.delivered", "re-bounced", "ana.maria@example.com", now.Add(-time.Minute)),
		resendBounce("re-bounced", "ana.maria@example.com", now),
		resendEvent("email.delivered", "re-delivered", "budi@example.com", now),
	} {
		if r := s.resendHook(t, secret, fmt.Sprint("msg_", i), time.Now(), body); r.status != http.StatusOK {
			t.Fatalf("webhook %d: %d %s", i, r.status, r.body)
		}
	}

	for _, c := range []struct {
		o    order.Order
		kind string
		at   time.Time
	}{{bounced, "bounced", now}, {delivered, "delivered", now}} {
		var got order.Order
		r := s.do(t, http.MethodGet, "/v1/orders/"+c.o.ID.String(), "", nil, nil)
		r.decode(t, &got)
		n := got.Notifications[0]
		if n.Status != "sent" || n.ProviderEvent != c.kind || n.ProviderEventAt == nil || !n.ProviderEventAt.Equal(c.at) {
			t.Errorf("GET /v1/orders/%s: %s; want sent, %s at %s", c.o.ID, r.body, c.kind, c.at)
		}
	}

	admin := map[string]string{"Authorization": "Bearer " + adminToken}
	r := s.do(t, http.MethodGet, "/admin/v1/deliveries?bounced_or_complained=true", "", nil, admin)
	if r.status != http.StatusOK || strings.Count(string(r.body), `"id":`) != 1 || !strings.Contains(string(r.body), bounced.Notifications[0].ID.String()) ||
		!strings.Contains(string(r.body), `"provider_event":"bounced"`) || !strings.Contains(string(r.body), `"bounced_or_complained_at":`) {
		t.Errorf("the admin API's bounced or complained deliveries: %d %s; want the bounced one alone", r.status, r.body)
	}

	b, _ := s.operator(t, "Ana")
	_, _, page := b.do(http.MethodGet, "/admin/deliveries?bounced_or_complained=yes&order=newest", nil)
	if !strings.Contains(page, "/admin/deliveries/"+bounced.Notifications[0].ID.String()) || strings.Contains(page, delivered.Notifications[0].ID.String()) {
		t.Errorf("the console's bounced or complained deliveries: want the bounced one alone\n%s", page)
	}
	_, _, page = b.do(http.MethodGet, "/admin/deliveries?order=newest", nil)
	if strings.Count(page, `class="bounced-or-complained"`) != 1 || !strings.Contains(page, `<span class="report report-bounced">bounced</span>`) ||
		!strings.Contains(page, `<span class="report report-delivered">delivered</span>`) {
		t.Errorf("the console's deliveries: want the bounce marked, and the delivered one's report\n%s", page)
	}
	if _, _, page := b.do(http.MethodGet, "/admin/deliveries/"+bounced.Notifications[0].ID.String(), nil); !strings.Contains(page, `id="provider-event"><span class="report report-bounced">bounced</span>`) {
		t.Errorf("the bounced delivery's page does not show the report:\n%s", page)
	}
}
