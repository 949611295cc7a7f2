package chaos_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/httpprovider/httpprovidertest"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/pace"
	"github.com/sekali-dev/sekali/internal/postmark/postmarktest"
	"github.com/sekali-dev/sekali/internal/reconcile"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/resend/resendtest"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// Batches at the provider (issue 34): the workers send whoever waits for
// Resend or Postmark in one request (the convoy, PROVIDER_BATCHES on),
// each delivery still its own outcome. These scenarios break a batch on
// its way: its answer lost, its worker killed between the hand-over
// that records it and its outcome, one member refused. Every order
// still gets one e-mail, and each row says what the provider may have.

// batchRate is the clusters' pace, in requests a second: slow enough
// that the orders of a scenario's round reach the convoy while its
// leader waits for the token (gather), so that they ride in one request.
const batchRate = 1

// newResendBatchCluster is a Resend cluster (newResendCluster) whose
// workers send a batch a request, paced at batchRate.
func newResendBatchCluster(t *testing.T) *cluster {
	t.Helper()
	c := newResendCluster(t)
	c.smtpEnv = append(c.smtpEnv, "PROVIDER_BATCHES", "on", "RESEND_RATE", strconv.Itoa(batchRate))
	return c
}

// newPostmarkBatchCluster is a cluster whose workers send through
// Postmark's API, a batch a request, paced at batchRate, and whose
// reconciler settles an unknown outcome with Postmark's look-up by the
// message's metadata. POSTMARK_LOOKUP_SETTLE, 5 minutes by default (how
// old a miss must be before it is believed), is a second here: the
// stand-in shows a message as soon as it took it.
func newPostmarkBatchCluster(t *testing.T) *cluster {
	t.Helper()
	pm := postmarktest.NewServer()
	t.Cleanup(pm.Close)
	db := testenv.NewDB(t)
	c := &cluster{t: t, db: db, redis: testenv.NewRedisServer(t), postmark: pm, backendKey: backendKey(t, db)}
	c.redisURL = c.redis.URL
	c.smtpEnv = []string{"PROVIDER", "postmark", "POSTMARK_SERVER_TOKEN", pm.Token, "POSTMARK_BASE_URL", pm.URL, "PROVIDER_TIMEOUT", "2s",
		"POSTMARK_RATE", strconv.Itoa(batchRate), "PROVIDER_BATCHES", "on"}
	c.recEnv = []string{"PROVIDER", "postmark", "POSTMARK_SERVER_TOKEN", pm.Token, "POSTMARK_BASE_URL", pm.URL,
		"POSTMARK_LOOKUP_SETTLE", "1s", "MAIL_LOOKUP_URL", ""}
	return c
}

// gather spends the provider's next token, as another worker's request
// would: the convoy's next leader waits its turn (a second at
// batchRate), and every attempt that reaches the convoy meanwhile rides
// in its request. Without it a round's first order would go alone, and
// the fault queued for the next request would meet a batch of one.
func (c *cluster) gather(provider string) {
	c.t.Helper()
	rdb := redisconn.NewClient(c.redis.Opt)
	defer rdb.Close()
	b, err := pace.New(rdb, c.redis.Queue, provider, pace.Config{Rate: batchRate})
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := b.Take(context.Background(), pace.Urgent, 1); err != nil {
		c.t.Fatal(err)
	}
}

// recordedBatch is a batch as its hand-over recorded it.
type recordedBatch struct {
	key     string
	members []uuid.UUID
}

