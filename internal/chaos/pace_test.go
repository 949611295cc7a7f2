package chaos_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// A flash sale at the provider's pace (issue 33): Resend allows 5
// requests a second in all and answers 429 with its ratelimit-* and
// retry-after headers beyond; two worker processes share one budget
// (internal/pace) and must send at that pace, not beyond it and not far
// below it. The checkouts are placed through the API in a few seconds,
// many more than the provider's pace sends in that time.
//
// Sizes: make test places 60 orders, and 30 behind 30 newsletters; make
// chaos-long places the 300, which at 5 a second, one request an
// e-mail, is its "at least 60 s, within 66 s", and 100 behind 100. Its
// "2-minute flash sale" is that: 300 checkouts arriving at once is the
// harder case for the pace (the whole sale waits for tokens from the
// first second, and the checkouts load the machine while the first
// requests leave), and the one the issue measured before (162 s, 38%
// refused).

// flashRate is the stand-in's limit and the workers' RESEND_RATE
// (CHAOS_FLASH_RATE sets another RESEND_RATE, to see what pacing above
// the limit does; CHAOS_FLASH_LOGS names a directory for the workers'
// logs and the spacing of the requests the stand-in admitted).
const flashRate = 5

// flashSale is one run's measure at the stand-in.
type flashSale struct {
	requests, refused int           // requests the stand-in's rate limit counted; of them refused with 429 rate_limit_exceeded
	sending           int           // requests it admitted
	span              time.Duration // from the first it admitted to the last
	confirmations     time.Duration // from the first checkout of the sale to its last confirmation at the stand-in
	perRequest        float64       // e-mails a request that sent
}

// pace is the requests admitted a second over their span, as a share of
// the limit: n requests evenly spaced at the limit span (n-1)/limit.
func (f flashSale) pace() float64 {
	if f.sending < 2 || f.span <= 0 {
		return 0
	}
	return float64(f.sending-1) / f.span.Seconds() / flashRate
}

func (f flashSale) refusedShare() float64 {
	if f.requests == 0 {
		return 0
	}
	return float64(f.refused) / float64(f.requests)
}

func (f flashSale) String() string {
	return fmt.Sprintf("pace %.0f%% of the limit, %d of %d requests refused (%.1f%%), %.1f e-mails a request, the sale's confirmations sent in %.1f s",
		100*f.pace(), f.refused, f.requests, 100*f.refusedShare(), f.perRequest, f.confirmations.Seconds())
}

// newFlashCluster is a Resend cluster (newResendCluster) whose stand-in
// allows flashRate requests a second and whose workers are paced at it,
// with PROVIDER_BATCHES as batches says, and which knows a subscription
// template, newsletter, whose deliveries travel the later lane.
func newFlashCluster(t *testing.T, batches string) *cluster {
	t.Helper()
	c := newResendCluster(t)
	c.resend.SetRateLimit(flashRate)
	dir := t.TempDir()
	for name, body := range map[string]string{
		"newsletter/schema.json":  `{"type": "object", "required": ["customer_name"], "properties": {"customer_name": {"type": "string"}}}`,
		"newsletter/sample.json":  `{"customer_name": "Ana"}`,
		"newsletter/meta.json":    `{"from_name": "Toko Ana Kabar", "category": "subscription"}`,
		"newsletter/subject.tmpl": "Kabar dari Toko Ana",
		"newsletter/text.tmpl":    "Halo {{.customer_name}}",
		"newsletter/html.tmpl":    "<p>Halo {{.customer_name}}</p>",
	} {
		testenv.WriteFile(t, filepath.Join(dir, filepath.FromSlash(name)), body)
	}
	const secret = "chaos-unsubscribe-secret-0123456789abcdef"
	c.smtpEnv = append(c.smtpEnv, "RESEND_RATE", cmp.Or(os.Getenv("CHAOS_FLASH_RATE"), strconv.Itoa(flashRate)), "PROVIDER_BATCHES", batches,
		"TEMPLATES_DIR", dir, "UNSUBSCRIBE_URL", "https://shop.example/sekali", "UNSUBSCRIBE_SECRET", secret)
	c.recEnv = append(c.recEnv, "TEMPLATES_DIR", dir)
	c.startAPI("TEMPLATES_DIR", dir, "UNSUBSCRIBE_SECRET", secret)
	w1, w2 := c.startWorker(), c.startWorker()
	c.startReconciler()
	if dir := os.Getenv("CHAOS_FLASH_LOGS"); dir != "" {
		t.Cleanup(func() {
			_ = os.WriteFile(filepath.Join(dir, t.Name()+"-w1.log"), []byte(w1.Output()), 0o644)
			_ = os.WriteFile(filepath.Join(dir, t.Name()+"-w2.log"), []byte(w2.Output()), 0o644)
		})
	}
	return c
}

