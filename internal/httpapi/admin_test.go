package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/queue"
	"github.com/sekali-dev/sekali/internal/testenv"
)

func (s stack) admin(t *testing.T, method, path, body string) response {
	t.Helper()
	var rd *strings.Reader
	ct := ""
	if body != "" {
		rd, ct = strings.NewReader(body), "application/json"
	} else {
		rd = strings.NewReader("")
	}
	return s.do(t, method, path, ct, rd, map[string]string{"Authorization": "Bearer " + adminToken})
}

func TestAdminRefusesWithoutTheToken(t *testing.T) {
	t.Parallel()
	s := setup(t)
	for name, header := range map[string]map[string]string{
		"missing":      nil,
		"wrong":        {"Authorization": "Bearer not-the-token-at-all"},
		"wrong scheme": {"Authorization": "Basic " + adminToken},
		"prefix only":  {"Authorization": "Bearer " + adminToken[:10]},
	} {
		res := s.do(t, http.MethodPost, "/admin/v1/queue/pause", "", nil, header)
		if res.status != http.StatusUnauthorized || res.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s token: %d %s", name, res.status, res.body)
		}
	}
	// Nothing happened: the queue is not paused.
	res := s.admin(t, http.MethodGet, "/admin/v1/queue", "")
	if strings.Contains(string(res.body), `"paused":true`) {
		t.Errorf("an unauthenticated pause took effect: %s", res.body)
	}
}

func TestAdminLooksUpDeliveriesWithTheirHistory(t *testing.T) {
	t.Parallel()
	s := setup(t)
	res := s.postOrder(t, validCheckout, nil)
	var o order.Order
	res.decode(t, &o)
	n := o.Notifications[0]

	for _, q := range []string{"?order_id=" + o.ID.String(), "?key=" + n.IdempotencyKey, "?status=pending&template=order-confirmation"} {
		list := s.admin(t, http.MethodGet, "/admin/v1/deliveries"+strings.ReplaceAll(q, "+", "%2B"), "")
		var out struct {
			Deliveries []struct {
				ID        uuid.UUID `json:"id"`
				Recipient string    `json:"recipient"`
			} `json:"deliveries"`
		}
		list.decode(t, &out)
		if list.status != 200 || len(out.Deliveries) != 1 || out.Deliveries[0].ID != n.ID {
			t.Errorf("list %s = %d %s", q, list.status, list.body)
		}
	}
	one := s.admin(t, http.MethodGet, "/admin/v1/deliveries/"+n.ID.String(), "")
	var detail struct {
		Delivery struct {
			Attempts int    `json:"attempts"`
			Status   string `json:"status"`
		} `json:"delivery"`
		Events []notify.Event `json:"events"`
	}
	one.decode(t, &detail)
	if one.status != 200 || detail.Delivery.Status != "pending" || len(detail.Events) != 1 || detail.Events[0].Event != "received" {
		t.Errorf("detail = %d %s", one.status, one.body)
	}
	for path, status := range map[string]int{
		"/admin/v1/deliveries/" + uuid.NewString(): 404,
		"/admin/v1/deliveries/nope":                404,
		"/admin/v1/deliveries?status=lost":         400,
		"/admin/v1/deliveries?status=cancelled":    200,
		"/admin/v1/deliveries?older_than=soon":     400,
		"/admin/v1/deliveries?order_id=x":          400,
		"/admin/v1/deliveries?limit=0":             400,
		"/admin/v1/deliveries?key=%00":             400,
		"/admin/v1/deliveries?template=%ff":        400,
	} {
		if res := s.admin(t, http.MethodGet, path, ""); res.status != status {
			t.Errorf("GET %s = %d, want %d", path, res.status, status)
		}
	}
}