// batches are the batches recorded so far, in the order they were
// handed over.
func (c *cluster) batches() []recordedBatch {
	c.t.Helper()
	rows, err := c.db.Pool.Query(context.Background(), "SELECT key, members FROM delivery_batches ORDER BY created_at, key")
	if err != nil {
		c.t.Fatal(err)
	}
	defer rows.Close()
	var out []recordedBatch
	for rows.Next() {
		var b recordedBatch
		if err := rows.Scan(&b.key, &b.members); err != nil {
			c.t.Fatal(err)
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// sizes are the batches' member counts, in order.
func sizes(bs []recordedBatch) []int {
	out := make([]int, len(bs))
	for i, b := range bs {
		out[i] = len(b.members)
	}
	return out
}

// row reads what the test checks of one delivery.
func (c *cluster) row(id uuid.UUID) (status, batch, providerID, messageID string, attempts int) {
	c.t.Helper()
	if err := c.db.Pool.QueryRow(context.Background(),
		"SELECT status, coalesce(handover_batch, ''), coalesce(provider_message_id, ''), coalesce(message_id, ''), attempts FROM notification_deliveries WHERE id = $1", id).
		Scan(&status, &batch, &providerID, &messageID, &attempts); err != nil {
		c.t.Fatal(err)
	}
	return status, batch, providerID, messageID, attempts
}

// sentAgainWhole checks that batch b was sent again only as it was:
// Resend holds one e-mail for each member under the batch's key, every
// member's last hand-over is the batch's, and each row has the id Resend
// answered for its message (the first request's, when Resend had it).
func (c *cluster) sentAgainWhole(b recordedBatch) {
	c.t.Helper()
	if n := c.resend.CountByIdempotencyKey(mail.ProviderKey(b.key)); n != len(b.members) {
		c.t.Errorf("%d e-mails under the batch's key, want one for each of its %d members", n, len(b.members))
	}
	ids := map[string]string{} // Message-ID: Resend's id
	for _, m := range c.resend.Messages() {
		ids[m.MessageID] = m.ID
	}
	for _, id := range b.members {
		_, batch, providerID, messageID, _ := c.row(id)
		if batch != b.key || providerID != ids[messageID] {
			c.t.Errorf("delivery %s: last handed over in batch %q with provider id %q, want %s with %q, the id Resend answered for it",
				id, batch, providerID, b.key, ids[messageID])
		}
	}
}

// workerCounter sums a counter's series on a running worker's metrics
// listener.
func workerCounter(t *testing.T, w *testenv.Process, name string) float64 {
	t.Helper()
	addr := w.WaitLog(t, "worker started", "metrics_addr", time.Second)
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, name+"{") || strings.HasPrefix(l, name+" ") {
			f := strings.Fields(l)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			sum += v
		}
	}
	return sum
}

// A batch's answer lost at Resend: the connection cut after Resend sent
// the batch and, in a second round, before it did. The worker sends the
// same request again at once, under the batch's key: Resend answers the
// first request's ids, or sends it the one time. Nothing is left for the
// reconciler.
func TestResendBatchAnswerLost(t *testing.T) {
	t.Parallel()
	c := newResendBatchCluster(t)
	c.startAPI()
	// One worker: with two, a round's orders are shared out between
	// their convoys, and the request the fault meets could carry one.
	worker := c.startWorker()
	c.startReconciler()
	var rounds [][]int
	for _, sent := range []bool{true, false} {
		before := len(c.batches())
		c.resend.BatchFailNext(resendtest.Fault{Cut: true, Sent: sent})
		c.gather("resend")
		c.placeOrders(fmt.Sprintf("batch-lost-sent-%v", sent), 5)
		c.settled(time.Minute)
		round := sizes(c.batches()[before:])
		if len(round) == 0 || round[0] < 2 {
			t.Errorf("the round cut %s Resend sent rode in batches of %v: the lost request carried one", map[bool]string{true: "after", false: "before"}[sent], round)
		}
		rounds = append(rounds, round)
	}
	c.verdict("Resend batches' answers lost (one cut after Resend sent, one before)", expect{})
	resent := workerCounter(t, worker, "sekali_provider_batch_resent_total")
	requests, recorded := c.resend.Counts(), len(c.batches())
	// Who sends a lost request again is the worker's convoy (counted),
	// or, on a kept-alive connection, net/http itself: its Transport
	// re-sends at once a request that carries an Idempotency-Key when
	// the server closed a reused connection without an answer, and the
	// worker sees only the second answer. Resend counts both.
	t.Logf("batches %v; %d batch requests for %d batches; %v of the re-sends by the worker's convoy; %d batch_replay",
		rounds, requests.Batches, recorded, resent, c.decisions(reconcile.DecisionBatchReplay))
	if requests.Batches < recorded+2 {
		t.Errorf("%d batch requests for %d batches, want the two whose answers were lost sent again", requests.Batches, recorded)
	}
	if requests.Emails != 0 {
		t.Errorf("%d e-mails sent alone, want every one in a batch", requests.Emails)
	}
	if n := c.decisions(reconcile.DecisionBatchReplay); n != 0 {
		t.Errorf("%d batch_replay decisions: the worker's identical re-send should have settled both batches", n)
	}
}

// A worker is killed (SIGKILL) with a batch in its convoy: before its
// hand-over (before-data: nothing recorded, nothing sent), between the
// hand-over that records it and its request (after-handover: recorded,
// nothing sent), and after Resend took it and answered, before any
// member's sent was written (after-accept: Resend has it). Two other
// workers and the reconciler take over: a member handed over in a batch
// is put back pinned to be sent again in its batch (batch_replay), and
// the batch goes again whole, identical, under its key; Resend sends it
// the one time, or answers the first request's ids.
func TestResendBatchWorkerKilled(t *testing.T) {
	t.Parallel()
	for _, point := range []string{"before-data", "after-handover", "after-accept"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			c := newResendBatchCluster(t)
			c.startAPI()
			victim := c.startWorker("SEKALI_FAILPOINTS", point+"=kill")
			c.gather("resend")
			c.placeOrders("batch-kill-"+point, 5)
			select {
			case <-victim.Done():
				if err := victim.Err(); err == nil || !strings.Contains(err.Error(), "killed") {
					t.Fatalf("worker exited with %v, want killed at %s", err, point)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("the worker never reached %s", point)
			}
			first := c.batches() // the victim's, if it handed over
			c.startWorker()
			c.startWorker()
			c.startReconciler()
			c.settled(2 * time.Minute)
			c.verdict("Resend batch: worker SIGKILL "+point, expect{})
			all := c.batches()
			requests := c.resend.Counts()
			t.Logf("batches %v; %d batch requests, %d lone; decisions: %d batch_replay, %d not_handed_over",
				sizes(all), requests.Batches, requests.Emails, c.decisions(reconcile.DecisionBatchReplay), c.decisions(reconcile.DecisionNotHandedOver))
			if requests.Emails != 0 {
				t.Errorf("%d e-mails sent alone, want every one in a batch", requests.Emails)
			}
			if point == "before-data" {
				if len(first) != 0 {
					t.Errorf("the victim recorded %d batches before its hand-over", len(first))
				}
				if n := c.decisions(reconcile.DecisionBatchReplay); n != 0 {
					t.Errorf("%d batch_replay for deliveries never handed over", n)
				}
				return
			}
			if len(first) != 1 || len(first[0].members) < 2 {
				t.Fatalf("the victim recorded batches %v, want one of several members", sizes(first))
			}
			b := first[0]
			if n := c.decisions(reconcile.DecisionBatchReplay); n < len(b.members) {
				t.Errorf("%d batch_replay, want one for each of the batch's %d members", n, len(b.members))
			}
			c.sentAgainWhole(b)
		})
	}
}

