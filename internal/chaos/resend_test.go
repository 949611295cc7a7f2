package chaos_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/resend/resendtest"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// Resend's bad minutes, against a server that speaks Resend's API and
// deduplicates by Idempotency-Key as Resend documents: Resend down,
// answers lost after it sent, and a request held in flight past the
// worker's lease. With Resend, an ambiguous send is sent again under the
// same key (PROVIDER_DEDUP_WINDOW) and the key makes it one e-mail.

// newResendCluster is a cluster whose workers send through Resend's HTTP
// API and whose reconciler settles ambiguous sends Resend's way.
func newResendCluster(t *testing.T) *cluster {
	t.Helper()
	rs := resendtest.NewServer()
	t.Cleanup(rs.Close)
	db := testenv.NewDB(t)
	c := &cluster{t: t, db: db, redis: testenv.NewRedisServer(t), resend: rs, backendKey: backendKey(t, db)}
	c.redisURL = c.redis.URL
	// Unpaced (RESEND_RATE 0): these scenarios fault the stand-in's
	// requests in the order they come, and at Resend's default pace (2
	// a second) the reconciler's sends again would come before the last
	// first attempts. The flash sale (pace_test.go) paces. One message a
	// request (PROVIDER_BATCHES off): these are the lone send's faults;
	// the batches' have scenarios of their own.
	c.smtpEnv = []string{"PROVIDER", "resend", "RESEND_API_KEY", rs.APIKey, "RESEND_BASE_URL", rs.URL, "PROVIDER_TIMEOUT", "2s", "RESEND_RATE", "0",
		"PROVIDER_BATCHES", "off"}
	c.recEnv = []string{"PROVIDER", "resend", "MAIL_LOOKUP_URL", ""}
	return c
}

// decisions counts the reconciler's decisions of one kind in the history.
func (c *cluster) decisions(decision string) int {
	c.t.Helper()
	var n int
	if err := c.db.Pool.QueryRow(context.Background(),
		"SELECT count(*) FROM delivery_events WHERE detail->>'decision' = $1", decision).Scan(&n); err != nil {
		c.t.Fatal(err)
	}
	return n
}

func TestResendDownThenBack(t *testing.T) {
	t.Parallel()
	down := fault(15*time.Second, 2*time.Minute)
	c := newResendCluster(t)
	c.startAPI()
	c.startWorker()
	c.startWorker()
	c.startReconciler()
	c.placeOrders("resend-before", 3)
	testenv.WaitFor(t, "the first e-mails", 30*time.Second, func() bool { return c.emailCount() >= 3 })
	c.resend.SetOutage(&resendtest.Fault{Status: 503, Name: "service_unavailable", Message: "We are experiencing an outage."})
	c.placeDuring("resend-down", 20, down)
	c.noAttemptsUsed()
	c.resend.SetOutage(nil)
	backlogWithinAMinute(t, c.recovered(time.Now(), 2*time.Minute))
	c.verdict(fmt.Sprintf("Resend answers 503 for %v, then back", down), expect{})
}

// Resend took each request but the answer never came back (the
// connection cut after it sent, or before): the worker cannot know, the
// reconciler sends again under the same key, and Resend answers the
// first send's id instead of sending again.
func TestResendAnswersLost(t *testing.T) {
	t.Parallel()
	c := newResendCluster(t)
	var faults []resendtest.Fault
	for i := range 12 {
		faults = append(faults, resendtest.Fault{Cut: true, Sent: i%3 != 2})
	}
	c.resend.FailNext(faults...)
	c.startAPI()
	c.startWorker()
	c.startWorker()
	c.startReconciler()
	c.placeOrders("resend-lost", 12)
	c.settled(2 * time.Minute)
	r := c.verdict("Resend answers lost (8 sent, 4 not)", expect{})
	if n := c.decisions("provider_dedupes"); n < 12 {
		t.Errorf("%d ambiguous sends sent again under their key, want all 12", n)
	}
	if req := c.resend.Requests(); req < r.Emails+12 {
		t.Errorf("%d requests for %d e-mails: the lost answers were not sent again", req, r.Emails)
	}
}

// Resend holds a request past the worker's PROVIDER_TIMEOUT and its
// lease: the worker gives up on an ambiguous send, the reconciler sends
// it again while the first is still in flight (Resend: 409, try later),
// and when the first completes the retry gets its answer. This is the
// window no lease closes — a send still on its way when another begins —
// and Resend's key closes it.
func TestResendHoldsARequestPastTheLease(t *testing.T) {
	t.Parallel()
	held := fault(10*time.Second, 90*time.Second)
	c := newResendCluster(t)
	arrived, release := c.resend.HoldNext()
	c.startAPI()
	c.startWorker()
	c.startWorker()
	c.startReconciler()
	c.placeOrders("resend-held", 1)
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("no request reached Resend")
	}
	c.placeOrders("resend-meanwhile", 5)
	testenv.WaitFor(t, "the reconciler to send the held one again", 60*time.Second, func() bool {
		return c.decisions("provider_dedupes") >= 1
	})
	time.Sleep(held)
	release()
	c.settled(2 * time.Minute)
	c.verdict(fmt.Sprintf("Resend holds a request for %v, past the lease", held), expect{})
	if n := c.resend.CountByIdempotencyKey(mail.ProviderKey(c.orders[0].Key)); n != 1 {
		t.Errorf("%d e-mails under the held delivery's key, want 1", n)
	}
}

// heldProxy forwards TCP connections to target, except that what clients
// send is held back while held is set: bytes that left a worker and sit
// in the network, as a paused VM's buffered request does.
type heldProxy struct {
	URL      string
	strip    string // a header line the held bytes lose on their way, if set
	mu       sync.Mutex
	held     bool
	waiting  int // chunks held
	stripped int // header lines removed
	release  chan struct{}
}

