package sekali_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sekali-dev/sekali"
	"github.com/sekali-dev/sekali/api"
	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/notify/notifytest"
	"github.com/sekali-dev/sekali/internal/testenv"
	"github.com/sekali-dev/sekali/internal/webhookout"
)

// stack is the real API (cmd/api, built and run as it ships) on a
// database and a queue of the test's own, with a key of the shop's
// backend that has every scope a shop's key has.
type stack struct {
	db     testenv.DB
	url    string
	keys   *apikey.Service
	key    apikey.Key
	client *sekali.Client
}

// setup starts the API with env added to the test's environment. The
// client's tests talk to the binary rather than to cmd/api's run in
// process: run is package main's, and the binary is what a shop calls.
func setup(t *testing.T, env ...string) stack {
	t.Helper()
	db := testenv.NewDB(t)
	rd := testenv.NewRedis(t)
	templates, err := filepath.Abs("deploy/templates") // payment-reminder
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{
		"DATABASE_URL": db.URL, "REDIS_URL": rd.URL, "DELIVERY_QUEUE": rd.Queue, "HTTP_ADDR": "127.0.0.1:0",
		"METRICS_ADDR": "127.0.0.1:0", "MAIL_FROM": "orders@shop.example", "TEMPLATES_DIR": templates,
	}
	for i := 0; i+1 < len(env); i += 2 {
		vars[env[i]] = env[i+1]
	}
	p := testenv.Start(t, "api", testenv.Binary(t, "./cmd/api"), vars)
	s := stack{db: db, url: "http://" + p.WaitLog(t, "api listening", "addr", 60*time.Second), keys: apikey.NewService(db.Pool)}
	var secret string
	s.key, secret = s.newKey(t, apikey.ScopeCheckout, apikey.ScopeOrdersRead, apikey.ScopeOrdersWrite, apikey.ScopeNotificationsWrite)
	s.client = s.newClient(t, sekali.WithAPIKey(secret))
	return s
}

// newKey makes an API key of the shop's backend, as an operator does.
func (s stack) newKey(t *testing.T, scopes ...apikey.Scope) (apikey.Key, string) {
	t.Helper()
	k, secret, err := s.keys.Create(t.Context(), "test", "shop backend", scopes)
	if err != nil {
		t.Fatal(err)
	}
	return k, secret
}

// newClient is a client of the API (or of base, when given: a proxy).
func (s stack) newClient(t *testing.T, opts ...sekali.Option) *sekali.Client {
	t.Helper()
	return newClient(t, s.url, opts...)
}