// A worker's batch request reaches Resend and is held there; the worker
// is killed (SIGKILL) meanwhile, so nothing records what became of it:
// the window no lease closes, for a batch. The reconciler puts the
// members back to be sent again in their batch; the replay meets the
// first request still in flight (409 concurrent_idempotent_requests),
// which says nothing of it: the batch stays unknown and is tried again.
// When Resend finishes the first request (it sends it), the replay gets
// its ids.
func TestResendBatchHeldWhileItsWorkerDies(t *testing.T) {
	t.Parallel()
	held := fault(6*time.Second, 60*time.Second)
	c := newResendBatchCluster(t)
	arrived, release := c.resend.HoldNext()
	c.startAPI()
	victim := c.startWorker()
	c.gather("resend")
	c.placeOrders("batch-held", 5)
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("no batch reached Resend")
	}
	heldAt := time.Now()
	victim.Signal(t, syscall.SIGKILL)
	<-victim.Done()
	first := c.batches()
	if len(first) != 1 || len(first[0].members) < 2 {
		t.Fatalf("the victim recorded batches %v, want one of several members", sizes(first))
	}
	b := first[0]
	workers := []*testenv.Process{c.startWorker(), c.startWorker()}
	c.startReconciler()
	testenv.WaitFor(t, "the batch sent again while the first request is in flight", held+30*time.Second, func() bool {
		return slices.ContainsFunc(workers, func(w *testenv.Process) bool { return strings.Contains(w.Output(), "concurrent_idempotent_requests") })
	})
	if n := len(c.resend.Messages()); n != 0 {
		t.Fatalf("%d e-mails while the first request is held", n)
	}
	time.Sleep(time.Until(heldAt.Add(held)))
	release()
	c.settled(2 * time.Minute)
	c.verdict(fmt.Sprintf("Resend batch held %v at Resend while its worker is SIGKILLed", held), expect{})
	t.Logf("batch of %d; %d batch requests; %d batch_replay", len(b.members), c.resend.Counts().Batches, c.decisions(reconcile.DecisionBatchReplay))
	c.sentAgainWhole(b)
}

