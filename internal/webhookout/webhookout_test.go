package webhookout_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/notify/notifytest"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/testenv"
	"github.com/sekali-dev/sekali/internal/webhookout"
)

// loopback lets the tests' receivers, on 127.0.0.1, be endpoints.
var loopback = &webhookout.Guard{AllowHTTP: true, Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}

// receiver is an endpoint that records what it is sent and answers with
// the statuses of answers, one a request, then 200.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	requests []request
	answers  []int
}

type request struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T, answers ...int) *receiver {
	r := &receiver{answers: answers}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.requests = append(r.requests, request{header: req.Header.Clone(), body: body})
		status := http.StatusOK
		if len(r.answers) > 0 {
			status, r.answers = r.answers[0], r.answers[1:]
		}
		r.mu.Unlock()
		if status == http.StatusFound {
			http.Redirect(w, req, "http://127.0.0.1:1/elsewhere", status)
			return
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) got() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]request(nil), r.requests...)
}

// nowhere is an enqueuer that queues nothing: the tests drive deliveries
// through notifytest.
type nowhere struct{}

func (nowhere) EnqueueAfterCommit(context.Context, []notify.Delivery) {}

type env struct {
	db  testenv.DB
	f   *notifytest.Factory
	svc *webhookout.Service
	d   *webhookout.Dispatcher
	reg *prometheus.Registry
}

func setup(t *testing.T, cfg webhookout.Config) *env {
	t.Helper()
	db := testenv.NewDB(t)
	if cfg.Guard == nil {
		cfg.Guard = loopback
	}
	cfg.RetryBase = 10 * time.Millisecond
	reg := prometheus.NewRegistry()
	return &env{db: db, f: notifytest.New(t, db.Pool), svc: webhookout.NewService(db.Pool, loopback),
		d: webhookout.NewDispatcher(db.Pool, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), reg), reg: reg}
}

// delivery places an order and returns its confirmation, pending.
func (e *env) delivery(t *testing.T, email string) notify.Delivery {
	t.Helper()
	price := int64(4500000)
	o, err := order.NewService(e.db.Pool, nowhere{}, nil, time.Hour, prometheus.NewRegistry()).Place(context.Background(), order.Checkout{
		CustomerEmail: email, CustomerName: "Ana", Currency: "IDR",
		Items: []order.CheckoutItem{{SKU: "TEA", Name: "Teh", Quantity: 1, UnitPrice: &price}},
	}, order.Caller{}, "")
	if err != nil {
		t.Fatal(err)
	}
	return e.f.Get(o.Notifications[0].ID)
}

func (e *env) endpoint(t *testing.T, url string, types ...string) (webhookout.Endpoint, string) {
	t.Helper()
	ep, secret, err := e.svc.Create(context.Background(), "test", url, types, "")
	if err != nil {
		t.Fatal(err)
	}
	return ep, secret
}

// drain runs passes until no message of the first endpoint waits, for
// at most 10 s.
func (e *env) drain(t *testing.T) {
	t.Helper()
	eps, err := e.svc.List(context.Background())
	if err != nil || len(eps) == 0 {
		t.Fatalf("no endpoint: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := e.d.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, msgs, err := e.svc.Get(context.Background(), eps[0].ID, 100, nil); err != nil || !pending(msgs) {
			return
		}
	}
}

func pending(msgs []webhookout.Message) bool {
	for _, m := range msgs {
		if m.DeliveredAt == nil && m.GaveUpAt == nil {
			return true
		}
	}
	return false
}