func TestAdminRetryAndMarkSent(t *testing.T) {
	t.Parallel()
	s := setup(t)
	res := s.postOrder(t, validCheckout, nil)
	var o order.Order
	res.decode(t, &o)
	id := o.Notifications[0].ID
	path := "/admin/v1/deliveries/" + id.String()

	// A pending delivery is not retried.
	if res := s.admin(t, http.MethodPost, path+"/retry", ""); res.status != http.StatusConflict {
		t.Errorf("retry of a pending delivery = %d %s", res.status, res.body)
	}

	// A failed one is retried under the same key, and queued.
	s.f.Failed(s.f.Get(id), "550 no such user")
	if err := s.inspector.DeleteTask(s.redis.Queue, queue.TaskID(id)); err != nil {
		t.Fatal(err)
	}
	if res := s.admin(t, http.MethodPost, path+"/retry", `{"note": "x", "provider_message_id": "P"}`); res.status != http.StatusBadRequest {
		t.Errorf("retry with a mark-sent field = %d, want 400", res.status)
	}
	retried := s.admin(t, http.MethodPost, path+"/retry", `{"note": "mailbox fixed"}`)
	var out struct {
		Delivery struct {
			Status         string `json:"status"`
			Attempts       int    `json:"attempts"`
			IdempotencyKey string `json:"idempotency_key"`
		} `json:"delivery"`
		Queued bool `json:"queued"`
	}
	retried.decode(t, &out)
	if retried.status != 200 || out.Delivery.Status != "pending" || out.Delivery.Attempts != 0 || !out.Queued ||
		out.Delivery.IdempotencyKey != o.Notifications[0].IdempotencyKey {
		t.Errorf("retry = %d %s", retried.status, retried.body)
	}
	if _, err := s.inspector.GetTaskInfo(s.redis.Queue, queue.TaskID(id)); err != nil {
		t.Errorf("retried delivery has no task: %v", err)
	}

	// mark-sent applies to held deliveries only, and needs the provider's id.
	if res := s.admin(t, http.MethodPost, path+"/mark-sent", `{"provider_message_id": "X1"}`); res.status != http.StatusConflict {
		t.Errorf("mark-sent of a pending delivery = %d", res.status)
	}
	s.f.Held(s.f.Get(id), "outcome unknown and no provider look-up")
	if res := s.admin(t, http.MethodPost, path+"/mark-sent", `{}`); res.status != http.StatusUnprocessableEntity {
		t.Errorf("mark-sent without a provider id = %d", res.status)
	}
	if res := s.admin(t, http.MethodPost, path+"/mark-sent", `{"provider_message_id": "X1", "note": "\u0000"}`); res.status != http.StatusBadRequest ||
		!strings.Contains(string(res.body), `"pointer":"/note"`) {
		t.Errorf("mark-sent with a NUL in the note = %d %s", res.status, res.body)
	}
	if res := s.admin(t, http.MethodPost, path+"/mark-sent", `{"provider_message_id": "X1", "extra": 1}`); res.status != http.StatusBadRequest {
		t.Errorf("mark-sent with an unknown field = %d", res.status)
	}
	if got := s.admin(t, http.MethodGet, path, ""); !strings.Contains(string(got.body), `"status":"held"`) {
		t.Errorf("a refused request changed the row: %s", got.body)
	}
	marked := s.admin(t, http.MethodPost, path+"/mark-sent", `{"provider_message_id": "MH-123", "note": "seen in the provider's log"}`)
	if marked.status != 200 || !strings.Contains(string(marked.body), `"status":"sent"`) {
		t.Errorf("mark-sent = %d %s", marked.status, marked.body)
	}
	history := s.admin(t, http.MethodGet, path, "")
	for _, ev := range []string{"operator_retry", "operator_mark_sent", "seen in the provider's log"} {
		if !strings.Contains(string(history.body), ev) {
			t.Errorf("history lacks %s: %s", ev, history.body)
		}
	}

	// A sent delivery is never retried.
	refused := s.admin(t, http.MethodPost, path+"/retry", `{"note": "customer says it never came"}`)
	if refused.status != http.StatusConflict || !strings.Contains(string(refused.body), "never sent again") {
		t.Errorf("retry of a sent delivery = %d %s", refused.status, refused.body)
	}
}

