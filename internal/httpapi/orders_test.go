package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"

	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/queue"
)

const validCheckout = `{
	"customer_email": "  Ana.Maria@Example.COM ",
	"customer_name": "Ana Maria",
	"currency": "IDR",
	"items": [
		{"sku": "TEA-01", "name": "Teh melati 250 g", "quantity": 2, "unit_price": 4500000},
		{"sku": "CUP-02", "name": "Cangkir", "quantity": 1, "unit_price": 12500050}
	]
}`

func TestCheckoutRecordsOrderAndIntentAndEnqueuesOnce(t *testing.T) {
	t.Parallel()
	s := setup(t)

	res := s.postOrder(t, validCheckout, nil)
	if res.status != http.StatusCreated {
		t.Fatalf("POST /v1/orders = %d %s", res.status, res.body)
	}
	var o order.Order
	res.decode(t, &o)

	if o.CustomerEmail != "ana.maria@example.com" {
		t.Errorf("customer_email = %q, want it trimmed and lower-cased", o.CustomerEmail)
	}
	if o.Total != 2*4500000+12500050 {
		t.Errorf("total = %d", o.Total)
	}
	if len(o.Items) != 2 || o.Items[0].LineTotal != 9000000 {
		t.Errorf("items = %+v", o.Items)
	}
	if got := res.header.Get("Location"); got != "/v1/orders/"+o.ID.String() {
		t.Errorf("Location = %q", got)
	}
	if len(o.Notifications) != 1 {
		t.Fatalf("notifications = %+v, want one", o.Notifications)
	}
	n := o.Notifications[0]
	wantKey := "order-confirmation:" + o.ID.String() + ":ana.maria@example.com"
	if n.Template != "order-confirmation" || n.IdempotencyKey != wantKey || n.Status != "pending" {
		t.Errorf("notification = %+v, want template order-confirmation, key %q, status pending", n, wantKey)
	}

	// The rows are there, committed together.
	if got := s.count(t, "orders"); got != 1 {
		t.Errorf("orders = %d", got)
	}
	if got := s.count(t, "order_items"); got != 2 {
		t.Errorf("order_items = %d", got)
	}
	var status, key, recipient string
	var data []byte
	err := s.db.Pool.QueryRow(context.Background(),
		"SELECT status, idempotency_key, recipient, template_data FROM notification_deliveries WHERE id = $1", n.ID).
		Scan(&status, &key, &recipient, &data)
	if err != nil {
		t.Fatal(err)
	}
	if status != "pending" || key != wantKey || recipient != "ana.maria@example.com" {
		t.Errorf("delivery row = %s %s %s", status, key, recipient)
	}
	var snapshot struct {
		OrderID uuid.UUID `json:"order_id"`
		Total   int64     `json:"total"`
		Items   []any     `json:"items"`
	}
	if err := json.Unmarshal(data, &snapshot); err != nil || snapshot.OrderID != o.ID || snapshot.Total != o.Total || len(snapshot.Items) != 2 {
		t.Errorf("template_data = %s (%v), want the order snapshot", data, err)
	}

	// The task is queued under an id derived from the delivery, and carries
	// no e-mail address.
	info, err := s.inspector.GetTaskInfo(s.redis.Queue, queue.TaskID(n.ID))
	if err != nil {
		t.Fatalf("task for delivery %s: %v", n.ID, err)
	}
	if info.Type != queue.TaskTypeDeliver || strings.Contains(string(info.Payload), "@") {
		t.Errorf("task = %s %s", info.Type, info.Payload)
	}
	if info.Retention != 0 {
		t.Errorf("task retention = %v, want none: a finished task leaves nothing in Redis", info.Retention)
	}
	// A second enqueue of the same delivery, while its task waits, is
	// refused by asynq itself.
	client := asynq.NewClient(s.redis.Opt)
	defer client.Close()
	_, err = client.Enqueue(queue.NewDeliverTask(notify.Delivery{ID: n.ID, IdempotencyKey: n.IdempotencyKey}),
		asynq.TaskID(queue.TaskID(n.ID)), asynq.Queue(s.redis.Queue))
	if err == nil || !strings.Contains(err.Error(), asynq.ErrTaskIDConflict.Error()) {
		t.Errorf("second enqueue err = %v, want a task id conflict", err)
	}

	// GET shows the same order, without its access token (only the
	// checkout that created it answers with that).
	got := s.do(t, http.MethodGet, "/v1/orders/"+o.ID.String(), "", nil, nil)
	if got.status != http.StatusOK {
		t.Fatalf("GET = %d %s", got.status, got.body)
	}
	var posted map[string]json.RawMessage
	res.decode(t, &posted)
	if !strings.HasPrefix(o.AccessToken, order.AccessTokenPrefix) {
		t.Errorf("access_token %q", o.AccessToken)
	}
	delete(posted, "access_token")
	want, _ := json.Marshal(posted)
	var fetched map[string]json.RawMessage
	got.decode(t, &fetched)
	if have, _ := json.Marshal(fetched); string(have) != string(want) {
		t.Errorf("GET body\n%s\ndiffers from the POST body\n%s", have, want)
	}
}