// A sent notification reaches the endpoint once, signed as Standard
// Webhooks says: the specification's own library verifies it. The event
// names the notification, its order, template, recipient and key, never
// the body.
func TestEventIsSignedAndDeliveredOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, webhookout.Config{})
	rcv := newReceiver(t)
	_, secret := e.endpoint(t, rcv.URL+"/hooks", "notification.sent")
	d := e.f.Sent(e.delivery(t, "ana@example.com"), "provider-1")
	e.drain(t)
	got := rcv.got()
	if len(got) != 1 {
		t.Fatalf("%d requests, want 1", len(got))
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(got[0].body, got[0].header); err != nil {
		t.Errorf("the library does not verify our signature: %v\nheaders %v", err, got[0].header)
	}
	var ev struct {
		Type string `json:"type"`
		Data struct {
			NotificationID    string `json:"notification_id"`
			OrderID           string `json:"order_id"`
			Template          string `json:"template"`
			Recipient         string `json:"recipient"`
			IdempotencyKey    string `json:"idempotency_key"`
			Status            string `json:"status"`
			ProviderMessageID string `json:"provider_message_id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(got[0].body, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Type != "notification.sent" || ev.Data.NotificationID != d.ID.String() || ev.Data.OrderID != d.OrderID.String() ||
		ev.Data.Template != "order-confirmation" || ev.Data.Recipient != "ana@example.com" ||
		ev.Data.IdempotencyKey != d.IdempotencyKey || ev.Data.Status != "sent" ||
		ev.Data.ProviderMessageID != "provider-1" {
		t.Errorf("event %s", got[0].body)
	}
	if strings.Contains(string(got[0].body), "Teh") {
		t.Errorf("the event carries the template data: %s", got[0].body)
	}
	if strings.Contains(string(got[0].body), "order_reference") {
		t.Errorf("the event of an order without a number has one: %s", got[0].body)
	}
	if n := testenv.Metric(t, e.reg, "sekali_webhook_deliveries_total", "result", "delivered"); n != 1 {
		t.Errorf("delivered counter = %v", n)
	}
}

// Only the types an endpoint asked for, and nothing to a disabled one;
// the messages are written with the transition, or not at all.
func TestTypesAndDisabledEndpoints(t *testing.T) {
	t.Parallel()
	e := setup(t, webhookout.Config{})
	failedOnly, _ := e.endpoint(t, newReceiver(t).URL, "notification.failed")
	every, _ := e.endpoint(t, newReceiver(t).URL)
	off, _ := e.endpoint(t, newReceiver(t).URL)
	if _, err := e.svc.SetEnabled(context.Background(), "test", off.ID, false, "maintenance"); err != nil {
		t.Fatal(err)
	}
	e.f.Sent(e.delivery(t, "ana@example.com"), "p")
	d := e.delivery(t, "budi@example.com")
	if _, err := notify.Cancel(context.Background(), e.db.Pool, d.ID, notify.Canceller{Actor: "api", Operator: true}, "paid"); err != nil {
		t.Fatal(err)
	}
	if _, err := notify.RecordFeedback(context.Background(), e.db.Pool, mail.Feedback{Provider: "resend", EventID: "ev-1",
		Kind: mail.FeedbackDelivered, ProviderMessageID: "p", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	types := func(id uuid.UUID) []string {
		_, msgs, err := e.svc.Get(context.Background(), id, 100, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range msgs {
			out = append(out, m.EventType)
		}
		return out
	}
	if got := types(failedOnly.ID); len(got) != 0 {
		t.Errorf("the failed-only endpoint got %v", got)
	}
	if got := strings.Join(types(every.ID), " "); got != "notification.delivered notification.cancelled notification.sent" {
		t.Errorf("the endpoint of every type got %q (newest first)", got)
	}
	if got := types(off.ID); len(got) != 0 {
		t.Errorf("the disabled endpoint got %v", got)
	}
}

// A receiver that fails gets the same message again, under the same
// webhook-id, until it takes it; one that answers 410 Gone disables its
// endpoint; a message past WEBHOOK_MAX_AGE is given up.
func TestRetriesGoneAndGivingUp(t *testing.T) {
	t.Parallel()
	e := setup(t, webhookout.Config{})
	flaky := newReceiver(t, 503, 500)
	_, _ = e.endpoint(t, flaky.URL, "notification.sent")
	e.f.Sent(e.delivery(t, "ana@example.com"), "p")
	e.drain(t)
	got := flaky.got()
	if len(got) != 3 || got[0].header.Get("webhook-id") != got[2].header.Get("webhook-id") || got[0].header.Get("webhook-id") == "" {
		t.Fatalf("%d requests (ids %q, %q), want 3 under one id", len(got), got[0].header.Get("webhook-id"), got[len(got)-1].header.Get("webhook-id"))
	}

	e2 := setup(t, webhookout.Config{})
	gone := newReceiver(t, http.StatusGone)
	ep, _ := e2.endpoint(t, gone.URL, "notification.sent")
	e2.f.Sent(e2.delivery(t, "ana@example.com"), "p")
	if _, err := e2.d.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	after, _, err := e2.svc.Get(context.Background(), ep.ID, 10, nil)
	if err != nil || after.DisabledAt == nil || !strings.Contains(after.DisabledReason, "410") {
		t.Errorf("after a 410 the endpoint is %+v, %v; want disabled", after, err)
	}

	e3 := setup(t, webhookout.Config{MaxAge: time.Nanosecond})
	down := newReceiver(t, 503, 503, 503)
	ep3, _ := e3.endpoint(t, down.URL, "notification.sent")
	e3.f.Sent(e3.delivery(t, "ana@example.com"), "p")
	time.Sleep(10 * time.Millisecond)
	for range 3 {
		if _, err := e3.d.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond)
	}
	_, msgs, _ := e3.svc.Get(context.Background(), ep3.ID, 10, nil)
	if len(down.got()) != 1 || len(msgs) != 1 || msgs[0].GaveUpAt == nil {
		t.Errorf("past the max age: %d requests, messages %+v; want one attempt, given up", len(down.got()), msgs)
	}
}

// A redirect is not followed; during a rotation both secrets sign, and
// the library verifies with either.
func TestRedirectsAndRotation(t *testing.T) {
	t.Parallel()
	e := setup(t, webhookout.Config{})
	rcv := newReceiver(t, http.StatusFound)
	ep, old := e.endpoint(t, rcv.URL, "notification.sent")
	_, fresh, err := e.svc.Rotate(context.Background(), "test", ep.ID)
	if err != nil || fresh == old {
		t.Fatalf("Rotate: %v", err)
	}
	e.f.Sent(e.delivery(t, "ana@example.com"), "p")
	e.drain(t)
	got := rcv.got()
	if len(got) != 2 {
		t.Fatalf("%d requests, want the redirect refused then the retry taken", len(got))
	}
	for _, s := range []string{old, fresh} {
		wh, _ := standardwebhooks.NewWebhook(s)
		if err := wh.Verify(got[1].body, got[1].header); err != nil {
			t.Errorf("not verified with one of the two secrets during the rotation: %v", err)
		}
	}
}

// The guard: https only (http when allowed), no credentials in the URL,
// and no private, loopback or link-local address unless allowed, at
// registration and again when connecting.
func TestGuard(t *testing.T) {
	t.Parallel()
	strict := &webhookout.Guard{}
	for _, u := range []string{"http://example.com/hook", "https://127.0.0.1/hook", "https://10.1.2.3/hook",
		"https://169.254.169.254/latest", "https://[::1]/hook", "https://localhost/hook", "https://user:pw@example.com/",
		"ftp://example.com/", "https:///nohost", "https://192.168.1.1/"} {
		if err := strict.CheckURL(context.Background(), u); err == nil {
			t.Errorf("%s was accepted", u)
		}
	}
	if err := strict.CheckURL(context.Background(), "https://127.0.0.1/hook"); !errors.Is(err, webhookout.ErrForbiddenAddress) {
		t.Errorf("loopback: %v, want ErrForbiddenAddress", err)
	}
	if err := loopback.CheckURL(context.Background(), "http://127.0.0.1:9/hook"); err != nil {
		t.Errorf("an allowed range: %v", err)
	}
	// Addresses that are nobody's public endpoint, and the IPv6 forms
	// (NAT64, 6to4) of private IPv4 addresses, which reach them.
	for _, host := range []string{"0.1.2.3", "198.18.0.1", "240.0.0.1", "192.0.2.10", "100.64.1.1",
		"[64:ff9b::a00:1]", "[64:ff9b::a9fe:a9fe]", "[2002:7f00:1::1]", "[64:ff9b:1::1]", "[::a00:1]",
		"[2001:0:4136:e378:8000:63bf:3fff:fdd2]", "[2001:db8::1]"} {
		if err := strict.CheckURL(context.Background(), "https://"+host+"/hook"); !errors.Is(err, webhookout.ErrForbiddenAddress) {
			t.Errorf("%s: %v, want ErrForbiddenAddress", host, err)
		}
	}
	// Public addresses, in IPv4 and through NAT64 and 6to4, are fine.
	for _, host := range []string{"1.1.1.1", "[64:ff9b::101:101]", "[2002:101:101::1]", "[2606:4700::1111]"} {
		if err := strict.CheckURL(context.Background(), "https://"+host+"/hook"); err != nil {
			t.Errorf("%s: %v, want accepted", host, err)
		}
	}

	// Registered while allowed, refused at connect time by a stricter
	// dispatcher: nothing reaches the receiver.
	e := setup(t, webhookout.Config{Guard: &webhookout.Guard{AllowHTTP: true}})
	rcv := newReceiver(t)
	ep, _ := e.endpoint(t, rcv.URL, "notification.sent")
	e.f.Sent(e.delivery(t, "ana@example.com"), "p")
	if _, err := e.d.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, msgs, _ := e.svc.Get(context.Background(), ep.ID, 10, nil)
	if len(rcv.got()) != 0 || len(msgs) != 1 || !strings.Contains(msgs[0].LastError, "does not post to") {
		t.Errorf("a loopback receiver behind a strict guard: %d requests, messages %+v", len(rcv.got()), msgs)
	}
}

// A failure is recorded only against the attempt that failed: the late
// answer of an attempt another dispatcher has since made again, or that
// a later attempt delivered, changes nothing (no shortened lease, no
// "given up" on a delivered message).
func TestLateFailureChangesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t, webhookout.Config{})
	ctx := context.Background()
	rcv := newReceiver(t)
	ep, _ := e.endpoint(t, rcv.URL, "notification.sent")
	e.f.Sent(e.delivery(t, "ana@example.com"), "p")
	q := dbsqlc.New(e.db.Pool)
	claim := func() dbsqlc.ClaimWebhookMessagesRow {
		t.Helper()
		msgs, err := q.ClaimWebhookMessages(ctx, dbsqlc.ClaimWebhookMessagesParams{Batch: 10, LeaseSeconds: -1}) // due again at once
		if err != nil || len(msgs) != 1 {
			t.Fatalf("claim: %d messages, %v", len(msgs), err)
		}
		return msgs[0]
	}
	first, second := claim(), claim()
	failed := func(m dbsqlc.ClaimWebhookMessagesRow) {
		t.Helper()
		if _, err := q.MarkWebhookFailed(ctx, dbsqlc.MarkWebhookFailedParams{ID: m.ID, Attempts: m.Attempts, LastError: "late",
			NextAttemptAt: time.Now().Add(time.Hour), MaxAgeSeconds: 0}); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
	}
	failed(first) // the first attempt's answer comes after the second began
	if err := q.MarkWebhookDelivered(ctx, dbsqlc.MarkWebhookDeliveredParams{ID: second.ID, Status: http.StatusOK}); err != nil {
		t.Fatal(err)
	}
	failed(second) // and a failure recorded after the delivery
	_, msgs, err := e.svc.Get(ctx, ep.ID, 10, nil)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("%d messages, %v", len(msgs), err)
	}
	if m := msgs[0]; m.DeliveredAt == nil || m.GaveUpAt != nil || m.LastError != "" {
		t.Errorf("after late failures: delivered %v, given up %v, last error %q; want delivered, nothing else", m.DeliveredAt, m.GaveUpAt, m.LastError)
	}
}

// A replay of an event older than WEBHOOK_MAX_AGE gets the whole of
// WEBHOOK_MAX_AGE to arrive, counted from the replay: the shop's endpoint
// fails a few times after the replay, then takes it, and the message is
// delivered, not given up after its first failure.
func TestReplayOfAnOldEventIsRetriedFromTheReplay(t *testing.T) {
	t.Parallel()
	e := setup(t, webhookout.Config{MaxAge: time.Hour})
	ctx := context.Background()
	// The first request takes the event; the replay's first three fail.
	rcv := newReceiver(t, http.StatusOK, http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusServiceUnavailable)
	ep, _ := e.endpoint(t, rcv.URL, "notification.sent")
	e.f.Sent(e.delivery(t, "ana@example.com"), "p")
	e.drain(t)
	// Two hours pass: the event is older than WEBHOOK_MAX_AGE. Time is
	// the one thing the statements take from the clock, so the test moves
	// the message's by hand.
	if _, err := e.db.Pool.Exec(ctx, `UPDATE webhook_messages SET created_at = created_at - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	_, msgs, err := e.svc.Get(ctx, ep.ID, 10, nil)
	if err != nil || len(msgs) != 1 || msgs[0].DeliveredAt == nil {
		t.Fatalf("before the replay: %+v, %v; want one message, delivered", msgs, err)
	}
	if n, err := e.svc.Replay(ctx, "test", ep.ID, msgs[0].MsgID, time.Time{}, time.Time{}); err != nil || n != 1 {
		t.Fatalf("replay: %d, %v", n, err)
	}
	e.drain(t)
	got := rcv.got()
	_, msgs, err = e.svc.Get(ctx, ep.ID, 10, nil)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("after the replay: %+v, %v", msgs, err)
	}
	if len(got) != 5 || msgs[0].DeliveredAt == nil || msgs[0].GaveUpAt != nil {
		t.Errorf("after the replay: %d requests, delivered %v, given up %v; want the first, three failures and the delivery, not given up",
			len(got), msgs[0].DeliveredAt, msgs[0].GaveUpAt)
	}
	for i, r := range got {
		if r.header.Get("webhook-id") != msgs[0].MsgID {
			t.Errorf("request %d under webhook-id %q, want %q", i, r.header.Get("webhook-id"), msgs[0].MsgID)
		}
	}
	if n := testenv.Metric(t, e.reg, "sekali_webhook_deliveries_total", "result", "gave_up"); n != 0 {
		t.Errorf("gave_up counter = %v, want 0", n)
	}
	if n := testenv.Metric(t, e.reg, "sekali_webhook_deliveries_total", "result", "failed"); n != 3 {
		t.Errorf("failed counter = %v, want 3", n)
	}
}

// What the receiver answered is kept with each message for the
// operators: its status and the start of its body, on one line, when it
// refused; its status when it took it (the refusal's reason cleared);
// no status, and why, when it did not answer at all.
func TestTheReceiversAnswersAreKept(t *testing.T) {
	t.Parallel()
	e := setup(t, webhookout.Config{})
	var mu sync.Mutex
	calls := 0
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "down for\n maintenance\t until 10:00 "+strings.Repeat("x", 500))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rcv.Close)
	ep, _ := e.endpoint(t, rcv.URL, "notification.sent")
	e.f.Sent(e.delivery(t, "ana@example.com"), "p")
	ctx := context.Background()
	if _, err := e.d.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	_, msgs, err := e.svc.Get(ctx, ep.ID, 10, nil)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("%+v, %v; want one message", msgs, err)
	}
	m := msgs[0]
	if m.LastStatus != http.StatusServiceUnavailable || !strings.HasPrefix(m.LastError, "answered 503: down for maintenance until 10:00 xxx") ||
		len(m.LastError) > 250 || m.LastAttemptAt == nil || m.Attempts != 1 || m.DeliveredAt != nil {
		t.Errorf("after a refusal: status %d, error %q, last attempt %v, %d attempts; want 503, its answer on one line and cut, now, 1",
			m.LastStatus, m.LastError, m.LastAttemptAt, m.Attempts)
	}
	e.drain(t)
	if _, msgs, err = e.svc.Get(ctx, ep.ID, 10, nil); err != nil || len(msgs) != 1 {
		t.Fatalf("%+v, %v; want one message", msgs, err)
	}
	if m := msgs[0]; m.LastStatus != http.StatusNoContent || m.LastError != "" || m.DeliveredAt == nil || m.Attempts != 2 {
		t.Errorf("once taken: status %d, error %q, delivered %v, %d attempts; want 204, none, delivered, 2", m.LastStatus, m.LastError, m.DeliveredAt, m.Attempts)
	}

	// A receiver that is not there answers nothing.
	e2 := setup(t, webhookout.Config{})
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	ep2, _ := e2.endpoint(t, closed.URL, "notification.sent")
	e2.f.Sent(e2.delivery(t, "ana@example.com"), "p")
	if _, err := e2.d.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if _, msgs, err = e2.svc.Get(ctx, ep2.ID, 10, nil); err != nil || len(msgs) != 1 {
		t.Fatalf("%+v, %v; want one message", msgs, err)
	}
	if m := msgs[0]; m.LastStatus != 0 || !strings.Contains(m.LastError, "connect") || m.LastAttemptAt == nil {
		t.Errorf("no answer: status %d, error %q, last attempt %v; want none, why, when", m.LastStatus, m.LastError, m.LastAttemptAt)
	}
}

// The messages of test notifications are told from live ones, and listed
// apart on request.
func TestTestAndLiveMessagesApart(t *testing.T) {
	t.Parallel()
	e := setup(t, webhookout.Config{})
	ep, _ := e.endpoint(t, newReceiver(t).URL, "notification.sent")
	e.f.Sent(e.delivery(t, "ana@example.com"), "p")
	test := e.f.Get(e.delivery(t, "budi@example.com").ID)
	// The factory places live orders; this one is made a test key's, on
	// purpose, as a test key's checkout would have recorded it.
	if _, err := e.db.Pool.Exec(context.Background(), `UPDATE notification_deliveries SET test = true WHERE id = $1`, test.ID); err != nil {
		t.Fatal(err)
	}
	e.f.Sent(test, "p2")
	ctx := context.Background()
	for _, c := range []struct {
		test *bool
		want string
	}{{nil, "test live"}, {new(true), "test"}, {new(false), "live"}} {
		_, msgs, err := e.svc.Get(ctx, ep.ID, 10, c.test)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range msgs {
			got = append(got, map[bool]string{true: "test", false: "live"}[m.Test])
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("test %v: %v, want %s (newest first)", c.test, got, c.want)
		}
	}
}