// A delivery pinned to a provider (its outcome there unknown) stays
// pinned when retried, unless the operator says that provider does not
// hold it; the history says who lifted which pin.
func TestAdminRetryKeepsThePinUnlessAskedToLiftIt(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	id := o.Notifications[0].ID
	path := "/admin/v1/deliveries/" + id.String()
	var out struct {
		Delivery struct {
			Status         string `json:"status"`
			Provider       string `json:"provider"`
			ProviderPinned bool   `json:"provider_pinned"`
		} `json:"delivery"`
	}
	for _, c := range []struct {
		body   string
		pinned bool
	}{{`{"note": "tried again"}`, true}, {`{"note": "not in resend's log", "unpin": true}`, false}} {
		s.f.HeldAt(s.f.Get(id), "resend")
		res := s.admin(t, http.MethodPost, path+"/retry", c.body)
		out.Delivery.ProviderPinned = false // omitted when false
		res.decode(t, &out)
		if res.status != 200 || out.Delivery.Status != "pending" || out.Delivery.Provider != "resend" || out.Delivery.ProviderPinned != c.pinned {
			t.Errorf("retry %s = %d %s, want pending, pinned %v", c.body, res.status, res.body, c.pinned)
		}
		s.f.Claimed(s.f.Get(id), -time.Second) // a worker takes it and dies before the data: ready for the next hold
	}
	if history := s.admin(t, http.MethodGet, path, ""); strings.Count(string(history.body), `"unpinned":"resend"`) != 1 {
		t.Errorf("the history does not say once that the pin to resend was lifted: %s", history.body)
	}
	if res := s.admin(t, http.MethodPost, path+"/cancel", `{"note": "x", "unpin": true}`); res.status != http.StatusBadRequest {
		t.Errorf("cancel with retry's unpin = %d, want 400", res.status)
	}
}

// A retry that would keep a delivery pinned to a provider none of the
// live workers sends through is refused, saying which and what to do.
func TestAdminRetryRefusesAPinNoWorkerCanServe(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	id := o.Notifications[0].ID
	s.f.HeldAt(s.f.Get(id), "postmark")
	s.startWorker(t, nil) // it sends through "smtp", and says so in Redis
	testenv.WaitFor(t, "the worker's provider in the queue's view", 10*time.Second, func() bool {
		res := s.admin(t, http.MethodGet, "/admin/v1/queue", "")
		return strings.Contains(string(res.body), `"providers":[{"name":"smtp","up":true}]`)
	})
	path := "/admin/v1/deliveries/" + id.String() + "/retry"
	res := s.admin(t, http.MethodPost, path, `{"note": "again"}`)
	if res.status != http.StatusConflict || !strings.Contains(string(res.body), "Pinned to a provider no worker sends through") ||
		!strings.Contains(string(res.body), `\"postmark\"`) {
		t.Errorf("retry keeping a pin to postmark = %d %s, want 409 naming it", res.status, res.body)
	}
	if res := s.admin(t, http.MethodPost, path, `{"note": "not in postmark's log", "unpin": true}`); res.status != http.StatusOK {
		t.Errorf("retry lifting the pin = %d %s", res.status, res.body)
	}
	testenv.WaitFor(t, "the unpinned delivery sent", 10*time.Second, func() bool { return s.f.Get(id).Status == notify.StatusSent })
}

