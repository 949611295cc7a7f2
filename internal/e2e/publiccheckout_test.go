package e2e_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// The public checkout while the API cannot reach Redis, and after: the
// three binaries as they ship, the API's Redis behind a link the test
// cuts, the worker and the reconciler on the real one. Cut, 20 anonymous
// checkouts to one address are each refused 503 and write nothing, so
// the reconciler's passes find nothing to queue and nothing is mailed.
// (Admitted uncounted, as before, they were queued by the reconciler and
// all 20 were mailed to the one address.) Mended, the same 20 have the
// cap per recipient admitted and mailed, 5, and no more; and a mailbox
// spelled otherwise (a sub-address, Gmail's dots, googlemail.com), from
// other clients, is the same recipient: its mailbox gets 5, not one per
// spelling (before: 12 of 12 of ana's sub-addresses and 8 of 8 of
// victim2's spellings were admitted and mailed).
func TestPublicCheckoutWithoutRedisMailsNothing(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	rd := testenv.NewRedis(t)
	sink, err := smtpsink.Start(smtpsink.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	u, err := url.Parse(rd.URL)
	if err != nil {
		t.Fatal(err)
	}
	link := newLink(t, u.Host)
	u.Host = link.addr()
	env := func(redisURL string, extra ...string) map[string]string {
		m := map[string]string{"DATABASE_URL": db.URL, "REDIS_URL": redisURL, "DELIVERY_QUEUE": rd.Queue,
			"MAIL_FROM": "orders@shop.example", "METRICS_ADDR": "127.0.0.1:0", "LOG_LEVEL": "info"}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	api := testenv.Start(t, "api", testenv.Binary(t, "./cmd/api"), env(u.String(),
		"HTTP_ADDR", "127.0.0.1:0", "CHECKOUT_MODE", "public", "RATE_LIMIT_PUBLIC", "0", "TRUSTED_PROXIES", "127.0.0.1/32"))
	apiURL := "http://" + api.WaitLog(t, "api listening", "addr", 60*time.Second)
	apiMetrics := api.WaitLog(t, "api listening", "metrics_addr", time.Second)
	worker := testenv.Start(t, "worker", testenv.Binary(t, "./cmd/worker"), env(rd.URL,
		"SMTP_HOST", sink.Host(), "SMTP_PORT", strconv.Itoa(sink.Port()), "SMTP_TLS", "none"))
	worker.WaitLog(t, "worker started", "worker_id", 60*time.Second)
	rec := testenv.Start(t, "reconciler", testenv.Binary(t, "./cmd/reconciler"), env(rd.URL,
		"RECONCILE_INTERVAL", "100ms", "PENDING_REENQUEUE_AFTER", "500ms"))
	recMetrics := rec.WaitLog(t, "reconciler started", "metrics_addr", 60*time.Second)
	passes := func() float64 { return scrape(t, recMetrics, "sekali_reconciler_pass_duration_seconds_count") }
	// passing waits for ten more passes of the reconciler: long past
	// PENDING_REENQUEUE_AFTER, time to queue whatever was left pending.
	passing := func() {
		t.Helper()
		after := passes() + 10
		testenv.WaitFor(t, "ten passes of the reconciler", 30*time.Second, func() bool { return passes() >= after })
	}
	// checkout places an anonymous checkout to email, from the client
	// the load balancer names ("" for the connection's own address).
	checkout := func(email, from string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, apiURL+"/v1/orders", strings.NewReader(
			`{"customer_email":"`+email+`","customer_name":"Ana","currency":"IDR",`+
				`"items":[{"sku":"S","name":"Sambal","quantity":1,"unit_price":2500050}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", uuid.NewString())
		if from != "" {
			req.Header.Set("X-Forwarded-For", from)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusServiceUnavailable && (res.Header.Get("Retry-After") == "" ||
			res.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(body), "quota-unavailable")) {
			t.Errorf("refused without Redis: Retry-After %q, %s %s", res.Header.Get("Retry-After"), res.Header.Get("Content-Type"), body)
		}
		return res.StatusCode
	}
	checkouts := func() map[int]int {
		t.Helper()
		statuses := map[int]int{}
		for range 20 {
			statuses[checkout("ana@toko.example", "")]++
		}
		return statuses
	}
	rows := func() (orders, deliveries int) {
		t.Helper()
		if err := db.Pool.QueryRow(t.Context(), "SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM notification_deliveries)").
			Scan(&orders, &deliveries); err != nil {
			t.Fatal(err)
		}
		return orders, deliveries
	}

	link.cut()
	if got := checkouts(); got[http.StatusServiceUnavailable] != 20 {
		t.Errorf("without Redis, 20 anonymous checkouts to one address were answered %v, want 20 × 503", got)
	}
	passing()
	if orders, deliveries := rows(); orders != 0 || deliveries != 0 || sink.Count() != 0 {
		t.Errorf("after the reconciler's passes: %d orders, %d deliveries, %d e-mails; want none", orders, deliveries, sink.Count())
	}
	if got := scrape(t, apiMetrics, `sekali_public_checkouts_total{result="unavailable"}`); got != 20 {
		t.Errorf(`sekali_public_checkouts_total{result="unavailable"} = %v, want 20`, got)
	}

	link.mend()
	testenv.WaitFor(t, "the API to reach Redis again", 30*time.Second, func() bool {
		res, err := http.Get(apiURL + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	if got := checkouts(); got[http.StatusCreated] != 5 || got[http.StatusTooManyRequests] != 15 {
		t.Errorf("with Redis back, 20 anonymous checkouts to one address were answered %v, want 5 × 201 and 15 × 429", got)
	}
	testenv.WaitFor(t, "the 5 admitted confirmations to be mailed", 30*time.Second, func() bool { return sink.Count() >= 5 })
	passing()
	if orders, deliveries := rows(); orders != 5 || deliveries != 5 || sink.Count() != 5 || len(sink.ByRecipient("ana@toko.example")) != 5 {
		t.Errorf("with Redis back: %d orders, %d deliveries, %d e-mails; want 5 of each, to her", orders, deliveries, sink.Count())
	}

	// Her mailbox under other spellings, from twelve other clients: the
	// same recipient, who has had her 5.
	statuses := map[int]int{}
	for i := range 12 {
		statuses[checkout(fmt.Sprintf("ana+%d@toko.example", i+1), fmt.Sprintf("2001:db8:43:%x::1", i+1))]++
	}
	if statuses[http.StatusTooManyRequests] != 12 {
		t.Errorf("ana's sub-addresses from 12 clients were answered %v, want 12 × 429", statuses)
	}
	// A Gmail mailbox under eight spellings, from eight clients: 5 admitted.
	statuses = map[int]int{}
	for i, email := range []string{"victim2@gmail.com", "v.ictim2@gmail.com", "vi.ctim2@gmail.com", "vic.tim2@gmail.com",
		"VICT.IM2@gmail.com", "victi.m2+win@gmail.com", "victim2@googlemail.com", "v.i.c.t.i.m.2@googlemail.com"} {
		statuses[checkout(email, fmt.Sprintf("198.51.100.%d", i+1))]++
	}
	if statuses[http.StatusCreated] != 5 || statuses[http.StatusTooManyRequests] != 3 {
		t.Errorf("8 spellings of one Gmail mailbox were answered %v, want 5 × 201 and 3 × 429", statuses)
	}
	testenv.WaitFor(t, "victim2's confirmations to be mailed", 30*time.Second, func() bool { return sink.Count() >= 10 })
	passing()
	perMailbox := map[string]int{} // by domain: each test domain here holds one mailbox
	for _, m := range sink.Messages() {
		for _, to := range m.To {
			_, domain, _ := strings.Cut(strings.ToLower(to), "@")
			perMailbox[strings.Replace(domain, "googlemail.com", "gmail.com", 1)]++
		}
	}
	if perMailbox["toko.example"] != 5 || perMailbox["gmail.com"] != 5 || len(perMailbox) != 2 {
		t.Errorf("e-mails per mailbox: %v; want 5 to ana's (toko.example), 5 to victim2's (gmail.com)", perMailbox)
	}
}

// scrape reads one series' value from a binary's /metrics at addr; a
// series not there is 0.
func scrape(t *testing.T, addr, series string) float64 {
	t.Helper()
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", sc.Text(), err)
			}
			return f
		}
	}
	return 0
}

// link is a TCP path to a server that the test can cut and mend: cut, it
// closes the connections it carries and each new one at once, as a
// network that no longer reaches the server.
type link struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup // the accept loop and the copies
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]bool
}

func newLink(t *testing.T, target string) *link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &link{ln: ln, target: target, conns: map[net.Conn]bool{}}
	l.wg.Add(1)
	go l.serve()
	t.Cleanup(func() {
		ln.Close()
		l.cut()
		l.wg.Wait()
	})
	return l
}

func (l *link) addr() string { return l.ln.Addr().String() }

func (l *link) serve() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return // closed by the test's cleanup
		}
		if !l.track(c) {
			c.Close()
			continue
		}
		server, err := net.Dial("tcp", l.target)
		if err != nil || !l.track(server) {
			c.Close()
			if server != nil {
				server.Close()
			}
			continue
		}
		l.wg.Add(2)
		go l.copy(server, c)
		go l.copy(c, server)
	}
}

// copy moves bytes from src to dst until either closes, then closes both.
func (l *link) copy(dst, src net.Conn) {
	defer l.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// track keeps c to close when the link is cut; false if it is cut now.
func (l *link) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return false
	}
	l.conns[c] = true
	return true
}

func (l *link) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = true
	for c := range l.conns {
		c.Close()
	}
	clear(l.conns)
}

func (l *link) mend() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = false
}
