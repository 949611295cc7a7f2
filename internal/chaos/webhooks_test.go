package chaos_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// shopReceiver is the shop's webhook endpoint: it verifies every request
// with the Standard Webhooks library and keeps the events by webhook-id.
// It can go down (its port refuses connections) and come back on the
// same port.
type shopReceiver struct {
	t      *testing.T
	addr   string
	mu     sync.Mutex
	secret string
	srv    *http.Server
	events map[string]string // webhook-id -> notification id
	posts  int               // requests received, repeats included
	bad    []string
}

func newShopReceiver(t *testing.T) *shopReceiver {
	r := &shopReceiver{t: t, events: map[string]string{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	r.serve(ln)
	t.Cleanup(r.down)
	return r
}

func (r *shopReceiver) serve(ln net.Listener) {
	r.srv = &http.Server{Handler: http.HandlerFunc(r.handle), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
}

func (r *shopReceiver) handle(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.posts++
	wh, err := standardwebhooks.NewWebhook(r.secret)
	if err == nil {
		err = wh.Verify(body, req.Header)
	}
	var ev struct {
		Type string `json:"type"`
		Data struct {
			NotificationID string `json:"notification_id"`
		} `json:"data"`
	}
	if err == nil {
		err = json.Unmarshal(body, &ev)
	}
	if err != nil || ev.Type != "notification.sent" {
		r.bad = append(r.bad, string(body)+": "+errString(err))
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.events[req.Header.Get("webhook-id")] = ev.Data.NotificationID
	w.WriteHeader(http.StatusNoContent)
}

func errString(err error) string {
	if err == nil {
		return "not notification.sent"
	}
	return err.Error()
}

func (r *shopReceiver) down() { _ = r.srv.Close() }

// up listens on the same port again.
func (r *shopReceiver) up() {
	var ln net.Listener
	var err error
	for range 50 { // the port was just closed; it is ours again within moments
		if ln, err = net.Listen("tcp", r.addr); err == nil {
			r.serve(ln)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.t.Fatalf("the receiver cannot listen on %s again: %v", r.addr, err)
}

// The shop's endpoint is down while orders are sent (for two minutes in
// make chaos-long): the events wait in the outbox, and once it is back,
// every sent notification's event arrives, signed, none lost, none
// invented.
func TestWebhookReceiverDownThenBack(t *testing.T) {
	t.Parallel()
	c := newCluster(t, smtpsink.Config{})
	allow := []string{"WEBHOOK_ALLOW_HTTP", "true", "WEBHOOK_ALLOW_NETWORKS", "127.0.0.0/8"}
	c.startAPI(allow...)
	c.startWorker()
	c.startReconciler(allow...)
	rcv := newShopReceiver(t)
	status, body := c.postAdmin("/admin/v1/webhook-endpoints", `{"url": "http://`+rcv.addr+`/sekali", "event_types": ["notification.sent"]}`)
	var made struct {
		Secret string `json:"secret"`
	}
	if status != http.StatusCreated || json.Unmarshal(body, &made) != nil {
		t.Fatalf("register the endpoint: %d %s", status, body)
	}
	rcv.mu.Lock()
	rcv.secret = made.Secret
	rcv.mu.Unlock()

	outage := fault(8*time.Second, 2*time.Minute)
	rcv.down()
	start := time.Now()
	const n = 20
	c.placeOrders("hooked", n)
	c.settled(60 * time.Second)
	time.Sleep(time.Until(start.Add(outage)))
	rcv.up()

	testenv.WaitFor(t, "every sent notification's event at the receiver", outage+3*time.Minute, func() bool {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		return len(rcv.events) >= n
	})
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.bad) > 0 {
		t.Errorf("requests the receiver refused:\n%s", strings.Join(rcv.bad, "\n"))
	}
	seen := map[string]bool{}
	for _, id := range rcv.events {
		seen[id] = true
	}
	for _, o := range c.orders {
		if !seen[o.DeliveryID.String()] {
			t.Errorf("no event for the sent notification %s", o.DeliveryID)
		}
	}
	if len(rcv.events) != n {
		t.Errorf("%d distinct events, want %d", len(rcv.events), n)
	}
	t.Logf("receiver down %s: %d events, %d requests once back (repeats are the at-least-once the webhook-id lets it drop), drained %s after the orders",
		outage, len(rcv.events), rcv.posts, time.Since(start).Round(100*time.Millisecond))
	c.verdict("webhook receiver down "+outage.String()+", then back", expect{})
}

// postAdmin posts body to the admin API with the admin token.
func (c *cluster) postAdmin(path, body string) (int, []byte) {
	return c.post(adminToken, path, body)
}