func TestAdminQueueControls(t *testing.T) {
	t.Parallel()
	s := setup(t)
	// A queue no task has reached yet can be paused and resumed too, and
	// says so.
	for _, step := range []struct{ path, want string }{
		{"/admin/v1/queue/pause", `"paused":true`}, {"/admin/v1/queue/resume", `"paused":false`},
	} {
		if res := s.admin(t, http.MethodPost, step.path, ""); res.status != 200 {
			t.Fatalf("%s on a fresh queue = %d %s", step.path, res.status, res.body)
		}
		if info := s.admin(t, http.MethodGet, "/admin/v1/queue", ""); !strings.Contains(string(info.body), step.want) {
			t.Errorf("after %s: %s", step.path, info.body)
		}
	}
	s.postOrder(t, validCheckout, nil) // creates the queue
	if res := s.admin(t, http.MethodPost, "/admin/v1/queue/pause", ""); res.status != 200 {
		t.Fatalf("pause = %d %s", res.status, res.body)
	}
	if res := s.admin(t, http.MethodPost, "/admin/v1/queue/pause", ""); res.status != 200 {
		t.Errorf("pausing twice = %d %s", res.status, res.body)
	}
	info := s.admin(t, http.MethodGet, "/admin/v1/queue", "")
	if !strings.Contains(string(info.body), `"paused":true`) || !strings.Contains(string(info.body), `"pending":1`) {
		t.Errorf("queue after pause: %s", info.body)
	}
	if res := s.admin(t, http.MethodPost, "/admin/v1/queue/resume", ""); res.status != 200 {
		t.Errorf("resume = %d", res.status)
	}
	if res := s.admin(t, http.MethodPost, "/admin/v1/queue/resume", ""); res.status != 200 {
		t.Errorf("resuming a running queue = %d %s", res.status, res.body)
	}
	if info := s.admin(t, http.MethodGet, "/admin/v1/queue", ""); !strings.Contains(string(info.body), `"paused":false`) {
		t.Errorf("queue after resume: %s", info.body)
	}

	if res := s.admin(t, http.MethodPut, "/admin/v1/queue/concurrency", `{"per_worker": 2}`); res.status != 200 {
		t.Errorf("set concurrency = %d %s", res.status, res.body)
	}
	if info := s.admin(t, http.MethodGet, "/admin/v1/queue", ""); !strings.Contains(string(info.body), `"concurrency_per_worker":2`) {
		t.Errorf("queue after setting concurrency: %s", info.body)
	}
	for _, body := range []string{`{"per_worker": -1}`, `{}`, `{"per_worker": "2"}`} {
		if res := s.admin(t, http.MethodPut, "/admin/v1/queue/concurrency", body); res.status != 400 && res.status != 422 {
			t.Errorf("concurrency %s = %d", body, res.status)
		}
	}
	if res := s.admin(t, http.MethodPut, "/admin/v1/queue/concurrency", `{"per_worker": 0}`); res.status != 200 {
		t.Errorf("clear concurrency = %d", res.status)
	}
}