// One member of a batch is refused by the provider (Resend: an address
// it will not take, in the batch's answer's errors; Postmark: an
// inactive recipient, ErrorCode 406 in its result): it fails, after one
// attempt, and the others of its request are sent.
func TestBatchWithOneRefusedMember(t *testing.T) {
	t.Parallel()
	for _, provider := range []string{"resend", "postmark"} {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			prefix := "batch-refused-" + provider
			refused := prefix + "-2@example.com"
			var c *cluster
			if provider == "resend" {
				c = newResendBatchCluster(t)
				c.resend.RefuseRecipients(refused)
			} else {
				c = newPostmarkBatchCluster(t)
				c.postmark.Deactivate(refused)
			}
			c.startAPI()
			c.startWorker() // one: two would share the orders out, and the refused one could ride alone
			c.startReconciler()
			c.gather(provider)
			c.placeOrders(prefix, 5)
			c.settled(time.Minute)
			r := c.verdict(fmt.Sprintf("batch with one refused member (%s)", provider), expect{mayFail: func(e string) bool { return e == refused }})
			if r.Failed != 1 {
				t.Errorf("%d failed, want the refused one", r.Failed)
			}
			i := slices.IndexFunc(c.orders, func(o placed) bool { return o.Email == refused })
			id := c.orders[i].DeliveryID
			status, batch, _, _, attempts := c.row(id)
			j := slices.IndexFunc(c.batches(), func(b recordedBatch) bool { return b.key == batch })
			if j < 0 {
				t.Fatalf("the refused delivery (%s) names batch %q, which is not recorded", status, batch)
			}
			t.Logf("batches %v; the refused one in a batch of %d, %s after %d attempts", sizes(c.batches()), len(c.batches()[j].members), status, attempts)
			if n := len(c.batches()[j].members); n < 2 {
				t.Errorf("the refused delivery rode in a batch of %d: no others to send", n)
			}
			if attempts != 1 {
				t.Errorf("the refused delivery: %d attempts, want one", attempts)
			}
		})
	}
}