// The shop's order number: the checkout takes it, the order shows it, a
// second checkout of the owner with it is a 409 that names the order
// that has it and records nothing, and its retry under the first's
// Idempotency-Key is the first answer.
func TestCheckoutWithTheShopsOrderNumber(t *testing.T) {
	t.Parallel()
	s := setup(t)
	numbered := strings.Replace(validCheckout, `"currency": "IDR",`, `"currency": "IDR", "reference": " TA-2026-0042 ",`, 1)
	key := map[string]string{"Idempotency-Key": "cart-42"}
	res := s.postOrder(t, numbered, key)
	if res.status != http.StatusCreated {
		t.Fatalf("POST /v1/orders = %d %s", res.status, res.body)
	}
	var o order.Order
	res.decode(t, &o)
	if o.Reference != "TA-2026-0042" {
		t.Errorf("reference = %q, want it trimmed", o.Reference)
	}
	var got order.Order
	s.do(t, http.MethodGet, "/v1/orders/"+o.ID.String(), "", nil, nil).decode(t, &got)
	if got.Reference != "TA-2026-0042" {
		t.Errorf("GET: reference = %q", got.Reference)
	}
	if again := s.postOrder(t, numbered, key); again.status != http.StatusCreated || !bytes.Equal(again.body, res.body) {
		t.Errorf("the retry under its key = %d %s, want the first answer", again.status, again.body)
	}
	second := s.postOrder(t, strings.Replace(numbered, `"quantity": 2`, `"quantity": 5`, 1), nil)
	var p struct{ Type, Detail string }
	second.decode(t, &p)
	if second.status != http.StatusConflict || p.Type != "urn:sekali:problem:order-reference-taken" || !strings.Contains(p.Detail, o.ID.String()) {
		t.Errorf("a second order with the number = %d %s, want 409 order-reference-taken naming %s", second.status, second.body, o.ID)
	}
	if n := s.count(t, "orders"); n != 1 {
		t.Errorf("orders = %d, want 1", n)
	}
}

func TestGetUnknownOrder(t *testing.T) {
	t.Parallel()
	s := setup(t)
	for _, id := range []string{uuid.NewString(), "not-a-uuid"} {
		res := s.do(t, http.MethodGet, "/v1/orders/"+id, "", nil, nil)
		if res.status != http.StatusNotFound || res.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("GET /v1/orders/%s = %d %s %s", id, res.status, res.header.Get("Content-Type"), res.body)
		}
	}
}