// The later lane pauses alone: the queue itself, the confirmations',
// keeps running (asynq's own view says so), the action is recorded on
// the later lane, and resuming it leaves the queue as it was. Resuming
// all sending resumes the later lane too.
func TestAdminPausesTheLaterLaneAlone(t *testing.T) {
	t.Parallel()
	s := setup(t)
	s.postOrder(t, validCheckout, nil) // creates the queue
	type queue struct {
		Paused      bool `json:"paused"`
		LaterPaused bool `json:"later_paused"`
	}
	read := func() queue {
		var q queue
		s.admin(t, http.MethodGet, "/admin/v1/queue", "").decode(t, &q)
		return q
	}
	later := s.redis.Queue + "-later"
	res := s.admin(t, http.MethodPost, "/admin/v1/queue/pause", `{"note": "flash sale", "lane": "later"}`)
	if want := `{"paused":true,"queue":"` + later + `"}`; res.status != http.StatusOK || strings.TrimSpace(string(res.body)) != want {
		t.Fatalf("pause the later lane = %d %s, want %s", res.status, res.body, want)
	}
	if q := read(); q.Paused || !q.LaterPaused {
		t.Errorf("after pausing the later lane: %+v, want the queue running and its later lane paused", q)
	}
	if info, err := s.inspector.GetQueueInfo(s.redis.Queue); err != nil || info.Paused {
		t.Errorf("asynq's view of the queue itself: %+v, %v; want it running", info, err)
	}
	var actions struct {
		Actions []notify.Action `json:"actions"`
	}
	s.admin(t, http.MethodGet, "/admin/v1/actions?limit=1", "").decode(t, &actions)
	if len(actions.Actions) != 1 || actions.Actions[0].Action != "queue.pause" || actions.Actions[0].Target != "queue:"+later {
		t.Errorf("the action recorded: %+v, want queue.pause on queue:%s", actions.Actions, later)
	}

	if res := s.admin(t, http.MethodPost, "/admin/v1/queue/resume", `{"lane": "later"}`); res.status != http.StatusOK {
		t.Fatalf("resume the later lane = %d %s", res.status, res.body)
	}
	if q := read(); q.Paused || q.LaterPaused {
		t.Errorf("after resuming the later lane: %+v, want both running", q)
	}
	s.admin(t, http.MethodPost, "/admin/v1/queue/pause", `{"lane": "later"}`)
	s.admin(t, http.MethodPost, "/admin/v1/queue/pause", "")
	if q := read(); !q.Paused || !q.LaterPaused {
		t.Errorf("after pausing all: %+v, want both paused", q)
	}
	if res := s.admin(t, http.MethodPost, "/admin/v1/queue/resume", `{"lane": "later"}`); res.status != http.StatusOK {
		t.Fatalf("resume the later lane = %d %s", res.status, res.body)
	}
	if q := read(); !q.Paused || q.LaterPaused {
		t.Errorf("after resuming the later lane of a paused queue: %+v, want the queue still paused", q)
	}
	s.admin(t, http.MethodPost, "/admin/v1/queue/pause", `{"lane": "later"}`)
	s.admin(t, http.MethodPost, "/admin/v1/queue/resume", "")
	if q := read(); q.Paused || q.LaterPaused {
		t.Errorf("after resuming all: %+v, want both running", q)
	}
	for _, body := range []string{`{"lane": "newsletters"}`, `{"lane": "LATER"}`} {
		if res := s.admin(t, http.MethodPost, "/admin/v1/queue/pause", body); res.status != http.StatusUnprocessableEntity ||
			!strings.Contains(string(res.body), `"/lane"`) {
			t.Errorf("pause %s = %d %s, want 422 naming /lane", body, res.status, res.body)
		}
	}
	if q := read(); q.Paused || q.LaterPaused {
		t.Errorf("after refused pauses: %+v, want both running", q)
	}
}

// A delivery's task is deleted once it finished: it is counted in
// processed_today, in no size, and only the next pending task is in the
// queue.
func TestAdminQueueCountsProcessedNotKeptTasks(t *testing.T) {
	t.Parallel()
	s := setup(t)
	s.startWorker(t, nil)
	type queue struct {
		Size           int  `json:"size"`
		Pending        int  `json:"pending"`
		Completed      int  `json:"completed"`
		ProcessedToday int  `json:"processed_today"`
		Paused         bool `json:"paused"`
	}
	read := func() queue {
		var q queue
		s.admin(t, http.MethodGet, "/admin/v1/queue", "").decode(t, &q)
		return q
	}
	s.postOrder(t, validCheckout, nil)
	testenv.WaitFor(t, "the worker to process the confirmation's task", 30*time.Second, func() bool { return read().ProcessedToday == 1 })
	// Paused, the next delivery stays a pending task.
	if res := s.admin(t, http.MethodPost, "/admin/v1/queue/pause", ""); res.status != http.StatusOK {
		t.Fatalf("pause = %d %s", res.status, res.body)
	}
	s.postOrder(t, strings.Replace(validCheckout, "Ana Maria", "Budi", 1), nil)
	if q := read(); q.Size != 1 || q.Pending != 1 || q.Completed != 0 || q.ProcessedToday != 1 || !q.Paused {
		t.Errorf("queue %+v, want size 1 (the pending task), nothing completed kept, one processed", q)
	}
}