// queueNewsletters queues n newsletters about one order, each to a
// recipient of its own: a backlog of subscription mail.
func (c *cluster) queueNewsletters(n int) {
	c.t.Helper()
	c.placeOrders("backlog-order", 1)
	o := c.orders[len(c.orders)-1]
	for i := range n {
		status, body := c.post(c.backendKey, "/v1/orders/"+o.OrderID.String()+"/notifications",
			fmt.Sprintf(`{"template":"newsletter","event_id":"news-%d","recipient":"news-%d@example.com","data":{"customer_name":"Pelanggan"}}`, i, i))
		if status != http.StatusCreated {
			c.t.Fatalf("queue newsletter %d: %d %s", i, status, body)
		}
	}
}

// measureFlash reads the run's measure off the stand-in: the requests
// its rate limit counted, the refusals, the span of those it admitted,
// the e-mails a request carried, and when the confirmations of the
// orders placed from sale on (their recipients start with prefix)
// reached it.
func (c *cluster) measureFlash(sale time.Time, prefix string) flashSale {
	c.t.Helper()
	var f flashSale
	var admitted []time.Time
	for _, a := range c.resend.Arrivals() {
		f.requests++
		if a.Refused {
			f.refused++
			continue
		}
		admitted = append(admitted, a.At)
	}
	f.sending = len(admitted)
	if len(admitted) > 0 {
		f.span = admitted[len(admitted)-1].Sub(admitted[0])
	}
	if os.Getenv("CHAOS_FLASH_LOGS") != "" {
		var gaps []string
		for i := flashRate; i < len(admitted); i++ {
			gaps = append(gaps, admitted[i].Sub(admitted[i-flashRate]).Round(time.Millisecond).String())
		}
		c.t.Logf("admitted i - admitted i-%d: %s", flashRate, strings.Join(gaps, " "))
	}
	msgs := c.resend.Messages()
	var last time.Time
	for _, m := range msgs {
		if strings.HasPrefix(m.To[0], prefix) && m.SentAt.After(last) {
			last = m.SentAt
		}
	}
	if f.sending > 0 {
		f.perRequest = float64(len(msgs)) / float64(f.sending)
	}
	f.confirmations = last.Sub(sale)
	return f
}