// A failure between the inserts must leave nothing behind: not the order,
// not its items, not the intent.
func TestCheckoutIsAtomic(t *testing.T) {
	t.Parallel()
	for _, table := range []string{"order_items", "notification_deliveries"} {
		t.Run("failure inserting "+table, func(t *testing.T) {
			t.Parallel()
			s := setup(t)
			_, err := s.db.Pool.Exec(context.Background(), `
				CREATE FUNCTION fail_insert() RETURNS trigger LANGUAGE plpgsql AS
				$$ BEGIN RAISE EXCEPTION 'injected failure'; END $$;
				CREATE TRIGGER fail_insert BEFORE INSERT ON `+table+`
				FOR EACH ROW EXECUTE FUNCTION fail_insert();`)
			if err != nil {
				t.Fatal(err)
			}
			res := s.postOrder(t, validCheckout, map[string]string{"Idempotency-Key": "atomic-1"})
			if res.status != http.StatusInternalServerError {
				t.Fatalf("status = %d %s, want 500", res.status, res.body)
			}
			for _, tbl := range []string{"orders", "order_items", "notification_deliveries", "idempotency_keys"} {
				if n := s.count(t, tbl); n != 0 {
					t.Errorf("%s has %d rows after a failed checkout", tbl, n)
				}
			}
			if !strings.Contains(s.logs.String(), "injected failure") {
				t.Errorf("the cause is not in the request log:\n%s", s.logs)
			}
			if strings.Contains(string(res.body), "injected failure") {
				t.Errorf("the internal cause leaked to the client: %s", res.body)
			}
		})
	}
}

func TestEnqueueFailureStillAnswers201AndLeavesThePendingRow(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1: every enqueue fails.
	s := setup(t, setupOpts{redis: asynq.RedisClientOpt{Addr: "127.0.0.1:1"}})

	res := s.postOrder(t, validCheckout, nil)
	if res.status != http.StatusCreated {
		t.Fatalf("status = %d %s, want 201", res.status, res.body)
	}
	var o order.Order
	res.decode(t, &o)
	var status string
	if err := s.db.Pool.QueryRow(context.Background(),
		"SELECT status FROM notification_deliveries WHERE order_id = $1", o.ID).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status != "pending" {
		t.Errorf("delivery status = %q, want pending", status)
	}
	if got := s.counter(t, "sekali_enqueue_failures_total"); got != 1 {
		t.Errorf("sekali_enqueue_failures_total = %v, want 1", got)
	}
	if !strings.Contains(s.logs.String(), `"msg":"enqueue failed; delivery stays pending for the reconciler"`) {
		t.Errorf("no log line for the failed enqueue:\n%s", s.logs)
	}
	for _, line := range strings.Split(strings.TrimSpace(s.logs.String()), "\n") {
		if !strings.Contains(line, `"request_id":"`+res.header.Get("X-Request-Id")+`"`) {
			t.Errorf("a line of the request lacks its request_id: %s", line)
		}
	}
	if strings.Contains(s.logs.String(), "ana.maria@example.com") {
		t.Errorf("a log line carries the raw e-mail address:\n%s", s.logs)
	}
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	up := setup(t)
	if res := up.do(t, http.MethodGet, "/readyz", "", nil, nil); res.status != http.StatusOK {
		t.Errorf("readyz with everything up = %d %s", res.status, res.body)
	}
	if res := up.do(t, http.MethodGet, "/healthz", "", nil, nil); res.status != http.StatusOK {
		t.Errorf("healthz = %d", res.status)
	}
	// Anyone may ask, so the answer names the dependency that is not
	// ready and nothing of its error, which goes to the log once, not
	// once per probe.
	down := setup(t, setupOpts{redis: asynq.RedisClientOpt{Addr: "127.0.0.1:1"}})
	for range 3 {
		res := down.do(t, http.MethodGet, "/readyz", "", nil, nil)
		if want := `{"api":"ok","postgres":"ok","redis":"unavailable"}`; res.status != http.StatusServiceUnavailable || strings.TrimSpace(string(res.body)) != want {
			t.Errorf("readyz with Redis down = %d %s, want 503 %s", res.status, res.body, want)
		}
	}
	var lines []string
	for _, line := range strings.Split(down.logs.String(), "\n") {
		if strings.Contains(line, `"msg":"not ready"`) {
			lines = append(lines, line)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], `"check":"redis"`) || !strings.Contains(lines[0], "127.0.0.1:1") {
		t.Errorf("three probes with Redis down logged %d lines with its error, want 1:\n%s", len(lines), strings.Join(lines, "\n"))
	}
}