func newClient(t *testing.T, base string, opts ...sekali.Option) *sekali.Client {
	t.Helper()
	c, err := sekali.NewClient(base, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// orders is how many orders the database holds.
func (s stack) orders(t *testing.T) int {
	t.Helper()
	var n int
	if err := s.db.Pool.QueryRow(t.Context(), "SELECT count(*) FROM orders").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func anaCheckout() sekali.Checkout {
	return sekali.Checkout{
		CustomerEmail: "Ana@Example.com", CustomerName: "Ana", Currency: "IDR", Locale: "id-ID",
		Items: []sekali.CheckoutItem{{SKU: "TEA-01", Name: "Teh melati", Quantity: 2, UnitPrice: 4_500_000}},
	}
}

// reminder is a payment-reminder trigger of order (deploy/templates), at sendAt.
func reminder(order uuid.UUID, event string, sendAt time.Time) sekali.Trigger {
	return sekali.Trigger{Template: "payment-reminder", EventID: event, SendAt: sendAt, Data: map[string]any{
		"order_id": order.String(), "customer_name": "Ana", "currency": "IDR", "amount_due": 9_000_000,
		"due_at": sendAt.Add(24 * time.Hour).Format(time.RFC3339), "payment_url": "https://shop.example/pay/1001",
	}}
}

// problem is err's Problem, failing the test when it has none or one of
// another type.
func problem(t *testing.T, what string, err error, want sekali.ProblemType, status int) sekali.Problem {
	t.Helper()
	var p *sekali.Problem
	if !errors.As(err, &p) {
		t.Fatalf("%s: %v, want a *sekali.Problem %s", what, err, want)
	}
	if p.Type != want || p.Status != status || !errors.Is(err, want) || p.RequestID == "" || p.Title == "" {
		t.Errorf("%s: %+v, want %s, %d, with its request id and title", what, p, want, status)
	}
	return *p
}

// The calls a shop's backend makes, against the real API: a checkout and
// its replay (the same order in every field, nothing more recorded), the
// order read with the key and with its access token, a shipment, a
// reminder scheduled and cancelled, one by one and by template.
func TestClientPlacesReadsShipsRemindsAndCancels(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()

	o, err := s.client.PlaceOrder(ctx, anaCheckout(), sekali.WithIdempotencyKey("cart-1001"), sekali.WithRequestID("checkout-1001"))
	if err != nil {
		t.Fatal(err)
	}
	if o.CustomerEmail != "ana@example.com" || o.Total != 9_000_000 || o.Items[0].LineTotal != 9_000_000 || o.Locale != "id-ID" ||
		!strings.HasPrefix(o.AccessToken, "sekali_order_") || len(o.Notifications) != 1 ||
		o.Notifications[0].Template != "order-confirmation" || o.Notifications[0].Status != sekali.StatusPending {
		t.Errorf("placed order = %+v", o)
	}
	replay, err := s.client.PlaceOrder(ctx, anaCheckout(), sekali.WithIdempotencyKey("cart-1001"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(replay, o) {
		t.Errorf("replay = %+v\nwant the first order %+v", replay, o)
	}
	if n := s.orders(t); n != 1 {
		t.Errorf("%d orders after a checkout and its replay, want 1", n)
	}

	// Read with the key, and with the access token by a client without one (a storefront).
	read, err := s.client.GetOrder(ctx, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	storefront := s.newClient(t)
	byToken, err := storefront.GetOrder(ctx, o.ID, sekali.WithOrderToken(o.AccessToken))
	if err != nil {
		t.Fatal(err)
	}
	want := *o
	want.AccessToken = "" // shown by the checkout only
	for name, got := range map[string]*sekali.Order{"with the key": read, "with the token": byToken} {
		if !reflect.DeepEqual(*got, want) {
			t.Errorf("read %s = %+v\nwant %+v", name, got, want)
		}
	}
	// Without a key of its own each checkout is another order; its token reads only it.
	other, err := s.client.PlaceOrder(ctx, anaCheckout())
	if err != nil {
		t.Fatal(err)
	}
	if other.ID == o.ID || s.orders(t) != 2 {
		t.Errorf("a checkout without a key of its own = %s, the first %s; %d orders", other.ID, o.ID, s.orders(t))
	}
	_, err = storefront.GetOrder(ctx, o.ID, sekali.WithOrderToken(other.AccessToken))
	problem(t, "another order's token", err, sekali.ProblemNotFound, http.StatusNotFound)

	// A shipment is recorded once, and the order shows it.
	shipped, err := s.client.RecordShipment(ctx, o.ID, sekali.Shipment{Carrier: "JNE", TrackingNumber: "JNE-1001"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.client.RecordShipment(ctx, o.ID, sekali.Shipment{Carrier: "JNE", TrackingNumber: "JNE-1001"})
	if err != nil {
		t.Fatal(err)
	}
	if shipped.Template != "order-shipped" || !reflect.DeepEqual(again, shipped) {
		t.Errorf("shipment = %+v, again %+v", shipped, again)
	}
	if got, err := s.client.GetOrder(ctx, o.ID); err != nil || len(got.Shipments) != 1 ||
		got.Shipments[0].TrackingNumber != "JNE-1001" || got.Shipments[0].NotificationID != shipped.ID {
		t.Errorf("the order's shipments = %+v, %v; want JNE-1001 with its e-mail", got, err)
	}

	// A reminder in an hour, once per event, then cancelled.
	sendAt := time.Now().Add(time.Hour).Truncate(time.Second)
	r, err := s.client.Notify(ctx, o.ID, reminder(o.ID, "due-1", sendAt))
	if err != nil {
		t.Fatal(err)
	}
	if r.Template != "payment-reminder" || r.Status != sekali.StatusPending || !r.SendAt.Equal(sendAt) {
		t.Errorf("reminder = %+v, want pending until %s", r, sendAt)
	}
	if same, err := s.client.Notify(ctx, o.ID, reminder(o.ID, "due-1", sendAt)); err != nil || same.ID != r.ID {
		t.Errorf("the same reminder again = %+v, %v; want %s", same, err, r.ID)
	}
	cancelled, err := s.client.CancelNotification(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cancelled.ID != r.ID || cancelled.Status != sekali.StatusCancelled {
		t.Errorf("cancelled = %+v", cancelled)
	}
	if again, err := s.client.CancelNotification(ctx, r.ID); err != nil || !reflect.DeepEqual(again, cancelled) {
		t.Errorf("cancelled again = %+v, %v", again, err)
	}
	// Read again, one notification alone, with its recipient.
	if got, err := s.client.GetNotification(ctx, r.ID); err != nil || !reflect.DeepEqual(got, cancelled) || got.Recipient != "ana@example.com" {
		t.Errorf("GetNotification = %+v, %v; want %+v, to ana@example.com", got, err, cancelled)
	}
	_, err = s.client.GetNotification(ctx, uuid.New())
	problem(t, "no such notification", err, sekali.ProblemNotFound, http.StatusNotFound)
	// By template, once paid: the second reminder and the first, cancelled before.
	r2, err := s.client.Notify(ctx, o.ID, reminder(o.ID, "due-2", sendAt.Add(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.client.CancelNotifications(ctx, o.ID, "payment-reminder")
	if err != nil {
		t.Fatal(err)
	}
	var ids []uuid.UUID
	for _, n := range res.Cancelled {
		ids = append(ids, n.ID)
	}
	if len(res.Cancelled) != 2 || !slices.Contains(ids, r.ID) || !slices.Contains(ids, r2.ID) || len(res.NotCancelled) != 0 {
		t.Errorf("cancel by template = %+v, want %s and %s cancelled", res, r.ID, r2.ID)
	}
}

// Each problem a shop's backend branches on, as the real API answers it,
// is a *Problem of its type, which errors.As finds and errors.Is names.
func TestClientProblemsAreTyped(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()

	bad := anaCheckout()
	bad.CustomerEmail = "ana at example.com"
	bad.Items[0].Quantity = 0
	_, err := s.client.PlaceOrder(ctx, bad)
	p := problem(t, "an invalid checkout", err, sekali.ProblemValidation, http.StatusUnprocessableEntity)
	var pointers []string
	for _, e := range p.Errors {
		pointers = append(pointers, e.Pointer)
	}
	if !slices.Contains(pointers, "/customer_email") || !slices.Contains(pointers, "/items/0/quantity") {
		t.Errorf("validation errors = %+v, want /customer_email and /items/0/quantity", p.Errors)
	}
	if !strings.Contains(err.Error(), "/items/0/quantity") {
		t.Errorf("the error's text %q does not name the field", err)
	}
	if n := s.orders(t); n != 0 {
		t.Errorf("an invalid checkout wrote %d orders", n)
	}

	o, err := s.client.PlaceOrder(ctx, anaCheckout(), sekali.WithIdempotencyKey("cart-7"))
	if err != nil {
		t.Fatal(err)
	}
	different := anaCheckout()
	different.Items[0].Quantity = 3
	_, err = s.client.PlaceOrder(ctx, different, sekali.WithIdempotencyKey("cart-7"))
	problem(t, "another checkout under a used key", err, sekali.ProblemIdempotencyKeyReused, http.StatusUnprocessableEntity)
	_, err = s.client.PlaceOrder(ctx, anaCheckout(), sekali.WithIdempotencyKey("cart 7"))
	problem(t, "a malformed key", err, sekali.ProblemInvalidIdempotencyKey, http.StatusBadRequest)

	_, err = s.client.Notify(ctx, o.ID, sekali.Trigger{Template: "payment-reminder", Data: map[string]any{"order_id": o.ID.String()}})
	p = problem(t, "a reminder without its data", err, sekali.ProblemValidation, http.StatusUnprocessableEntity)
	if len(p.Errors) == 0 || !strings.HasPrefix(p.Errors[0].Pointer, "/data") {
		t.Errorf("the reminder's errors = %+v, want pointers under /data", p.Errors)
	}

	at := time.Now().Add(2 * time.Hour).Truncate(time.Second)
	first, err := s.client.Notify(ctx, o.ID, reminder(o.ID, "due-1", at))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.client.Notify(ctx, o.ID, reminder(o.ID, "due-1", at.Add(time.Hour)))
	p = problem(t, "an event that has a notification with other data", err, sekali.ProblemNotificationConflict, http.StatusConflict)
	if p.Notification == nil || p.Notification.ID != first.ID {
		t.Errorf("the problem's notification = %+v, want the first reminder %s", p.Notification, first.ID)
	}

	_, err = s.client.GetOrder(ctx, uuid.New())
	problem(t, "an order that does not exist", err, sekali.ProblemNotFound, http.StatusNotFound)
	_, err = s.newClient(t, sekali.WithAPIKey("sekali_key_nope_nope")).GetOrder(ctx, o.ID)
	problem(t, "a key that is not one", err, sekali.ProblemUnauthorized, http.StatusUnauthorized)
	_, reader := s.newKey(t, apikey.ScopeOrdersRead)
	_, err = s.newClient(t, sekali.WithAPIKey(reader)).PlaceOrder(ctx, anaCheckout())
	problem(t, "a checkout with a key that may only read", err, sekali.ProblemForbidden, http.StatusForbidden)

	// Too late to cancel: once a provider took it (the factory makes it
	// sent as a worker does), and once a provider may have it.
	f := notifytest.New(t, s.db.Pool)
	f.Sent(f.Get(o.Notifications[0].ID), "provider-1")
	_, err = s.client.CancelNotification(ctx, o.Notifications[0].ID)
	p = problem(t, "a cancel of a sent confirmation", err, sekali.ProblemWrongState, http.StatusConflict)
	if p.Notification == nil || p.Notification.ID != o.Notifications[0].ID || p.Notification.Status != sekali.StatusSent {
		t.Errorf("the problem's notification = %+v, want the confirmation, sent", p.Notification)
	}
	o2, err := s.client.PlaceOrder(ctx, anaCheckout())
	if err != nil {
		t.Fatal(err)
	}
	f.MaybeAccepted(f.Get(o2.Notifications[0].ID), "smtp")
	_, err = s.client.CancelNotification(ctx, o2.Notifications[0].ID)
	p = problem(t, "a cancel of a confirmation a provider may have", err, sekali.ProblemMayHaveBeenSent, http.StatusConflict)
	if p.Notification == nil || !p.Notification.MayHaveBeenSent || p.Notification.Status != sekali.StatusPending {
		t.Errorf("the problem's notification = %+v, want pending, may_have_been_sent", p.Notification)
	}
	if errors.Is(err, sekali.ProblemWrongState) {
		t.Error("errors.Is takes may-have-been-sent for wrong-state")
	}
}

// What the provider reported after it took an e-mail reaches the shop
// that polls (issue 40: a bounce read sent, and nothing else): a sent
// confirmation the provider reports delivered, then bounced, reads sent
// with the bounce and its time; a deferral the provider's retry brings
// late, older than the bounce, changes nothing.
func TestClientReadsWhatTheProviderReportedAfterSent(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	o, err := s.client.PlaceOrder(ctx, anaCheckout())
	if err != nil {
		t.Fatal(err)
	}
	if n := o.Notifications[0]; n.ProviderEvent != "" || !n.ProviderEventAt.IsZero() {
		t.Errorf("a new order's confirmation = %+v, want no report", n)
	}
	f := notifytest.New(t, s.db.Pool)
	d := f.Sent(f.Get(o.Notifications[0].ID), "re_4711")
	sent := time.Now().UTC().Truncate(time.Second)
	for i, r := range []struct {
		kind mail.FeedbackKind
		at   time.Time
	}{{mail.FeedbackDelivered, sent.Add(time.Second)}, {mail.FeedbackBounced, sent.Add(time.Minute)}, {mail.FeedbackDeferred, sent}} {
		if _, err := notify.RecordFeedback(ctx, s.db.Pool, mail.Feedback{Provider: "resend", EventID: fmt.Sprint("evt-", i), Kind: r.kind,
			ProviderMessageID: d.ProviderMessageID, At: r.at}); err != nil {
			t.Fatal(err)
		}
	}
	read, err := s.client.GetOrder(ctx, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n := read.Notifications[0]; n.Status != sekali.StatusSent || n.ProviderEvent != sekali.ProviderBounced || !n.ProviderEventAt.Equal(sent.Add(time.Minute)) {
		t.Errorf("the confirmation = %+v, want sent, and bounced at %s", n, sent.Add(time.Minute))
	}
}

// proxy is a test server in front of the API that hands each request to
// in, which may answer it itself, and otherwise forwards it.
func proxy(t *testing.T, api string, in func(w http.ResponseWriter, r *http.Request, forward http.Handler) bool) string {
	t.Helper()
	u, err := url.Parse(api)
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !in(w, r, forward) {
			forward.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A checkout whose answer is lost after the API recorded it is retried by
// the client under the same Idempotency-Key, and the retry gets the first
// order: one order in the database, not two. Without retries the loss is
// an error, not a *Problem, and the shop's own key (asked again after a
// restart, say) still finds that order.
func TestRetriedCheckoutGetsTheFirstOrder(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var mu sync.Mutex
	var keys []string
	lost := map[string][]byte{} // the first answer to each key, which never reached the client
	base := proxy(t, s.url, func(w http.ResponseWriter, r *http.Request, forward http.Handler) bool {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/orders" {
			return false
		}
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		keys = append(keys, key)
		_, seen := lost[key]
		mu.Unlock()
		if seen {
			return false
		}
		// The API takes the checkout and answers; the answer never reaches the client.
		rec := httptest.NewRecorder()
		forward.ServeHTTP(rec, r)
		if rec.Code != http.StatusCreated {
			t.Errorf("the first checkout = %d %s, want 201", rec.Code, rec.Body)
		}
		mu.Lock()
		lost[key] = rec.Body.Bytes()
		mu.Unlock()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return true
		}
		conn.Close()
		return true
	})
	firstOf := func(key string) sekali.Order {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		var o sekali.Order
		if err := json.Unmarshal(lost[key], &o); err != nil {
			t.Fatalf("the lost answer to %q: %v", key, err)
		}
		return o
	}
	// Without keep-alives: on a connection used before, net/http's
	// transport itself sends a request that carries an Idempotency-Key
	// again when the connection breaks; here every retry is the client's.
	fresh := sekali.WithHTTPClient(&http.Client{Transport: &http.Transport{DisableKeepAlives: true}})
	_, secret := s.newKey(t, apikey.ScopeCheckout)
	o, err := newClient(t, base, sekali.WithAPIKey(secret), fresh).PlaceOrder(t.Context(), anaCheckout())
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	sent := slices.Clone(keys)
	mu.Unlock()
	if len(sent) != 2 || sent[0] == "" || sent[1] != sent[0] {
		t.Fatalf("Idempotency-Keys sent = %q, want one key twice", sent)
	}
	if first := firstOf(sent[0]); !reflect.DeepEqual(*o, first) {
		t.Errorf("the retry's order = %+v\nwant the first, whose answer was lost: %+v", o, first)
	}
	if n := s.orders(t); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}

	once := newClient(t, base, sekali.WithAPIKey(secret), sekali.WithRetry(1, 0), fresh)
	_, err = once.PlaceOrder(t.Context(), anaCheckout(), sekali.WithIdempotencyKey("cart-4004"))
	var p *sekali.Problem
	if err == nil || errors.As(err, &p) {
		t.Fatalf("a lost answer without retries = %v, want an error that is no *Problem", err)
	}
	again, err := once.PlaceOrder(t.Context(), anaCheckout(), sekali.WithIdempotencyKey("cart-4004"))
	if err != nil {
		t.Fatal(err)
	}
	if first := firstOf("cart-4004"); !reflect.DeepEqual(*again, first) {
		t.Errorf("asked again under the shop's key = %+v\nwant the order whose answer was lost: %+v", again, first)
	}
	if n := s.orders(t); n != 2 {
		t.Errorf("%d orders, want 2", n)
	}
}

// A checkout that meets its twin still in flight (409
// idempotency-key-in-flight) is retried, and gets its order once the twin
// is done.
func TestCheckoutInFlightIsRetried(t *testing.T) {
	t.Parallel()
	s := setup(t)
	key, secret := s.newKey(t, apikey.ScopeCheckout)
	// On purpose, raw SQL: this session holds the key's lock as a twin
	// request does while its checkout runs (InsertKeyedCheckout's
	// pg_try_advisory_xact_lock on the API key's scope and the key), and
	// lets go once the API has answered 409.
	conn, err := s.db.Pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	lock := "POST /v1/orders key:" + key.ID.String() + " cart-2002"
	if _, err := conn.Exec(t.Context(), "SELECT pg_advisory_lock(385697, hashtext($1))", lock); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var statuses []int
	base := proxy(t, s.url, func(w http.ResponseWriter, r *http.Request, forward http.Handler) bool {
		rec := httptest.NewRecorder()
		forward.ServeHTTP(rec, r)
		mu.Lock()
		statuses = append(statuses, rec.Code)
		mu.Unlock()
		if rec.Code == http.StatusConflict {
			if _, err := conn.Exec(r.Context(), "SELECT pg_advisory_unlock(385697, hashtext($1))", lock); err != nil {
				t.Error(err)
			}
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		return true
	})
	o, err := newClient(t, base, sekali.WithAPIKey(secret)).PlaceOrder(t.Context(), anaCheckout(), sekali.WithIdempotencyKey("cart-2002"))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(statuses, []int{http.StatusConflict, http.StatusCreated}) {
		t.Errorf("answers = %v, want 409 (in flight), then 201", statuses)
	}
	if n := s.orders(t); n != 1 || o.ID == uuid.Nil {
		t.Errorf("%d orders, order %s; want 1", n, o.ID)
	}
}

// Over its budget, a call waits as long as the API's Retry-After asks,
// when that is within what the client may wait, and is then served; else
// it returns the problem with its Retry-After. The budget is one request
// a second; each step below tries a few calls in a row, so that a slow
// machine, where a second passes between two of them, still meets it.
func TestRateLimitedCallWaitsForRetryAfter(t *testing.T) {
	t.Parallel()
	s := setup(t, "RATE_LIMIT_BACKEND", "1", "RATE_LIMIT_BACKEND_BURST", "1")
	ctx := t.Context()
	var mu sync.Mutex
	var statuses []int
	base := proxy(t, s.url, func(w http.ResponseWriter, r *http.Request, forward http.Handler) bool {
		rec := httptest.NewRecorder()
		forward.ServeHTTP(rec, r)
		mu.Lock()
		statuses = append(statuses, rec.Code)
		mu.Unlock()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		return true
	})
	answers := func() []int {
		mu.Lock()
		defer mu.Unlock()
		a := statuses
		statuses = nil
		return a
	}
	_, secret := s.newKey(t, apikey.ScopeCheckout, apikey.ScopeOrdersRead)
	c := newClient(t, base, sekali.WithAPIKey(secret))
	o, err := c.PlaceOrder(ctx, anaCheckout())
	if err != nil {
		t.Fatal(err)
	}

	impatient := newClient(t, base, sekali.WithAPIKey(secret), sekali.WithRetry(4, 0))
	for i := 0; ; i++ {
		_, err = impatient.GetOrder(ctx, o.ID)
		if err != nil || i == 5 {
			break
		}
	}
	p := problem(t, "a read over the budget, not waiting", err, sekali.ProblemRateLimited, http.StatusTooManyRequests)
	if p.RetryAfter < time.Second {
		t.Errorf("RetryAfter = %v, want the API's Retry-After (at least 1 s)", p.RetryAfter)
	}
	if a := answers(); a[len(a)-1] != http.StatusTooManyRequests {
		t.Errorf("answers = %v, want the last a 429, not retried", a)
	}

	waited := false
	for i := 0; i < 5 && !waited; i++ {
		if _, err := c.GetOrder(ctx, o.ID); err != nil {
			t.Fatalf("a read over the budget, waiting: %v", err)
		}
		a := answers()
		waited = len(a) >= 2 && a[0] == http.StatusTooManyRequests && a[len(a)-1] == http.StatusOK
		if !waited && !slices.Equal(a, []int{http.StatusOK}) {
			t.Errorf("answers to one read = %v, want 200, or 429 then (after its Retry-After) 200", a)
		}
	}
	if !waited {
		t.Error("no read of five in a row met the budget and waited")
	}
}

// The "done when": a Go program using the client places an order,
// triggers a reminder, cancels it, and verifies the webhook sekali sends
// about it — posted by the reconciler's dispatcher (webhookout), signed
// with the endpoint's secret, checked by the client's verifier and by the
// Standard Webhooks reference library, its body as api/openapi.yaml's
// WebhookEvent describes it.
func TestShopBackendEndToEnd(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	eventSchema := webhookEventSchema(t)

	// The shop's receiver.
	events := make(chan *sekali.Event, 10)
	var secret string
	var verifier *sekali.WebhookVerifier
	ready := make(chan struct{})
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-ready
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
		if err != nil {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return
		}
		e, err := verifier.Verify(r.Header, body)
		if err != nil {
			t.Errorf("the client's verifier refuses sekali's webhook: %v", err)
			http.Error(w, "not from sekali", http.StatusUnauthorized)
			return
		}
		if wh, _ := standardwebhooks.NewWebhook(secret); wh.Verify(body, r.Header) != nil {
			t.Error("the reference library refuses the webhook the client's verifier took")
		}
		var doc any
		if err := json.Unmarshal(body, &doc); err != nil || eventSchema.VisitJSON(doc) != nil {
			t.Errorf("the webhook's body is not a WebhookEvent of api/openapi.yaml: %v %v\n%s", err, eventSchema.VisitJSON(doc), body)
		}
		events <- e
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)
	loopback := &webhookout.Guard{AllowHTTP: true, Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	_, secret, err := webhookout.NewService(s.db.Pool, loopback).Create(ctx, "test", receiver.URL+"/hooks/sekali",
		[]string{string(sekali.EventCancelled)}, "shop backend")
	if err != nil {
		t.Fatal(err)
	}
	if verifier, err = sekali.NewWebhookVerifier(secret); err != nil {
		t.Fatal(err)
	}
	close(ready)

	// The shop's backend.
	numbered := anaCheckout()
	numbered.Reference = "TA-3003"
	o, err := s.client.PlaceOrder(ctx, numbered, sekali.WithIdempotencyKey("cart-3003"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.client.Notify(ctx, o.ID, reminder(o.ID, "due-1", time.Now().Add(24*time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.CancelNotification(ctx, r.ID); err != nil {
		t.Fatal(err)
	}

	// The reconciler's dispatcher posts what the cancel wrote to the outbox.
	d := webhookout.NewDispatcher(s.db.Pool, webhookout.Config{Guard: loopback, RetryBase: 100 * time.Millisecond},
		slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	var e *sekali.Event
	testenv.WaitFor(t, "the webhook about the cancelled reminder", 30*time.Second, func() bool {
		if _, err := d.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case e = <-events:
			return true
		default:
			return false
		}
	})
	if e.Type != sekali.EventCancelled || !strings.HasPrefix(e.ID, "msg_") || e.Timestamp.IsZero() ||
		e.Data.NotificationID != r.ID || e.Data.OrderID != o.ID || e.Data.Template != "payment-reminder" ||
		e.Data.Status != sekali.StatusCancelled || e.Data.IdempotencyKey != r.IdempotencyKey || e.Data.OrderReference != "TA-3003" ||
		e.Data.Recipient != "ana@example.com" {
		t.Errorf("event = %+v, want the reminder %s of order %s (TA-3003) to ana@example.com, cancelled", e, r.ID, o.ID)
	}
}

// webhookEventSchema is api/openapi.yaml's WebhookEvent.
func webhookEventSchema(t *testing.T) *openapi3.Schema {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatal(err)
	}
	return doc.Components.Schemas["WebhookEvent"].Value
}

// The constants name every value of the document's enums, no more.
func TestConstantsAreTheDocumentsEnums(t *testing.T) {
	t.Parallel()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	enum := func(schema string) []string {
		s := doc.Components.Schemas[schema].Value
		if schema == "Problem" {
			s = s.Properties["type"].Value
		}
		var out []string
		for _, v := range s.Enum {
			out = append(out, v.(string))
		}
		slices.Sort(out)
		return out
	}
	strs := func(vs ...string) []string { slices.Sort(vs); return vs }
	problems := []sekali.ProblemType{sekali.ProblemInvalidBody, sekali.ProblemInvalidIdempotencyKey, sekali.ProblemBodyTooLarge,
		sekali.ProblemBodyTimeout, sekali.ProblemUnsupportedMediaType, sekali.ProblemValidation, sekali.ProblemIdempotencyKeyReused,
		sekali.ProblemIdempotencyKeyInFlight, sekali.ProblemOrderReferenceTaken, sekali.ProblemNotFound, sekali.ProblemInvalidQuery, sekali.ProblemMethodNotAllowed,
		sekali.ProblemInternal, sekali.ProblemUnauthorized, sekali.ProblemForbidden, sekali.ProblemRateLimited, sekali.ProblemWrongState,
		sekali.ProblemMayHaveBeenSent, sekali.ProblemNotificationConflict, sekali.ProblemUnknownMessage, sekali.ProblemOverloaded,
		sekali.ProblemQuotaUnavailable}
	var ps []string
	for _, p := range problems {
		ps = append(ps, string(p))
	}
	events := []sekali.EventType{sekali.EventSent, sekali.EventFailed, sekali.EventHeld, sekali.EventSuppressed,
		sekali.EventCancelled, sekali.EventDelivered, sekali.EventBounced, sekali.EventComplained}
	var es []string
	for _, e := range events {
		es = append(es, string(e))
	}
	statuses := []sekali.DeliveryStatus{sekali.StatusPending, sekali.StatusSending, sekali.StatusSent, sekali.StatusFailed,
		sekali.StatusHeld, sekali.StatusSuppressed, sekali.StatusCancelled}
	var ss []string
	for _, s := range statuses {
		ss = append(ss, string(s))
	}
	var rs []string
	for _, r := range []sekali.ProviderEvent{sekali.ProviderDelivered, sekali.ProviderDeferred, sekali.ProviderBounced, sekali.ProviderComplained} {
		rs = append(rs, string(r))
	}
	for _, tt := range []struct {
		schema string
		consts []string
	}{{"Problem", strs(ps...)}, {"WebhookEventType", strs(es...)}, {"DeliveryStatus", strs(ss...)}, {"ProviderEvent", strs(rs...)}} {
		if want := enum(tt.schema); !slices.Equal(tt.consts, want) {
			t.Errorf("the constants of %s = %q\nthe document's enum = %q", tt.schema, tt.consts, want)
		}
	}
}

// An answer that is no problem document (a load balancer's 502 page, a
// stand-in for what is outside the system) is a *Problem of no type with
// its status, retried as a 5xx is; a context that ends stops the retries.
func TestLoadBalancerErrorsAreRetriedUntilTheContextEnds(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var calls int
	var cancel context.CancelFunc
	lb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		if cancel != nil && calls == 2 {
			cancel()
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, "<html><body>502 Bad Gateway</body></html>")
	}))
	t.Cleanup(lb.Close)
	c := newClient(t, lb.URL, sekali.WithRetry(3, time.Second))

	_, err := c.GetOrder(t.Context(), uuid.New())
	var p *sekali.Problem
	if !errors.As(err, &p) || p.Type != "" || p.Status != http.StatusBadGateway || !strings.Contains(p.Detail, "502 Bad Gateway") {
		t.Errorf("err = %#v, want a *Problem of no type, 502, with the page's start", err)
	}
	mu.Lock()
	if calls != 3 {
		t.Errorf("%d requests, want 3 (WithRetry)", calls)
	}
	calls = 0
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	cancel = stop
	mu.Unlock()
	_, err = c.GetOrder(ctx, uuid.New())
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 2 {
		t.Errorf("%d requests, want 2: none after the context ended", calls)
	}
}

// docs/client.md shows Example_shopBackend as it is compiled.
func TestTheDocsShowTheExample(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, body, found := strings.Cut(string(src), "func Example_shopBackend() {\n")
	body, ends := strings.CutSuffix(body, "}\n")
	if !found || !ends {
		t.Fatal("example_test.go has no Example_shopBackend ending the file")
	}
	lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "\t")
	}
	want := "```go\n" + strings.Join(lines, "\n") + "\n```\n"
	doc, err := os.ReadFile("docs/client.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), want) {
		t.Errorf("docs/client.md does not show Example_shopBackend as it is; its block must read:\n%s", want)
	}
}

// Example_shopBackend, the code docs/client.md shows, runs against the
// real API: it places the cart's order once, schedules the reminder and
// cancels it, reads it back, and its webhook handler takes a signed
// event and refuses an unsigned one.
func TestTheExampleRuns(t *testing.T) {
	s := setup(t)
	_, key := s.newKey(t, apikey.ScopeCheckout, apikey.ScopeOrdersRead, apikey.ScopeNotificationsWrite)
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("the example's endpoint secret 32"))
	t.Setenv("SEKALI_URL", s.url)
	t.Setenv("SEKALI_API_KEY", key)
	t.Setenv("SEKALI_WEBHOOK_SECRET", secret)
	var logged strings.Builder
	log.SetOutput(&logged)
	log.SetFlags(0)
	defer func() { log.SetOutput(os.Stderr); log.SetFlags(log.LstdFlags) }()

	Example_shopBackend() // log.Fatal on any error: the test binary exits 1
	var status string
	if err := s.db.Pool.QueryRow(t.Context(), `SELECT d.status FROM notification_deliveries d
		WHERE d.template = 'payment-reminder'`).Scan(&status); err != nil || status != "cancelled" || s.orders(t) != 1 {
		t.Errorf("after the example: %d orders, its reminder %q (%v); want one order and the reminder cancelled", s.orders(t), status, err)
	}
	if !strings.Contains(logged.String(), "the reminder to ana@example.com is cancelled") {
		t.Errorf("the example logged %q, want its reminder read back, cancelled", logged.String())
	}

	// Its webhook handler, on http.DefaultServeMux.
	body := []byte(`{"type":"notification.bounced","timestamp":"2026-12-07T07:08:09.000000Z","data":{"notification_id":"` + uuid.NewString() +
		`","order_id":"` + uuid.NewString() + `","template":"order-confirmation","recipient":"ana@example.com","idempotency_key":"k","status":"sent","reason":"550 5.1.1 no such user"}}`)
	post := func(sign bool) int {
		req := httptest.NewRequest(http.MethodPost, "/hooks/sekali", strings.NewReader(string(body)))
		now := time.Now()
		req.Header.Set("webhook-id", "msg_1")
		req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		if sign {
			sig, err := webhookout.Sign(secret, "msg_1", now, body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("webhook-signature", sig)
		}
		rec := httptest.NewRecorder()
		http.DefaultServeMux.ServeHTTP(rec, req)
		return rec.Code
	}
	if code := post(true); code != http.StatusNoContent || !strings.Contains(logged.String(), "did not reach ana@example.com: 550 5.1.1 no such user") {
		t.Errorf("a signed bounce: %d, logged %q; want 204 and the bounce logged with its recipient", code, logged.String())
	}
	if code := post(false); code != http.StatusUnauthorized {
		t.Errorf("an unsigned event: %d, want 401", code)
	}
}