func newHeldProxy(t *testing.T, target, strip string) *heldProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p := &heldProxy{URL: "http://" + ln.Addr().String(), strip: strip, held: true, release: make(chan struct{})}
	host := strings.TrimPrefix(target, "http://")
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			go p.forward(client, host)
		}
	}()
	return p
}

// forward copies client to a connection to host, each chunk after the
// release while held; a client that hangs up meanwhile does not take its
// bytes back. It dials host with the first chunk it forwards, as a
// delayed packet opens nothing before it arrives.
func (p *heldProxy) forward(client net.Conn, host string) {
	defer client.Close()
	var server net.Conn
	defer func() {
		if server != nil {
			_ = server.(*net.TCPConn).CloseWrite()
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			p.mu.Lock()
			held := p.held
			if held {
				p.waiting++
			}
			p.mu.Unlock()
			chunk := buf[:n]
			if held {
				<-p.release
				chunk = p.stripHeader(chunk)
			}
			if server == nil {
				if server, err = net.Dial("tcp", host); err != nil {
					return
				}
				go func() { _, _ = io.Copy(client, server) }()
			}
			if _, werr := server.Write(chunk); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// stripHeader removes the header line p.strip from an HTTP/1.1 request's
// bytes: the request a worker would have sent without it. Headers are
// written in one piece ahead of the body, so one chunk holds the line.
func (p *heldProxy) stripHeader(chunk []byte) []byte {
	if p.strip == "" {
		return chunk
	}
	end := bytes.Index(chunk, []byte("\r\n\r\n"))
	if end < 0 {
		return chunk
	}
	lines := bytes.Split(chunk[:end], []byte("\r\n"))
	kept := lines[:0]
	for _, l := range lines {
		name, _, ok := bytes.Cut(l, []byte(":"))
		if ok && strings.EqualFold(string(name), p.strip) {
			p.mu.Lock()
			p.stripped++
			p.mu.Unlock()
			continue
		}
		kept = append(kept, l)
	}
	return append(bytes.Join(kept, []byte("\r\n")), chunk[end:]...)
}

func (p *heldProxy) strippedLines() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stripped
}

func (p *heldProxy) holding() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiting
}

func (p *heldProxy) let() {
	p.mu.Lock()
	p.held = false
	p.mu.Unlock()
	close(p.release)
}

// The case no lease closes: a worker's request has left it, but reaches
// Resend only after its lease expired, the reconciler sent the delivery
// again and another worker's copy was sent — a paused VM whose kernel had
// the bytes buffered, or a network that sat on them. The late copy
// carries the same key and body, and Resend answers it with the first
// send's id: one e-mail. Without Resend's key this is the duplicate the
// runbook's section 4 counts: the control runs the same scenario with the
// key taken out of the late copy and must see the second e-mail.
func TestResendLateCopyFromAStalledWorker(t *testing.T) {
	t.Parallel()
	r, _ := lateCopyFromAStalledWorker(t, "", "")
	if r.Duplicates != 0 {
		t.Errorf("%d duplicates, want 0", r.Duplicates)
	}
}

func TestResendLateCopyWithoutTheKeyIsASecondEmail(t *testing.T) {
	t.Parallel()
	r, late := lateCopyFromAStalledWorker(t, "Idempotency-Key", "CONTROL: ")
	if r.Duplicates != late {
		t.Errorf("%d duplicates for %d late copies without our key, want as many: each is another e-mail", r.Duplicates, late)
	}
}

// lateCopyFromAStalledWorker runs the scenario; strip names a header the
// late copies lose on their way, and late counts the copies that lost it.
// The stalled worker may be given the delivery more than once before the
// other worker gets it (the reconciler resets it each time its lease runs
// out): each of its tries is held, and each arrives late.
func lateCopyFromAStalledWorker(t *testing.T, strip, label string) (r result, late int) {
	delay := fault(5*time.Second, 60*time.Second)
	c := newResendCluster(t)
	proxy := newHeldProxy(t, c.resend.URL, strip)
	c.startAPI()
	c.startWorker("RESEND_BASE_URL", proxy.URL, "WORKER_CONCURRENCY", "1")
	c.placeOrders("resend-late", 1)
	testenv.WaitFor(t, "the stalled worker's request to be on its way", 30*time.Second, func() bool { return proxy.holding() > 0 })
	c.startWorker()
	c.startReconciler()
	testenv.WaitFor(t, "the delivery to be sent again by the other worker", 60*time.Second, func() bool { return c.emailCount() == 1 })
	c.settled(time.Minute)
	before := c.resend.Requests()
	time.Sleep(delay)
	proxy.let()
	testenv.WaitFor(t, "the late copy to reach Resend", 30*time.Second, func() bool { return c.resend.Requests() > before })
	time.Sleep(time.Second) // let it be handled
	late = proxy.strippedLines()
	if strip != "" && late < 1 {
		t.Fatalf("no %s line taken out of the late copies", strip)
	}
	r = c.verdict(fmt.Sprintf("%sResend: a stalled worker's copy arrives %v after the resend%s", label, delay,
		map[bool]string{true: ", without our key", false: ""}[strip != ""]), expect{control: strip != ""})
	// A copy without the key is not counted under it: one either way.
	if n := c.resend.CountByIdempotencyKey(mail.ProviderKey(c.orders[0].Key)); n != 1 {
		t.Errorf("%d e-mails under the delivery's key, want 1", n)
	}
	if n := c.decisions("provider_dedupes"); n < 1 {
		t.Errorf("the reconciler sent the stalled delivery again %d times, want at least once", n)
	}
	return r, late
}