func TestAdminBlocks(t *testing.T) {
	t.Parallel()
	s := setup(t)
	created := s.admin(t, http.MethodPost, "/admin/v1/blocks",
		`{"kind": "recipient", "value": " Ana.Maria@Example.com ", "reason": "complaint: duplicate e-mails, ticket 4411", "expires_in": "2h"}`)
	var b notify.Block
	created.decode(t, &b)
	if created.status != 201 || b.Value != "ana.maria@example.com" || b.Kind != "recipient" {
		t.Fatalf("block = %d %s", created.status, created.body)
	}
	keyBlock := s.admin(t, http.MethodPost, "/admin/v1/blocks",
		`{"kind": "key", "value": "order-confirmation:x:y@example.com", "reason": "replaying", "expires_in": "30m"}`)
	if keyBlock.status != 201 {
		t.Errorf("key block = %d %s", keyBlock.status, keyBlock.body)
	}
	for _, body := range []string{
		`{"kind": "domain", "value": "example.com", "reason": "x", "expires_in": "1h"}`,
		`{"kind": "key", "value": "k", "reason": "", "expires_in": "1h"}`,
		`{"kind": "key", "value": "k", "reason": "x", "expires_in": "forever"}`,
		`{"kind": "key", "value": "k", "reason": "x", "expires_in": "1ns"}`,
		`{"kind": "recipient", "value": "not an address", "reason": "x", "expires_in": "1h"}`,
	} {
		if res := s.admin(t, http.MethodPost, "/admin/v1/blocks", body); res.status != 422 {
			t.Errorf("block %s = %d %s", body, res.status, res.body)
		}
	}
	// NUL, which PostgreSQL's text refuses, is refused by the decoder.
	for body, pointer := range map[string]string{
		`{"kind": "key", "value": "k\u0000", "reason": "x", "expires_in": "1h"}`:           "/value",
		`{"kind": "key", "value": "k", "reason": "nul \u0000 inside", "expires_in": "1h"}`: "/reason",
	} {
		if res := s.admin(t, http.MethodPost, "/admin/v1/blocks", body); res.status != 400 || !strings.Contains(string(res.body), `"pointer":"`+pointer+`"`) {
			t.Errorf("block %s = %d %s", body, res.status, res.body)
		}
	}
	if res := s.admin(t, http.MethodPost, "/admin/v1/blocks", `{"kind": "key",`); res.status != 400 {
		t.Errorf("malformed block = %d", res.status)
	}
	list := s.admin(t, http.MethodGet, "/admin/v1/blocks", "")
	var out struct{ Blocks []notify.Block }
	if err := json.Unmarshal(list.body, &out); err != nil || len(out.Blocks) != 2 {
		t.Errorf("blocks = %s", list.body)
	}
	if res := s.admin(t, http.MethodDelete, "/admin/v1/blocks/"+jsonInt(b.ID), ""); res.status != 204 {
		t.Errorf("unblock = %d %s", res.status, res.body)
	}
	if res := s.admin(t, http.MethodDelete, "/admin/v1/blocks/"+jsonInt(b.ID), ""); res.status != 404 {
		t.Errorf("unblock twice = %d", res.status)
	}
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// An operator's one-line fields are held to the checkout's rule for one
// line of visible text: no line or paragraph separator, no bidirectional
// control, something visible. Notes and reasons may run over lines but
// take no bidirectional control and no control character but tab and
// line breaks. Each refusal names the field and writes nothing.
func TestAdminTextFieldsAreVisibleText(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	delivery := "/admin/v1/deliveries/" + o.Notifications[0].ID.String()
	s.f.Held(s.f.Get(o.Notifications[0].ID), "outcome unknown")
	bad := map[string]string{ // JSON string bodies that are not one line of visible text
		"a line separator":      `"shop\u2028backend"`,
		"a paragraph separator": `"shop\u2029backend"`,
		"a bidi override":       `"\u202edneckab"`,
		"a bidi isolate":        `"shop\u2066backend\u2069"`,
		"zero-width spaces":     `"\u200b\u200b"`,
		"a line break":          `"shop\nbackend"`,
	}
	for what, v := range bad {
		for _, c := range []struct{ method, path, body, pointer string }{
			{"POST", "/admin/v1/api-keys", `{"name": ` + v + `, "scopes": ["orders:read"]}`, "/name"},
			{"POST", "/admin/v1/blocks", `{"kind": "key", "value": ` + v + `, "reason": "x", "expires_in": "1h"}`, "/value"},
			{"POST", delivery + "/mark-sent", `{"provider_message_id": ` + v + `}`, "/provider_message_id"},
		} {
			res := s.admin(t, c.method, c.path, c.body)
			if res.status != http.StatusUnprocessableEntity || !strings.Contains(string(res.body), `"pointer":"`+c.pointer+`"`) {
				t.Errorf("%s %s with %s: %d %s", c.method, c.path, what, res.status, res.body)
			}
		}
		var q string
		if err := json.Unmarshal([]byte(v), &q); err != nil {
			t.Fatal(err)
		}
		if res := s.admin(t, "GET", "/admin/v1/deliveries?template="+url.QueryEscape(q), ""); res.status != http.StatusBadRequest {
			t.Errorf("a template filter with %s: %d %s", what, res.status, res.body)
		}
	}
	notes := map[string]string{ // notes and reasons that are refused
		"a bidi override":   `"customer asked \u202eyadot ton\u202c"`,
		"zero-width spaces": `"\u200b"`,
		"an escape":         `"\u001b[2Jcleared"`,
	}
	for what, v := range notes {
		for _, c := range []struct{ method, path, body, pointer string }{
			{"POST", "/admin/v1/blocks", `{"kind": "key", "value": "k", "reason": ` + v + `, "expires_in": "1h"}`, "/reason"},
			{"POST", "/admin/v1/suppressions", `{"recipient": "gone@example.com", "note": ` + v + `}`, "/note"},
			{"POST", delivery + "/mark-sent", `{"provider_message_id": "MH-1", "note": ` + v + `}`, "/note"},
		} {
			res := s.admin(t, c.method, c.path, c.body)
			if res.status != http.StatusUnprocessableEntity || !strings.Contains(string(res.body), `"pointer":"`+c.pointer+`"`) {
				t.Errorf("%s %s with %s: %d %s", c.method, c.path, what, res.status, res.body)
			}
		}
	}
	if res := s.admin(t, "DELETE", "/admin/v1/suppressions/gone%40example.com?note="+url.QueryEscape("fixed\u202e"), ""); res.status != http.StatusBadRequest {
		t.Errorf("lifting with a bidi override in the note: %d %s", res.status, res.body)
	}
	for _, table := range []string{"delivery_blocks", "suppressions"} {
		if n := s.count(t, table); n != 0 {
			t.Errorf("%s has %d rows after refused requests", table, n)
		}
	}
	if n := s.count(t, "api_keys"); n != 1 {
		t.Errorf("%d API keys, want only the test's own", n)
	}
	if got := s.admin(t, "GET", delivery, ""); !strings.Contains(string(got.body), `"status":"held"`) {
		t.Errorf("a refused mark-sent changed the delivery: %s", got.body)
	}

	// What is one line of visible text, in any script, passes; a note may
	// run over lines.
	if res := s.admin(t, "POST", "/admin/v1/api-keys", `{"name": "toko-bandung \u0645\u062a\u062c\u0631", "scopes": ["orders:read"]}`); res.status != http.StatusCreated {
		t.Errorf("a name in two scripts: %d %s", res.status, res.body)
	}
	if res := s.admin(t, "POST", "/admin/v1/blocks", `{"kind": "key", "value": "k", "reason": "ticket 4411:\n\tduplicates", "expires_in": "1h"}`); res.status != http.StatusCreated {
		t.Errorf("a reason over two lines: %d %s", res.status, res.body)
	}
	if res := s.admin(t, "POST", delivery+"/mark-sent", `{"provider_message_id": "<MH-1@mail.example>", "note": "seen in\r\nthe log"}`); res.status != http.StatusOK {
		t.Errorf("mark-sent with a note over two lines: %d %s", res.status, res.body)
	}
}

// An operator's own key opens the admin API, and what they do is
// recorded under its name; the shared token's actions are the request's;
// a backend key is refused as no credentials are.
func TestAdminWithAnOperatorKeyNamesTheOperator(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	id := o.Notifications[0].ID
	s.f.Failed(s.f.Get(id), "550 no such user")
	k, token, err := s.keys.Create(context.Background(), "test", "Budi", []apikey.Scope{apikey.ScopeAdmin})
	if err != nil {
		t.Fatal(err)
	}
	path := "/admin/v1/deliveries/" + id.String()
	if res := s.do(t, http.MethodPost, path+"/retry", "application/json", strings.NewReader(`{"note":"x"}`), nil); res.status != http.StatusUnauthorized {
		t.Errorf("retry with the backend's key = %d, want 401", res.status)
	}
	res := s.do(t, http.MethodPost, path+"/retry", "application/json", strings.NewReader(`{"note":"relay fixed"}`), map[string]string{"Authorization": "Bearer " + token})
	if res.status != http.StatusOK {
		t.Fatalf("retry with an operator key = %d %s", res.status, res.body)
	}
	var got struct {
		Events []notify.Event `json:"events"`
	}
	s.admin(t, http.MethodGet, path, "").decode(t, &got)
	if len(got.Events) == 0 {
		t.Fatal("no history")
	}
	last := got.Events[len(got.Events)-1]
	if last.Event != "operator_retry" || last.Actor != "operator:Budi ("+k.Prefix+")" {
		t.Errorf("the retry's history row: %+v", last)
	}
}

// An operator's retry while a task for the delivery is running queues
// another task: the running one may have read the row before the retry
// (held) and will end without sending it, which would leave the
// delivery pending without a task until the reconciler's next pass. The
// claim fences whichever of the two runs second.
func TestAdminRetryWhileItsTaskRunsQueuesAnother(t *testing.T) {
	t.Parallel()
	s := setup(t)
	running, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	releaseOnce := func() { once.Do(func() { close(release) }) }
	var runs atomic.Int32
	srv := asynq.NewServer(s.redis.Opt, asynq.Config{Queues: map[string]int{s.redis.Queue: 1}, Concurrency: 1, LogLevel: asynq.FatalLevel})
	if err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		if runs.Add(1) == 1 { // a worker that read the row as it was, and ends its task
			running <- struct{}{}
			<-release
		}
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	t.Cleanup(releaseOnce)

	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	id := o.Notifications[0].ID
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("the delivery's task never ran")
	}
	s.f.HeldAt(s.f.Get(id), "postmark")
	var out struct {
		Queued bool `json:"queued"`
	}
	res := s.admin(t, http.MethodPost, "/admin/v1/deliveries/"+id.String()+"/retry", `{"note": "not in postmark's log", "unpin": true}`)
	res.decode(t, &out)
	if res.status != http.StatusOK || !out.Queued {
		t.Errorf("retry while its task runs = %d %s, want 200 and a task queued", res.status, res.body)
	}
	releaseOnce()
	testenv.WaitFor(t, "a second task for the retried delivery", 10*time.Second, func() bool { return runs.Load() >= 2 })
}