// A batch's answer lost at Postmark: the connection cut after Postmark
// sent the batch and, in a second round, before it did. Postmark takes
// no key, so the worker never sends it again: each member is left for
// the reconciler, whose look-up by the member's metadata finds it (sent)
// or does not (back to pending, and sent once, in another batch).
func TestPostmarkBatchAnswerLost(t *testing.T) {
	t.Parallel()
	c := newPostmarkBatchCluster(t)
	c.startAPI()
	c.startWorker() // one, as in TestResendBatchAnswerLost
	c.startReconciler()
	lost := map[bool]recordedBatch{}
	for _, sent := range []bool{true, false} {
		before := len(c.batches())
		c.postmark.FailNext("/email/batch", postmarktest.Fault{Cut: true, Sent: sent})
		c.gather("postmark")
		c.placeOrders(fmt.Sprintf("pm-batch-lost-sent-%v", sent), 5)
		c.settled(time.Minute)
		round := c.batches()[before:]
		if len(round) == 0 || len(round[0].members) < 2 {
			t.Fatalf("the round cut %s Postmark sent rode in batches of %v: the lost request carried one", map[bool]string{true: "after", false: "before"}[sent], sizes(round))
		}
		lost[sent] = round[0]
	}
	c.verdict("Postmark batches' answers lost (one cut after Postmark sent, one before)", expect{})
	all := c.batches()
	t.Logf("batches %v; %d batch requests, %d lone; decisions: %d found, %d not_found",
		sizes(all), c.postmark.Requests("/email/batch"), c.postmark.Requests("/email"), c.decisions(reconcile.DecisionFound), c.decisions(reconcile.DecisionNotFound))
	if n := c.postmark.Requests("/email/batch"); n != len(all) {
		t.Errorf("%d batch requests for %d batches: without a key, no batch may be sent again", n, len(all))
	}
	if n := c.decisions(reconcile.DecisionFound); n != len(lost[true].members) {
		t.Errorf("%d found by the look-up, want the %d members of the batch Postmark sent", n, len(lost[true].members))
	}
	if n := c.decisions(reconcile.DecisionNotFound); n != len(lost[false].members) {
		t.Errorf("%d not found by the look-up, want the %d members of the batch Postmark did not send", n, len(lost[false].members))
	}
	for _, id := range lost[false].members {
		if _, batch, _, _, _ := c.row(id); batch == lost[false].key {
			t.Errorf("delivery %s, not found at Postmark, is still recorded as sent in the lost batch", id)
		}
	}
}

// cutProxy stands between a worker and the Resend stand-in. Armed, it
// forwards the next batch request and, once the stand-in holds it in
// flight (HoldNext), closes the worker's connection without an answer:
// the answer lost while Resend still works on the request (a load
// balancer's reset, a network's blip). It forwards everything else as
// it is.
type cutProxy struct {
	URL     string
	target  string
	armed   atomic.Bool
	arrived <-chan struct{}
	cut     chan struct{} // closed once it cut the connection

	mu     sync.Mutex
	seen   []keyedArrival // every batch request, as it arrived
	cutKey string         // the Idempotency-Key of the request cut
	cutAt  time.Time
}

// keyedArrival is a batch request the proxy saw: when, under which key.
type keyedArrival struct {
	at  time.Time
	key string
}