func TestRequestIDAndOneLogLinePerRequest(t *testing.T) {
	t.Parallel()
	s := setup(t)
	res := s.postOrder(t, validCheckout, map[string]string{"X-Request-Id": "req-abc.123"})
	if res.status != http.StatusCreated || res.header.Get("X-Request-Id") != "req-abc.123" {
		t.Fatalf("status %d, X-Request-Id %q", res.status, res.header.Get("X-Request-Id"))
	}
	bad := s.postOrder(t, `{`, map[string]string{"X-Request-Id": "bad id with spaces"})
	generated := bad.header.Get("X-Request-Id")
	if generated == "" || generated == "bad id with spaces" {
		t.Errorf("X-Request-Id = %q, want a fresh id instead of the unsafe one", generated)
	}
	var p struct {
		RequestID string `json:"request_id"`
	}
	bad.decode(t, &p)
	if p.RequestID != generated {
		t.Errorf("problem request_id = %q, header %q", p.RequestID, generated)
	}

	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", l)
		}
		if m["msg"] == "http request" {
			lines = append(lines, m)
		}
	}
	if len(lines) != 2 {
		t.Fatalf("%d request log lines, want 2:\n%s", len(lines), s.logs)
	}
	first := lines[0]
	if first["request_id"] != "req-abc.123" || first["route"] != "/v1/orders" || first["status"] != float64(201) || first["order_id"] == nil {
		t.Errorf("log line = %v", first)
	}
	if lines[1]["request_id"] != generated || lines[1]["status"] != float64(400) {
		t.Errorf("log line = %v", lines[1])
	}
}

func TestIdempotencyKeyReplaysTheFirstResponse(t *testing.T) {
	t.Parallel()
	s := setup(t)
	h := map[string]string{"Idempotency-Key": `"7d1f3a52-4d42-4bcb-9a3c-2f9f6f1b2a10"`}

	first := s.postOrder(t, validCheckout, h)
	if first.status != http.StatusCreated {
		t.Fatalf("first = %d %s", first.status, first.body)
	}
	// Same request, other whitespace: a retry of the same checkout.
	again := s.postOrder(t, strings.Join(strings.Fields(validCheckout), " "), h)
	if again.status != http.StatusCreated || string(again.body) != string(first.body) {
		t.Fatalf("replay = %d %s\nwant 201 %s", again.status, again.body, first.body)
	}
	if again.header.Get("Idempotent-Replayed") != "true" || first.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("Idempotent-Replayed: first %q, replay %q", first.header.Get("Idempotent-Replayed"), again.header.Get("Idempotent-Replayed"))
	}
	// What the key's record keeps is the first answer itself, its final
	// newline included: a replay writes it as stored.
	var stored []byte
	if err := s.db.Pool.QueryRow(t.Context(), "SELECT response_body FROM idempotency_keys").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, first.body) || !bytes.HasSuffix(first.body, []byte("}\n")) {
		t.Errorf("stored %q\nfirst answer %q", stored, first.body)
	}
	if n := s.count(t, "orders"); n != 1 {
		t.Errorf("orders = %d, want 1", n)
	}
	if n := s.count(t, "notification_deliveries"); n != 1 {
		t.Errorf("deliveries = %d, want 1", n)
	}
	if got := s.counter(t, "sekali_duplicate_detected_total", "layer", "api_idempotency"); got != 1 {
		t.Errorf("duplicate_detected_total{layer=api_idempotency} = %v, want 1", got)
	}

	// The same key for another basket is refused.
	other := s.postOrder(t, strings.Replace(validCheckout, `"quantity": 2`, `"quantity": 3`, 1), h)
	if other.status != http.StatusUnprocessableEntity || !strings.Contains(string(other.body), "idempotency-key-reused") {
		t.Errorf("reused key = %d %s, want 422 idempotency-key-reused", other.status, other.body)
	}
	if n := s.count(t, "orders"); n != 1 {
		t.Errorf("orders = %d after a reused key, want 1", n)
	}

	// A different key is a different checkout.
	fresh := s.postOrder(t, validCheckout, map[string]string{"Idempotency-Key": "another-key"})
	if fresh.status != http.StatusCreated || string(fresh.body) == string(first.body) {
		t.Errorf("other key = %d %s", fresh.status, fresh.body)
	}

	// Past its window the key is forgotten and starts afresh.
	if _, err := s.db.Pool.Exec(context.Background(), "UPDATE idempotency_keys SET expires_at = now() - interval '1 second'"); err != nil {
		t.Fatal(err)
	}
	expired := s.postOrder(t, validCheckout, h)
	if expired.status != http.StatusCreated || expired.header.Get("Idempotent-Replayed") != "" || string(expired.body) == string(first.body) {
		t.Errorf("after expiry = %d replayed=%q", expired.status, expired.header.Get("Idempotent-Replayed"))
	}
	if n := s.count(t, "orders"); n != 3 {
		t.Errorf("orders = %d, want 3", n)
	}
}