// shopSeesSent asserts that every order the sale placed (its recipient
// starts with prefix) shows the shop, through the API, every one of its
// notifications sent.
func (c *cluster) shopSeesSent(prefix string) {
	c.t.Helper()
	_, key, err := apikey.NewService(c.db.Pool).Create(context.Background(), "test", "chaos shop reader", []apikey.Scope{apikey.ScopeOrdersRead})
	if err != nil {
		c.t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for _, o := range c.orders {
		if !strings.HasPrefix(o.Email, prefix) {
			continue
		}
		req, err := http.NewRequest(http.MethodGet, c.apiURL+"/v1/orders/"+o.OrderID.String(), nil)
		if err != nil {
			c.t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := client.Do(req)
		if err != nil {
			c.t.Fatalf("GET order %s: %v", o.OrderID, err)
		}
		var got struct {
			Notifications []struct {
				Template string `json:"template"`
				Status   string `json:"status"`
			} `json:"notifications"`
		}
		err = json.NewDecoder(res.Body).Decode(&got)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || err != nil || len(got.Notifications) == 0 {
			c.t.Errorf("GET order %s: %d, %d notifications, %v", o.OrderID, res.StatusCode, len(got.Notifications), err)
			continue
		}
		for _, n := range got.Notifications {
			if n.Status != string(notify.StatusSent) {
				c.t.Errorf("order %s (%s): the shop sees its %s %s, want sent", o.OrderID, o.Email, n.Template, n.Status)
			}
		}
	}
}

// checkPace asserts what the "done when" says of any flash
// sale: fewer than 2% of the requests refused, and the requests admitted
// at 90% of the limit or more. Those are the bounds of make chaos-long's
// sale, of some 400 requests. make test's is under a hundred, where one
// refusal is over 1% and its second of pause (Resend's retry-after) 5%
// of the pace: the refusals come in the sale's first seconds, while the
// checkouts load the machine, however long the sale is. There it allows
// two refusals, and a pace of 80%.
func checkPace(t *testing.T, f flashSale) {
	t.Helper()
	checkRefused(t, f)
	if least := size(0.8, 0.9); f.pace() < least {
		t.Errorf("%d requests admitted in %v: %.2f a second, %.0f%% of the limit of %d, want %.0f%% or more",
			f.sending, f.span.Round(time.Millisecond), f.pace()*flashRate, 100*f.pace(), flashRate, 100*least)
	}
}

// timedAlone runs a scenario in parallel with the others in make test;
// in make chaos-long, where it asserts the bound in seconds, it
// runs alone, before the parallel scenarios begin, as the issue measured
// it. Its bound has about 4% to spare (300 requests at 95% of 5 a
// second are 63 s of the 66), and a refusal costs a second (Resend's
// retry-after): beside another scenario's four processes on a 2-core
// machine, a worker stalled between its request's turn at the door and
// its write is refused now and then (3 of 309 in one such run, 69 s;
// alone, none of 300 and 63.5 s).
func timedAlone(t *testing.T) {
	if size(true, false) {
		t.Parallel()
	}
}

// checkRefused is checkPace's share of refusals alone.
func checkRefused(t *testing.T, f flashSale) {
	t.Helper()
	if f.refusedShare() >= 0.02 && f.refused > size(2, 0) {
		t.Errorf("%d of %d requests refused with 429 (%.1f%%), want fewer than 2%%", f.refused, f.requests, 100*f.refusedShare())
	}
}

// One request an e-mail (PROVIDER_BATCHES off): the measure,
// the sale's confirmations at the provider's pace, exactly once each; in
// make chaos-long its 300 all sent within 66 s.
func TestFlashSaleOneRequestAnEmail(t *testing.T) {
	timedAlone(t)
	orders := size(60, 300)
	c := newFlashCluster(t, "off")
	sale := time.Now()
	c.start = sale
	c.placeAtOnce("flash", orders, 8)
	placing := time.Since(sale)
	c.settled(time.Duration(orders)*time.Second/flashRate + 2*time.Minute)
	f := c.measureFlash(sale, "flash-")
	r := c.verdict(fmt.Sprintf("flash sale at Resend's %d/s, one request an e-mail: %d orders (placed in %.1f s); %s",
		flashRate, orders, placing.Seconds(), f), expect{})
	if r.Emails != orders {
		t.Errorf("%d e-mails at Resend, want %d", r.Emails, orders)
	}
	c.shopSeesSent("flash-")
	checkPace(t, f)
	if orders >= 300 && f.confirmations > 66*time.Second {
		t.Errorf("the sale's %d confirmations all sent %.1f s after its first checkout, want within 66 s (at least 90%% of the limit)", orders, f.confirmations.Seconds())
	}
}

// Confirmations first: with a newsletter backlog queued and going out
// before the sale, one request an e-mail, the sale's confirmations go
// ahead of what is left of it, at the provider's pace, exactly once
// each, and the backlog after them.
func TestFlashSaleBehindANewsletterBacklog(t *testing.T) {
	t.Parallel()
	orders, backlog := size(30, 100), size(30, 100)
	c := newFlashCluster(t, "off")
	c.queueNewsletters(backlog)
	testenv.WaitFor(t, "the backlog to be going out", 30*time.Second, func() bool { return c.emailCount() >= 3 })
	sale := time.Now()
	c.start = sale
	c.placeAtOnce("flash", orders, 8)
	placing := time.Since(sale)
	c.settled(time.Duration(orders+backlog)*time.Second/flashRate + 2*time.Minute)
	f := c.measureFlash(sale, "flash-")
	r := c.verdict(fmt.Sprintf("flash sale at Resend's %d/s, one request an e-mail: %d orders (placed in %.1f s) behind %d newsletters; %s",
		flashRate, orders, placing.Seconds(), backlog, f), expect{})
	if r.Emails != orders+backlog+1 {
		t.Errorf("%d e-mails at Resend, want %d: one for each order and newsletter", r.Emails, orders+backlog+1)
	}
	c.shopSeesSent("flash-")
	checkPace(t, f)
	confirmationsFirst(t, c, backlog)
}

// confirmationsFirst asserts that the sale's confirmations never waited
// behind the backlog: between the sale's first confirmation at Resend
// and its last, at most one newsletter a worker went out (the one whose
// token its worker was taking as the first confirmation asked for one,
// which may leave after it), and most of the backlog was still waiting
// when the last confirmation went. While a confirmation waits for its
// token, in either worker, the budget gives the later lane none
// (pace.Later): a newsletter in hand is handed back, freeing its slot
// for the confirmations queued behind it. Without the later lane the
// backlog would share the pace with the sale, a third of it or more;
// with the lane in each worker's line alone (as before the budget had
// lanes), a worker whose confirmations were all sent gave its slots to
// newsletters while the other's still waited (10 in one run).
func confirmationsFirst(t *testing.T, c *cluster, backlog int) {
	t.Helper()
	var first, last time.Time
	var news []time.Time
	for _, m := range c.resend.Messages() {
		switch {
		case strings.HasPrefix(m.To[0], "flash-"):
			if first.IsZero() || m.SentAt.Before(first) {
				first = m.SentAt
			}
			if m.SentAt.After(last) {
				last = m.SentAt
			}
		case strings.HasPrefix(m.To[0], "news-"):
			news = append(news, m.SentAt)
		}
	}
	var before, during int
	for _, at := range news {
		switch {
		case at.Before(first):
			before++
		case !at.After(last):
			during++
		}
	}
	t.Logf("newsletters: %d of %d sent before the sale's first confirmation, %d during its confirmations, %d after the last", before, len(news), during, len(news)-before-during)
	const workers = 2
	if during > workers {
		t.Errorf("%d newsletters went out between the sale's first confirmation and its last, want at most one a worker (%d): confirmations waited behind the backlog",
			during, workers)
	}
	if after := len(news) - before - during; after < backlog/2 {
		t.Errorf("only %d of %d newsletters were still waiting when the last confirmation went: the backlog was not there to wait behind", after, backlog)
	}
}

// Batches (PROVIDER_BATCHES on, the default, issue 34): the sale's
// confirmations ride together, a request carrying whoever waited for
// the token, so the orders go out about as fast as they are placed.
// No backlog here: at a hundred e-mails a request it drains in a second,
// before the sale begins.
func TestFlashSaleInBatches(t *testing.T) {
	timedAlone(t)
	orders := size(60, 300)
	c := newFlashCluster(t, "on")
	sale := time.Now()
	c.start = sale
	c.placeAtOnce("flash", orders, 8)
	placing := time.Since(sale)
	c.settled(2 * time.Minute)
	f := c.measureFlash(sale, "flash-")
	r := c.verdict(fmt.Sprintf("flash sale at Resend's %d/s, in batches: %d orders (placed in %.1f s); %s",
		flashRate, orders, placing.Seconds(), f), expect{})
	if r.Emails != orders {
		t.Errorf("%d e-mails at Resend, want %d", r.Emails, orders)
	}
	c.shopSeesSent("flash-")
	if f.perRequest < 2 {
		t.Errorf("%.1f e-mails a request: the sale did not go in batches", f.perRequest)
	}
	// The pace is the limit's while anything waits, which with batches
	// is while the orders are being placed: measured where that spans
	// ten requests at least.
	if f.sending >= 10 {
		checkPace(t, f)
	} else {
		checkRefused(t, f)
	}
	if orders >= 300 && f.confirmations > 5*time.Second {
		t.Errorf("the sale's %d confirmations all sent %.1f s after its first checkout (placed in %.1f s), want within 5 s", orders, f.confirmations.Seconds(), placing.Seconds())
	}
}

// placeAtOnce places n orders through the API from clients at a time,
// as a flash sale's shoppers do, and remembers them.
func (c *cluster) placeAtOnce(prefix string, n, clients int) {
	c.t.Helper()
	out := make([]placed, n)
	errs := make([]string, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range clients {
		wg.Go(func() {
			for i := range next {
				email := fmt.Sprintf("%s-%d@example.com", prefix, i)
				status, p, err := c.checkout(email, uuid.NewString())
				if err != nil || status != http.StatusCreated {
					errs[i] = fmt.Sprintf("checkout %s: %d %v", email, status, err)
				}
				out[i] = p
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, e := range errs {
		if e != "" {
			c.t.Fatal(e)
		}
	}
	c.orders = append(c.orders, out...)
}