// copiesOfTheCut counts the requests under the cut request's key that
// arrived within d after the cut: net/http's own re-send of a request
// whose kept connection closed unanswered leaves at once, the worker's
// own re-sends of a lost batch a second or more later.
func (p *cutProxy) copiesOfTheCut(d time.Duration) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, a := range p.seen {
		if a.key == p.cutKey && a.at.After(p.cutAt) && a.at.Sub(p.cutAt) <= d {
			n++
		}
	}
	return n
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{target: target, cut: make(chan struct{})}
	forward := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/emails/batch" {
			p.mu.Lock()
			p.seen = append(p.seen, keyedArrival{at: time.Now(), key: r.Header.Get("Idempotency-Key")})
			p.mu.Unlock()
		}
		if r.URL.Path != "/emails/batch" || !p.armed.CompareAndSwap(true, false) {
			forward.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		req, err := http.NewRequest(r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			return
		}
		req.Header = r.Header.Clone()
		go func() {
			// Held at the stand-in until the test releases it (or closes
			// the stand-in): its answer goes nowhere.
			if res, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}()
		select {
		case <-p.arrived:
		case <-time.After(10 * time.Second):
		}
		httpprovidertest.HangUp(w)
		p.mu.Lock()
		p.cutKey, p.cutAt = r.Header.Get("Idempotency-Key"), time.Now()
		p.mu.Unlock()
		close(p.cut)
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// arm cuts the next batch request once arrived says the stand-in holds
// it.
func (p *cutProxy) arm(arrived <-chan struct{}) {
	p.arrived = arrived
	p.armed.Store(true)
}

// A batch's answer is lost while Resend is still working on the request
// (it holds it in flight): the worker's connection is cut without an
// answer, on a kept-alive connection. net/http would send the same
// request again at once on its own (a request with an Idempotency-Key is
// one it deems replayable), and Resend would refuse the copy with 409
// concurrent_idempotent_requests, a refusal that hid the first's lost
// answer; the worker's client refuses net/http that copy
// (httpprovider), so the worker sees the lost answer itself. It must
// leave the batch unknown, to be sent again only as it was, under its
// key. When Resend finishes the first request it sends the batch; a
// member sent meanwhile in another batch, under another key, would be a
// second e-mail.
func TestResendBatchAnswerLostWhileInFlight(t *testing.T) {
	t.Parallel()
	held := fault(6*time.Second, 60*time.Second)
	c := newResendBatchCluster(t)
	proxy := newCutProxy(t, c.resend.URL)
	c.startAPI()
	cut := c.startWorker("RESEND_BASE_URL", proxy.URL)
	c.startReconciler()
	// A first order opens the worker's connection to Resend, which it
	// keeps alive: the request cut later goes over a reused connection.
	c.placeOrders("batch-inflight-first", 1)
	testenv.WaitFor(t, "the first e-mail", 30*time.Second, func() bool { return c.emailCount() == 1 })
	c.settled(30 * time.Second)
	before := len(c.batches())

	arrived, release := c.resend.HoldNext()
	proxy.arm(arrived)
	c.gather("resend")
	c.placeOrders("batch-inflight", 4)
	select {
	case <-proxy.cut:
	case <-time.After(30 * time.Second):
		t.Fatal("no batch request was cut")
	}
	heldAt := time.Now()
	b := c.batches()[before]
	c.startWorker()
	time.Sleep(time.Until(heldAt.Add(held)))
	early := len(c.resend.Messages()) - 1
	release()
	c.settled(2 * time.Minute)
	c.verdict(fmt.Sprintf("Resend batch's answer lost while Resend works on it %v, on a kept connection", held), expect{})
	t.Logf("batch of %d; %d e-mails sent while its first request was held; %d batch requests; decisions: %d batch_replay",
		len(b.members), early, c.resend.Counts().Batches, c.decisions(reconcile.DecisionBatchReplay))
	// The members' outcome: unknown, told by the cut itself — no copy of
	// the request went out on its own to be refused. (A 409 in the
	// worker's log says nothing of net/http: the worker's own re-sends of
	// the lost batch and the replay are refused 409 too while Resend
	// still holds the first.)
	lines := strings.Split(cut.Output(), "\n")
	if !slices.ContainsFunc(lines, func(l string) bool {
		return strings.Contains(l, `"error_class":"ambiguous"`) && strings.Contains(l, `"stage":"data"`) && !strings.Contains(l, `"http_status"`)
	}) {
		t.Errorf("the worker never saw the cut request's answer lost: the scenario did not happen")
	}
	if n := proxy.copiesOfTheCut(500 * time.Millisecond); n > 0 {
		t.Errorf("%d copies of the cut request within 500ms of the cut: net/http sent it again on its own", n)
	}
	if early != 0 {
		t.Errorf("%d e-mails while the batch's first request was held: its members went in another batch", early)
	}
	c.sentAgainWhole(b)
}