func TestIdempotencyKeyInFlightIs409(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	// Another request holds the key: take its lock the way the checkout does.
	tx, err := s.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(385697, hashtext('POST /v1/orders key:' || $1 || ' ' || 'busy-key'))", s.backendKeyID.String()); err != nil {
		t.Fatal(err)
	}
	res := s.postOrder(t, validCheckout, map[string]string{"Idempotency-Key": "busy-key"})
	if res.status != http.StatusConflict || !strings.Contains(string(res.body), "idempotency-key-in-flight") {
		t.Fatalf("while in flight = %d %s, want 409", res.status, res.body)
	}
	if got := s.counter(t, "sekali_idempotency_conflict_total", "reason", "in_flight"); got != 1 {
		t.Errorf("idempotency_conflict_total{in_flight} = %v", got)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if res := s.postOrder(t, validCheckout, map[string]string{"Idempotency-Key": "busy-key"}); res.status != http.StatusCreated {
		t.Errorf("after the first finished = %d %s", res.status, res.body)
	}
}

// A double-click, or a client retrying on timeout 50 times at once, never
// makes two orders: every answer is the one order or a 409.
func TestFiftyConcurrentRequestsWithOneKeyCreateOneOrder(t *testing.T) {
	t.Parallel()
	s := setup(t)
	const n = 50
	var wg sync.WaitGroup
	results := make([]response, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = s.send(http.MethodPost, "/v1/orders", "application/json", strings.NewReader(validCheckout),
				map[string]string{"Idempotency-Key": "double-click"})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}

	ids := map[uuid.UUID]bool{}
	created, conflicts := 0, 0
	for _, r := range results {
		switch r.status {
		case http.StatusCreated:
			created++
			var o order.Order
			r.decode(t, &o)
			ids[o.ID] = true
		case http.StatusConflict:
			conflicts++
		default:
			t.Errorf("unexpected answer %d %s", r.status, r.body)
		}
	}
	if created == 0 || len(ids) != 1 {
		t.Errorf("%d created answers naming %d distinct orders; want at least one, all the same order", created, len(ids))
	}
	if got := s.count(t, "orders"); got != 1 {
		t.Errorf("orders = %d, want 1", got)
	}
	if got := s.count(t, "notification_deliveries"); got != 1 {
		t.Errorf("deliveries = %d, want 1", got)
	}
	t.Logf("%d created/replayed, %d told to retry (409)", created, conflicts)
}
