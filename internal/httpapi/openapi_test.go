package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/api"
	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/httpapi"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/resend/resendtest"
	"github.com/sekali-dev/sekali/internal/webhookout"
)

// loadOpenAPI loads api/openapi.yaml and checks that it is a valid
// OpenAPI document. The uuid format, which kin-openapi does not check by
// default, is checked for this document.
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatalf("load api/openapi.yaml: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("api/openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	doc.SetStringFormatValidator("uuid",
		openapi3.NewRegexpFormatValidator(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`))
	return doc
}

func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	if !doc.IsOpenAPI31OrLater() {
		t.Errorf("openapi = %s, want 3.1", doc.OpenAPI)
	}
}

// The document describes exactly the routes the router serves.
func TestOpenAPIDocumentListsEveryRoute(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	reg := prometheus.NewRegistry()
	srv := httpapi.NewServer(httpapi.Deps{Log: slog.New(slog.DiscardHandler), Registry: reg})
	routes, ok := srv.(chi.Routes)
	if !ok {
		t.Fatalf("NewServer returned %T, not a chi router", srv)
	}

	// chi writes a parameter as {id} or {id:regexp}; OpenAPI as {id}.
	param := regexp.MustCompile(`\{([^}:]+)(:[^}]*)?\}`)
	served := map[string]bool{}
	err := chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		served[method+" "+param.ReplaceAllString(route, "{$1}")] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}

	var undocumented, unserved []string
	for op := range served {
		if !documented[op] {
			undocumented = append(undocumented, op)
		}
	}
	for op := range documented {
		if !served[op] {
			unserved = append(unserved, op)
		}
	}
	slices.Sort(undocumented)
	slices.Sort(unserved)
	if len(undocumented) > 0 {
		t.Errorf("routes missing from api/openapi.yaml:\n\t%s", strings.Join(undocumented, "\n\t"))
	}
	if len(unserved) > 0 {
		t.Errorf("operations in api/openapi.yaml that the router does not serve:\n\t%s", strings.Join(unserved, "\n\t"))
	}
	if len(served) == 0 {
		t.Error("chi.Walk found no routes")
	}
}

// contract sends real requests to the API and checks every response
// against the document: an undocumented status, a missing or malformed
// header, an undeclared content type or a body that does not match its
// schema fails the test.
type contract struct {
	t      *testing.T
	s      stack
	doc    *openapi3.T
	router routers.Router
	seen   map[string]bool // "METHOD path" of each operation exercised
}

func newContract(t *testing.T, s stack) *contract {
	t.Helper()
	doc := loadOpenAPI(t)
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &contract{t: t, s: s, doc: doc, router: router, seen: map[string]bool{}}
}

// do sends a request, requires status want, and checks the response
// against the document.
func (c *contract) do(want int, method, path, contentType, body string, header map[string]string) response {
	c.t.Helper()
	res := c.s.do(c.t, method, path, contentType, strings.NewReader(body), header)
	if res.status != want {
		c.t.Errorf("%s %s = %d, want %d: %s", method, path, res.status, want, res.body)
	}
	c.check(method, path, res)
	return res
}

// admin is do with the admin token and, for a body, application/json.
func (c *contract) admin(want int, method, path, body string) response {
	c.t.Helper()
	ct := ""
	if body != "" {
		ct = "application/json"
	}
	return c.do(want, method, path, ct, body, map[string]string{"Authorization": "Bearer " + adminToken})
}

func (c *contract) check(method, path string, res response) {
	c.t.Helper()
	req := httptest.NewRequest(method, path, nil)
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		c.t.Errorf("%s %s: not in api/openapi.yaml: %v", method, path, err)
		return
	}
	c.seen[method+" "+route.Path] = true
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 res.status,
		Header:                 res.header,
		Options: &openapi3filter.Options{
			IncludeResponseStatus:   true,
			MultiError:              true,
			SchemaValidationOptions: c.doc.GetSchemaValidationOptions(),
		},
	}
	in.SetBodyBytes(res.body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		c.t.Errorf("%s %s = %d does not match api/openapi.yaml: %v\nbody: %.500s", method, path, res.status, err, res.body)
		return
	}
	// ValidateResponse does not look at a body the document says is not there.
	if r := route.Operation.Responses.Status(res.status); r != nil && len(r.Value.Content) == 0 && len(res.body) > 0 {
		c.t.Errorf("%s %s = %d has a body the document does not declare: %.500s", method, path, res.status, res.body)
	}
}

// Real responses to a realistic sequence of requests, good and bad, match
// the document, and every documented operation is among them.
func TestResponsesMatchOpenAPIDocument(t *testing.T) {
	t.Parallel()
	s, secret := hookStack(t, setupOpts{bodyTimeout: 2 * time.Second, templates: shopTemplates(t)})
	c := newContract(t, s)
	ctx := context.Background()
	jsonCT := "application/json"

	// Operations.
	c.do(200, "GET", "/healthz", "", "", nil)
	c.do(200, "GET", "/readyz", "", "", map[string]string{"X-Request-Id": "contract-test.1"})
	if res := s.do(t, "GET", "/metrics", "", nil, nil); res.status != 404 {
		t.Errorf("GET /metrics on the public listener = %d, want 404 (it is on METRICS_ADDR)", res.status)
	}
	if res := c.do(200, "GET", "/openapi.yaml", "", "", nil); !bytes.Equal(res.body, api.OpenAPI) {
		t.Error("GET /openapi.yaml does not serve api/openapi.yaml")
	}

	// Templates.
	var list struct{ Templates []string }
	c.do(200, "GET", "/v1/templates", "", "", nil).decode(t, &list)
	if len(list.Templates) == 0 {
		t.Fatal("no templates")
	}
	for _, name := range list.Templates {
		for _, q := range []string{"", "?format=json", "?format=html", "?format=text"} {
			c.do(200, "GET", "/v1/templates/"+name+"/preview"+q, "", "", nil)
		}
	}
	c.do(404, "GET", "/v1/templates/no-such-template/preview", "", "", nil)
	c.do(400, "GET", "/v1/templates/"+list.Templates[0]+"/preview?format=pdf", "", "", nil)

	// Checkout, with and without an Idempotency-Key.
	key := map[string]string{"Idempotency-Key": `"contract-key-1"`}
	first := c.do(201, "POST", "/v1/orders", jsonCT, validCheckout, key)
	replay := c.do(201, "POST", "/v1/orders", jsonCT, validCheckout, key)
	if replay.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(replay.body, first.body) {
		t.Errorf("replay = %s, %s", replay.header, replay.body)
	}
	c.do(422, "POST", "/v1/orders", jsonCT, strings.Replace(validCheckout, `"quantity": 2`, `"quantity": 3`, 1), key)
	c.do(201, "POST", "/v1/orders", jsonCT, validCheckout, nil)
	numbered := strings.Replace(validCheckout, `"currency": "IDR",`, `"currency": "IDR", "reference": "TA-2026-0042",`, 1)
	c.do(201, "POST", "/v1/orders", jsonCT, numbered, nil)
	c.do(409, "POST", "/v1/orders", jsonCT, numbered, nil)
	c.do(400, "POST", "/v1/orders", jsonCT, validCheckout, map[string]string{"Idempotency-Key": "a b"})
	c.do(400, "POST", "/v1/orders", jsonCT, `{"customer_email":`, nil)
	c.do(400, "POST", "/v1/orders", jsonCT, `{"coupon": "FREE"}`, nil)
	c.do(415, "POST", "/v1/orders", "text/plain", validCheckout, nil)
	c.do(413, "POST", "/v1/orders", jsonCT, `{"customer_name": "`+strings.Repeat("x", 70_000)+`"}`, nil)
	c.do(422, "POST", "/v1/orders", jsonCT, strings.Replace(validCheckout, `"IDR"`, `"idr"`, 1), nil)
	c.do(422, "POST", "/v1/orders", jsonCT, `{}`, nil)
	c.inFlight(ctx)
	c.do(401, "POST", "/v1/orders", jsonCT, validCheckout, map[string]string{"Authorization": ""})
	_, reader, err := s.keys.Create(ctx, "test", "contract reader", []apikey.Scope{apikey.ScopeOrdersRead})
	if err != nil {
		t.Fatal(err)
	}
	c.do(403, "POST", "/v1/orders", jsonCT, validCheckout, map[string]string{"Authorization": "Bearer " + reader})
	c.slowBody("/v1/orders")

	var o order.Order
	first.decode(t, &o)
	orderPath := "/v1/orders/" + o.ID.String()
	c.do(200, "GET", orderPath, "", "", nil)
	c.do(404, "GET", "/v1/orders/00000000-0000-4000-8000-000000000000", "", "", nil)
	c.do(404, "GET", "/v1/orders/nope", "", "", nil)
	// Who may read it: the order's own token, not another's; no key at all is 401.
	c.do(200, "GET", orderPath, "", "", map[string]string{"Authorization": "Bearer " + o.AccessToken})
	c.do(404, "GET", orderPath, "", "", map[string]string{"Authorization": "Bearer " + order.AccessTokenPrefix + "another-orders-token"})
	c.do(401, "GET", orderPath, "", "", map[string]string{"Authorization": ""})
	c.do(401, "GET", orderPath, "", "", map[string]string{"Authorization": "Bearer sekali_key_nope_nope"})
	_, writeOnly, err := s.keys.Create(ctx, "test", "write-only", []apikey.Scope{apikey.ScopeOrdersWrite})
	if err != nil {
		t.Fatal(err)
	}
	c.do(403, "GET", orderPath, "", "", map[string]string{"Authorization": "Bearer " + writeOnly})

	// Shipments.
	shipment := `{"carrier": "JNE", "tracking_number": "JNE-0042-7781"}`
	c.do(201, "POST", orderPath+"/shipments", jsonCT, shipment, nil)
	c.do(200, "POST", orderPath+"/shipments", jsonCT, shipment, nil)
	c.do(404, "POST", "/v1/orders/00000000-0000-4000-8000-000000000000/shipments", jsonCT, shipment, nil)
	c.do(404, "POST", "/v1/orders/nope/shipments", jsonCT, shipment, nil)
	c.do(422, "POST", orderPath+"/shipments", jsonCT, `{"carrier": "", "tracking_number": "x"}`, nil)
	c.do(400, "POST", orderPath+"/shipments", jsonCT, `{"carrier": "JNE", "eta": 3}`, nil)
	c.do(415, "POST", orderPath+"/shipments", "", shipment, nil)
	c.do(401, "POST", orderPath+"/shipments", jsonCT, shipment, map[string]string{"Authorization": ""})
	c.do(401, "POST", orderPath+"/shipments", jsonCT, shipment, map[string]string{"Authorization": "Bearer " + o.AccessToken})
	_, readOnly, err := s.keys.Create(ctx, "test", "read-only", []apikey.Scope{apikey.ScopeOrdersRead})
	if err != nil {
		t.Fatal(err)
	}
	c.do(403, "POST", orderPath+"/shipments", jsonCT, shipment, map[string]string{"Authorization": "Bearer " + readOnly})
	c.do(200, "GET", orderPath, "", "", nil)

	// The one trigger for any template, here a shop's own with an event id.
	data := reminderData(o.ID)
	trigger := `{"template": "payment-reminder", "event_id": "reminder-1", "data": ` + data + `}`
	triggered := c.do(201, "POST", orderPath+"/notifications", jsonCT, trigger, nil)
	if again := c.do(200, "POST", orderPath+"/notifications", jsonCT, trigger, nil); !bytes.Equal(again.body, triggered.body) {
		t.Errorf("the same trigger again answered %s, want %s", again.body, triggered.body)
	}
	c.do(409, "POST", orderPath+"/notifications", jsonCT, strings.Replace(trigger, `"amount_due":21500050`, `"amount_due":1`, 1), nil)
	replayKey := map[string]string{"Idempotency-Key": "trigger-1"}
	c.do(201, "POST", orderPath+"/notifications", jsonCT, `{"template": "payment-reminder", "event_id": "reminder-2", "data": `+data+`}`, replayKey)
	if res := c.do(201, "POST", orderPath+"/notifications", jsonCT, `{"template": "payment-reminder", "event_id": "reminder-2", "data": `+data+`}`, replayKey); res.header.Get("Idempotent-Replayed") != "true" {
		t.Error("a repeated trigger with its Idempotency-Key was not replayed")
	}
	c.do(422, "POST", orderPath+"/notifications", jsonCT, `{"template": "payment-reminder", "event_id": "reminder-3", "data": `+data+`}`, replayKey)
	c.do(422, "POST", orderPath+"/notifications", jsonCT, `{"template": "payment-reminder", "data": {"currency": ""}}`, nil)
	c.do(422, "POST", orderPath+"/notifications", jsonCT, `{"template": "no-such-template", "data": {}}`, nil)
	c.do(422, "POST", orderPath+"/notifications", jsonCT, `{"template": "order-shipped", "data": {}}`, nil)
	c.do(422, "POST", orderPath+"/notifications", jsonCT, `{"template": "payment-reminder", "event_id": "a:b", "data": `+data+`}`, nil)
	c.do(400, "POST", orderPath+"/notifications", jsonCT, `{"template": "payment-reminder", "template": "x", "data": {}}`, nil)
	c.do(404, "POST", "/v1/orders/00000000-0000-4000-8000-000000000000/notifications", jsonCT, trigger, nil)
	c.do(401, "POST", orderPath+"/notifications", jsonCT, trigger, map[string]string{"Authorization": ""})
	c.do(403, "POST", orderPath+"/notifications", jsonCT, trigger, map[string]string{"Authorization": "Bearer " + writeOnly})

	// Send later, and cancel: one notification, and a template's for an order.
	later := time.Now().Add(2 * time.Hour).In(time.FixedZone("WIB", 7*3600)).Format(time.RFC3339)
	var scheduled order.Notification
	c.do(201, "POST", orderPath+"/notifications", jsonCT, `{"template": "payment-reminder", "event_id": "later", "send_at": "`+later+`", "data": `+data+`}`, nil).decode(t, &scheduled)
	if scheduled.SendAt == nil {
		t.Error("a scheduled notification's answer has no send_at")
	}
	c.do(422, "POST", orderPath+"/notifications", jsonCT, `{"template": "payment-reminder", "event_id": "p5", "send_at": "tomorrow", "data": `+data+`}`, nil)
	c.do(422, "POST", orderPath+"/notifications", jsonCT, `{"template": "payment-reminder", "event_id": "p5", "send_at": "`+time.Now().Add(40*24*time.Hour).Format(time.RFC3339)+`", "data": `+data+`}`, nil)
	cancelPath := "/v1/notifications/" + scheduled.ID.String() + "/cancel"
	c.do(200, "POST", cancelPath, "", "", nil)
	c.do(200, "POST", cancelPath, "", "", nil)
	c.do(404, "POST", "/v1/notifications/00000000-0000-4000-8000-000000000000/cancel", "", "", nil)
	c.do(404, "POST", "/v1/notifications/nope/cancel", "", "", nil)
	c.do(401, "POST", cancelPath, "", "", map[string]string{"Authorization": ""})
	c.do(403, "POST", cancelPath, "", "", map[string]string{"Authorization": "Bearer " + writeOnly})
	c.do(200, "GET", "/v1/notifications/"+scheduled.ID.String(), "", "", nil)
	c.do(404, "GET", "/v1/notifications/00000000-0000-4000-8000-000000000000", "", "", nil)
	c.do(404, "GET", "/v1/notifications/nope", "", "", nil)
	c.do(401, "GET", "/v1/notifications/"+scheduled.ID.String(), "", "", map[string]string{"Authorization": ""})
	c.do(403, "GET", "/v1/notifications/"+scheduled.ID.String(), "", "", map[string]string{"Authorization": "Bearer " + writeOnly})
	var claimedOrder order.Order
	c.do(201, "POST", "/v1/orders", jsonCT, validCheckout, nil).decode(t, &claimedOrder)
	s.f.Claimed(s.f.Get(claimedOrder.Notifications[0].ID), time.Minute)
	c.do(409, "POST", "/v1/notifications/"+claimedOrder.Notifications[0].ID.String()+"/cancel", "", "", nil)
	var lostAnswer order.Order
	c.do(201, "POST", "/v1/orders", jsonCT, validCheckout, map[string]string{"Idempotency-Key": "lost-answer"}).decode(t, &lostAnswer)
	s.f.MaybeAccepted(s.f.Get(lostAnswer.Notifications[0].ID), "resend")
	c.do(409, "POST", "/v1/notifications/"+lostAnswer.Notifications[0].ID.String()+"/cancel", "", "", nil)
	c.do(200, "GET", "/v1/orders/"+lostAnswer.ID.String(), "", "", nil)
	c.admin(409, "POST", "/admin/v1/deliveries/"+lostAnswer.Notifications[0].ID.String()+"/cancel", `{"note": "paid"}`)
	c.do(200, "POST", orderPath+"/notifications/cancel", jsonCT, `{"template": "payment-reminder"}`, nil)
	c.do(422, "POST", orderPath+"/notifications/cancel", jsonCT, `{"template": ""}`, nil)
	c.do(400, "POST", orderPath+"/notifications/cancel", jsonCT, `{"template": 1}`, nil)
	c.do(415, "POST", orderPath+"/notifications/cancel", "text/plain", `x`, nil)
	c.do(404, "POST", "/v1/orders/00000000-0000-4000-8000-000000000000/notifications/cancel", jsonCT, `{"template": "order-shipped"}`, nil)
	c.do(401, "POST", orderPath+"/notifications/cancel", jsonCT, `{"template": "order-shipped"}`, map[string]string{"Authorization": ""})
	c.do(403, "POST", orderPath+"/notifications/cancel", jsonCT, `{"template": "order-shipped"}`, map[string]string{"Authorization": "Bearer " + writeOnly})

	// One-click unsubscribe: the page changes nothing, the POST does.
	unsub := "/v1/unsubscribe/" + mail.UnsubscribeToken(unsubscribeSecret, "ana.maria@example.com", "subscription", time.Now())
	c.do(200, "GET", unsub, "", "", map[string]string{"Authorization": ""})
	c.do(200, "POST", unsub, "application/x-www-form-urlencoded", "List-Unsubscribe=One-Click", map[string]string{"Authorization": ""})
	c.do(404, "GET", "/v1/unsubscribe/forged.token", "", "", map[string]string{"Authorization": ""})
	c.do(404, "POST", "/v1/unsubscribe/"+mail.UnsubscribeToken("another-secret-another-secret-xxxx", "ana.maria@example.com", "subscription", time.Now()), "", "", map[string]string{"Authorization": ""})
	expired := "/v1/unsubscribe/" + mail.UnsubscribeToken(unsubscribeSecret, "ana.maria@example.com", "subscription", time.Now().AddDate(-2, 0, 0))
	c.do(410, "GET", expired, "", "", map[string]string{"Authorization": ""})
	c.do(410, "POST", expired, "application/x-www-form-urlencoded", "List-Unsubscribe=One-Click", map[string]string{"Authorization": ""})

	// Previews with custom data, in a language, and the gallery.
	c.do(200, "POST", "/v1/templates/payment-reminder/preview?lang=en-GB", jsonCT, data, nil)
	c.do(200, "POST", "/v1/templates/payment-reminder/preview?format=text", jsonCT, data, nil)
	c.do(422, "POST", "/v1/templates/order-shipped/preview", jsonCT, `{"carrier": 5}`, nil)
	c.do(400, "POST", "/v1/templates/order-shipped/preview", jsonCT, `[1]`, nil)
	c.do(404, "POST", "/v1/templates/nope/preview", jsonCT, data, nil)
	c.do(200, "GET", "/templates", "", "", nil)

	// Admin: the token is required everywhere.
	for _, header := range []map[string]string{nil, {"Authorization": "Bearer wrong-token-wrong-token"}} {
		c.do(401, "GET", "/admin/v1/deliveries", "", "", header)
		c.do(401, "POST", "/admin/v1/queue/pause", "", "", header)
		c.do(401, "DELETE", "/admin/v1/blocks/1", "", "", header)
	}

	// Admin: deliveries.
	id := o.Notifications[0].ID
	delivery := "/admin/v1/deliveries/" + id.String()
	c.admin(200, "GET", "/admin/v1/deliveries", "")
	c.admin(200, "GET", "/admin/v1/deliveries?status=pending&template=order-confirmation&limit=10&order_id="+o.ID.String(), "")
	c.admin(400, "GET", "/admin/v1/deliveries?status=lost", "")
	c.admin(400, "GET", "/admin/v1/deliveries?older_than=soon", "")
	c.admin(200, "GET", delivery, "")
	c.admin(404, "GET", "/admin/v1/deliveries/00000000-0000-4000-8000-000000000000", "")
	c.admin(404, "GET", "/admin/v1/deliveries/nope", "")
	var toCancel order.Order
	c.do(201, "POST", "/v1/orders", jsonCT, validCheckout, nil).decode(t, &toCancel)
	c.admin(200, "POST", "/admin/v1/deliveries/"+toCancel.Notifications[0].ID.String()+"/cancel", `{"note": "customer asked"}`)
	c.admin(409, "POST", "/admin/v1/deliveries/"+claimedOrder.Notifications[0].ID.String()+"/cancel", "")
	c.admin(404, "POST", "/admin/v1/deliveries/00000000-0000-4000-8000-000000000000/cancel", "")
	c.admin(400, "POST", delivery+"/cancel", `{"note": 1}`)
	c.admin(422, "POST", delivery+"/cancel", `{"note": "`+strings.Repeat("n", 1001)+`"}`)
	c.do(415, "POST", delivery+"/cancel", "text/plain", "why", map[string]string{"Authorization": "Bearer " + adminToken})
	c.do(413, "POST", delivery+"/cancel", jsonCT, `{"note": "`+strings.Repeat("n", 70_000)+`"}`, map[string]string{"Authorization": "Bearer " + adminToken})
	c.admin(409, "POST", delivery+"/retry", "")
	c.admin(404, "POST", "/admin/v1/deliveries/00000000-0000-4000-8000-000000000000/retry", "")
	c.admin(400, "POST", delivery+"/retry", `{"note": 1}`)
	c.admin(422, "POST", delivery+"/retry", `{"note": "`+strings.Repeat("n", 1001)+`"}`)
	c.do(415, "POST", delivery+"/retry", "text/plain", "why", map[string]string{"Authorization": "Bearer " + adminToken})
	s.f.Failed(s.f.Get(id), "550 no such user")
	if err := s.inspector.DeleteTask(s.redis.Queue, queue.TaskID(id)); err != nil {
		t.Fatal(err)
	}
	c.admin(200, "POST", delivery+"/retry", `{"note": "mailbox fixed"}`)
	c.admin(409, "POST", delivery+"/mark-sent", `{"provider_message_id": "MH-1"}`)
	s.f.Held(s.f.Get(id), "outcome unknown")
	c.admin(422, "POST", delivery+"/mark-sent", `{}`)
	c.admin(400, "POST", delivery+"/mark-sent", `{"provider_message_id": "MH-1", "extra": 1}`)
	c.admin(404, "POST", "/admin/v1/deliveries/nope/mark-sent", `{"provider_message_id": "MH-1"}`)
	c.admin(200, "POST", delivery+"/mark-sent", `{"provider_message_id": "MH-123", "note": "seen in the provider's log"}`)
	c.admin(200, "GET", delivery, "")
	c.admin(200, "GET", "/admin/v1/deliveries?status=sent", "")

	// Admin: the queue.
	c.admin(200, "GET", "/admin/v1/queue", "")
	c.admin(200, "POST", "/admin/v1/queue/pause", "")
	c.admin(200, "POST", "/admin/v1/queue/pause", `{"note": "provider incident"}`)
	c.admin(400, "POST", "/admin/v1/queue/pause", `{"why": "x"}`)
	c.admin(200, "GET", "/admin/v1/queue", "")
	c.admin(200, "POST", "/admin/v1/queue/resume", `{"note": "provider back"}`)
	c.admin(200, "POST", "/admin/v1/queue/pause", `{"note": "flash sale", "lane": "later"}`)
	c.admin(200, "GET", "/admin/v1/queue", "")
	c.admin(422, "POST", "/admin/v1/queue/pause", `{"lane": "newsletters"}`)
	c.admin(400, "POST", "/admin/v1/queue/pause", `{"not_at_provider": true}`)
	c.admin(200, "POST", "/admin/v1/queue/resume", `{"note": "sale over", "lane": "later"}`)
	c.admin(200, "PUT", "/admin/v1/queue/concurrency", `{"per_worker": 2}`)
	c.admin(200, "GET", "/admin/v1/queue", "")
	c.admin(422, "PUT", "/admin/v1/queue/concurrency", `{"per_worker": -1}`)
	c.admin(400, "PUT", "/admin/v1/queue/concurrency", `{"per_worker": "2"}`)
	c.admin(415, "PUT", "/admin/v1/queue/concurrency", "")
	c.admin(200, "PUT", "/admin/v1/queue/concurrency", `{"per_worker": 0}`)

	// Admin: blocks.
	var b notify.Block
	c.admin(201, "POST", "/admin/v1/blocks",
		`{"kind": "recipient", "value": " Ana.Maria@Example.com ", "reason": "complaint, ticket 4411", "expires_in": "2h"}`).decode(t, &b)
	c.admin(201, "POST", "/admin/v1/blocks", `{"kind": "key", "value": "order-confirmation:x:y@example.com", "reason": "replaying", "expires_in": "30m"}`)
	c.admin(422, "POST", "/admin/v1/blocks", `{"kind": "domain", "value": "example.com", "reason": "", "expires_in": "forever"}`)
	c.admin(422, "POST", "/admin/v1/blocks", `{"kind": "recipient", "value": "not an address", "reason": "x", "expires_in": "1h"}`)
	c.admin(400, "POST", "/admin/v1/blocks", `{"kind": "key",`)
	c.admin(200, "GET", "/admin/v1/blocks", "")
	c.admin(204, "DELETE", "/admin/v1/blocks/"+jsonInt(b.ID), "")
	c.admin(404, "DELETE", "/admin/v1/blocks/"+jsonInt(b.ID), "")
	c.admin(404, "DELETE", "/admin/v1/blocks/x", "")

	// Admin: API keys.
	var created struct {
		APIKey apikey.Key `json:"api_key"`
		Secret string     `json:"secret"`
	}
	c.admin(201, "POST", "/admin/v1/api-keys", `{"name": "shop-backend-2026-12", "scopes": ["orders:write", "orders:read"]}`).decode(t, &created)
	c.admin(201, "POST", "/admin/v1/api-keys", `{"name": "shop-backend-2027-01", "scopes": ["orders:write"], "replaces": "`+created.APIKey.ID.String()+`"}`)
	c.admin(422, "POST", "/admin/v1/api-keys", `{"name": "x", "scopes": ["orders:write"], "replaces": "00000000-0000-4000-8000-000000000000"}`)
	c.admin(422, "POST", "/admin/v1/api-keys", `{"name": "", "scopes": ["orders:delete"]}`)
	c.admin(400, "POST", "/admin/v1/api-keys", `{"name": "x", "scopes": ["orders:read"], "name": "y"}`)
	c.admin(200, "GET", "/admin/v1/api-keys", "")
	c.admin(200, "DELETE", "/admin/v1/api-keys/"+created.APIKey.ID.String(), "")
	c.admin(404, "DELETE", "/admin/v1/api-keys/00000000-0000-4000-8000-000000000000", "")
	c.admin(404, "DELETE", "/admin/v1/api-keys/nope", "")

	// Admin: the shop's webhook endpoints.
	hook := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer hook.Close()
	admin := map[string]string{"Authorization": "Bearer " + adminToken}
	var made struct {
		Endpoint webhookout.Endpoint `json:"webhook_endpoint"`
		Secret   string              `json:"secret"`
	}
	c.admin(201, "POST", "/admin/v1/webhook-endpoints", `{"url": "`+hook.URL+`/hooks", "event_types": ["notification.sent"], "description": "shop backend"}`).decode(t, &made)
	if !strings.HasPrefix(made.Secret, "whsec_") {
		t.Errorf("secret %q", made.Secret)
	}
	c.admin(422, "POST", "/admin/v1/webhook-endpoints", `{"url": "https://10.1.2.3/hooks"}`)
	c.admin(422, "POST", "/admin/v1/webhook-endpoints", `{"url": "`+hook.URL+`", "event_types": ["order.paid"]}`)
	c.admin(400, "POST", "/admin/v1/webhook-endpoints", `{"url": 1}`)
	c.do(415, "POST", "/admin/v1/webhook-endpoints", "text/plain", "x", admin)
	c.do(413, "POST", "/admin/v1/webhook-endpoints", jsonCT, `{"url": "`+strings.Repeat("x", 70_000)+`"}`, admin)
	c.do(401, "POST", "/admin/v1/webhook-endpoints", jsonCT, `{"url": "`+hook.URL+`"}`, nil)
	c.admin(200, "GET", "/admin/v1/webhook-endpoints", "")
	endpoint := "/admin/v1/webhook-endpoints/" + made.Endpoint.ID.String()
	noEndpoint := "/admin/v1/webhook-endpoints/00000000-0000-4000-8000-000000000000"
	c.admin(200, "GET", endpoint, "")
	c.admin(404, "GET", noEndpoint, "")
	c.admin(404, "GET", "/admin/v1/webhook-endpoints/nope", "")
	c.admin(200, "POST", endpoint+"/rotate-secret", "")
	c.admin(404, "POST", noEndpoint+"/rotate-secret", "")
	c.admin(200, "POST", endpoint+"/disable", `{"reason": "the receiver moves"}`)
	c.admin(200, "POST", endpoint+"/disable", "")
	c.admin(400, "POST", endpoint+"/disable", `{"why": 1}`)
	c.admin(422, "POST", endpoint+"/disable", `{"reason": "`+strings.Repeat("r", 501)+`"}`)
	c.do(415, "POST", endpoint+"/disable", "text/plain", "x", admin)
	c.do(413, "POST", endpoint+"/disable", jsonCT, `{"reason": "`+strings.Repeat("r", 70_000)+`"}`, admin)
	c.admin(404, "POST", noEndpoint+"/disable", "")
	c.admin(200, "POST", endpoint+"/enable", "")
	c.admin(404, "POST", noEndpoint+"/enable", "")
	c.admin(200, "POST", endpoint+"/replay", `{"since": "2026-01-01T00:00:00Z"}`)
	c.admin(422, "POST", endpoint+"/replay", `{}`)
	c.admin(400, "POST", endpoint+"/replay", `{"since": 1}`)
	c.do(415, "POST", endpoint+"/replay", "text/plain", "x", admin)
	c.do(413, "POST", endpoint+"/replay", jsonCT, `{"webhook_id": "`+strings.Repeat("m", 70_000)+`"}`, admin)
	c.admin(404, "POST", noEndpoint+"/replay", `{"webhook_id": "msg_1"}`)
	c.admin(204, "DELETE", endpoint, "")
	c.admin(404, "DELETE", endpoint, "")
	c.do(401, "GET", orderPath, "", "", map[string]string{"Authorization": "Bearer " + created.Secret})

	// Admin: suppressions.
	c.admin(201, "POST", "/admin/v1/suppressions", `{"recipient": "Gone@Example.com", "note": "bounced at the old shop"}`)
	c.admin(200, "POST", "/admin/v1/suppressions", `{"recipient": "gone@example.com", "note": "again"}`)
	c.admin(422, "POST", "/admin/v1/suppressions", `{"recipient": "nope", "note": ""}`)
	c.admin(400, "POST", "/admin/v1/suppressions", `{"recipient": "gone@example.com", "note": "x", "why": 1}`)
	c.admin(200, "GET", "/admin/v1/suppressions", "")
	c.admin(400, "GET", "/admin/v1/suppressions?limit=0", "")
	c.admin(200, "GET", "/admin/v1/suppressions/gone@example.com", "")
	c.admin(404, "GET", "/admin/v1/suppressions/nobody@example.com", "")
	c.admin(400, "DELETE", "/admin/v1/suppressions/gone@example.com", "")
	c.admin(204, "DELETE", "/admin/v1/suppressions/gone%40example.com?note=fixed", "")
	c.admin(404, "DELETE", "/admin/v1/suppressions/gone@example.com?note=fixed", "")

	// Admin: what operators did.
	var actions struct {
		Actions []notify.Action `json:"actions"`
	}
	c.admin(200, "GET", "/admin/v1/actions", "").decode(t, &actions)
	if len(actions.Actions) < 2 {
		t.Fatalf("%d operator actions recorded", len(actions.Actions))
	}
	c.admin(200, "GET", "/admin/v1/actions?limit=5&before="+jsonInt(actions.Actions[1].ID), "")
	c.admin(400, "GET", "/admin/v1/actions?before=last", "")
	c.admin(400, "GET", "/admin/v1/actions?limit=0", "")

	// Providers' webhooks, about another order's confirmation.
	var sent order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &sent)
	s.sentVia(t, sent, "5d2c3b1a-7e4f-4a8b-9c0d-1e2f3a4b5c6d")
	now := time.Now()
	bounce := resendBounce("5d2c3b1a-7e4f-4a8b-9c0d-1e2f3a4b5c6d", "ana.maria@example.com", now)
	signed := func(id string, at time.Time, body string) map[string]string {
		h, err := resendtest.SignWebhook(secret, id, at, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return map[string]string{"Authorization": "", "svix-id": h.Get("svix-id"), "svix-timestamp": h.Get("svix-timestamp"), "svix-signature": h.Get("svix-signature")}
	}
	c.do(200, "POST", "/v1/webhooks/resend", jsonCT, bounce, signed("msg_contract", now, bounce))
	c.do(200, "POST", "/v1/webhooks/resend", jsonCT, bounce, signed("msg_contract", now, bounce))
	// The bounce beside the status: the shop's read, the operators' list.
	c.do(200, "GET", "/v1/orders/"+sent.ID.String(), "", "", nil)
	c.admin(200, "GET", "/admin/v1/deliveries?bounced_or_complained=true", "")
	c.admin(400, "GET", "/admin/v1/deliveries?bounced_or_complained=maybe", "")
	c.admin(200, "GET", "/admin/v1/suppressions/ana.maria@example.com", "")
	c.do(401, "POST", "/v1/webhooks/resend", jsonCT, bounce, signed("msg_old", now.Add(-time.Hour), bounce))
	c.do(401, "POST", "/v1/webhooks/postmark", jsonCT, `{}`, map[string]string{"Authorization": ""})
	c.do(400, "POST", "/v1/webhooks/resend", jsonCT, `[]`, signed("msg_array", now, `[]`))
	other := resendBounce("00000000-0000-4000-8000-00000000beef", "x@example.com", now)
	c.do(422, "POST", "/v1/webhooks/resend", jsonCT, other, signed("msg_other", now, other))
	c.do(404, "POST", "/v1/webhooks/mailgun", jsonCT, bounce, nil)
	huge := `{"pad": "` + strings.Repeat("x", 1<<20) + `"}`
	c.do(413, "POST", "/v1/webhooks/resend", jsonCT, huge, signed("msg_huge", now, huge))

	var missed []string
	for path, item := range c.doc.Paths.Map() {
		for method := range item.Operations() {
			if !c.seen[method+" "+path] {
				missed = append(missed, method+" "+path)
			}
		}
	}
	slices.Sort(missed)
	if len(missed) > 0 {
		t.Errorf("documented operations this test never called:\n\t%s", strings.Join(missed, "\n\t"))
	}
}

// slowBody sends a body that never arrives: the answer is 408.
func (c *contract) slowBody(path string) {
	c.t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(c.s.url, "http://"))
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: sekali\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{", path, c.s.backendKey); err != nil {
		c.t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	if res.StatusCode != http.StatusRequestTimeout {
		c.t.Errorf("POST %s with a body that never arrives = %d %s, want 408", path, res.StatusCode, body)
	}
	c.check(http.MethodPost, path, response{status: res.StatusCode, header: res.Header, body: body})
}

// inFlight sends a checkout while another request holds its key, the way
// the checkout itself holds it: the answer is 409.
func (c *contract) inFlight(ctx context.Context) {
	c.t.Helper()
	tx, err := c.s.db.Pool.Begin(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(385697, hashtext('POST /v1/orders key:' || $1 || ' ' || 'contract-busy-key'))", c.s.backendKeyID.String()); err != nil {
		c.t.Fatal(err)
	}
	c.do(409, "POST", "/v1/orders", "application/json", validCheckout, map[string]string{"Idempotency-Key": "contract-busy-key"})
}
