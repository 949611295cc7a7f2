//go:build browser

package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/redisconn"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// The overview's last hour in a real browser (Debian's headless
// Chromium): after a worker's sends and an hour of history built through
// the domain, the chart is drawn — its lanes, bars and provider spans
// there and of a size, nothing outside the chart, no label running into
// the plot or out of its span, the down state hatched — with no message
// of the console's policy refusing anything (a style attribute set on
// purpose at the end proves such a message would be seen); and at a
// phone's width (390 px) the page shows the narrow chart instead, whole
// and without scrolling sideways, this minute's bars at its right edge
// in view. CONSOLE_SCREENSHOT saves the overview (docs/console.png).
func TestConsoleOverviewLastHourInABrowser(t *testing.T) {
	chromium := chromiumPath(t)
	s := setup(t)
	sink := s.startWorker(t, nil)
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)
	s.postOrder(t, validCheckout, nil)
	s.postOrder(t, validCheckout, nil)
	testenv.WaitFor(t, "the worker to send the three confirmations", 30*time.Second, func() bool { return sink.Count() >= 3 })
	hour := buildHour(t, s, o.ID)
	standInWorker(t, s)

	_, token, err := s.keys.Create(context.Background(), "test", "Ana Operator", []apikey.Scope{apikey.ScopeAdmin})
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1300, 1500), chromedp.UserDataDir(t.TempDir()))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 90*time.Second)
	defer cancel()

	var mu sync.Mutex
	var console []string
	var wg sync.WaitGroup
	lctx, stopListening := context.WithCancel(ctx)
	messages := chromedp.Console(lctx)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m, err := range messages {
			if err != nil {
				return
			}
			mu.Lock()
			console = append(console, m.String())
			mu.Unlock()
		}
	}()
	seen := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), console...)
	}
	defer func() { stopListening(); wg.Wait() }()

	err = chromedp.Do(ctx,
		chromedp.Navigate(s.url+"/admin/sign-in"),
		chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SendKeys(chromedp.ID("key"), token),
	)
	if err != nil {
		t.Fatalf("sign in: %v", err)
	}
	if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("sign-in"))); err != nil {
		t.Fatalf("sign in: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("last-hour"))); err != nil {
		t.Fatalf("the overview: %v", err)
	}

	measure := func(id string) string {
		return strings.ReplaceAll(measureChart, "CHART", id)
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[chartMeasure](measure("last-hour")))
	if err != nil {
		t.Fatalf("measure the chart: %v", err)
	}
	if got.Chart.Width < 700 || got.Chart.Height < 300 {
		t.Errorf("the chart is %vx%v px", got.Chart.Width, got.Chart.Height)
	}
	checkChart(t, "at 1300 px", got, hour)
	if got.PageOverflow > 0 || got.BoxOverflow > 0 {
		t.Errorf("at 1300 px the overview scrolls %v px sideways, a chart's box %v px", got.PageOverflow, got.BoxOverflow)
	}
	if got.Shown != "last-hour" {
		t.Errorf("at 1300 px the page shows the chart %q, want the wide one", got.Shown)
	}

	if shot := os.Getenv("CONSOLE_SCREENSHOT"); shot != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(shot, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot in %s", shot)
	}

	// A phone 390 px wide: the page keeps to its width and shows the
	// narrow chart, whole: every lane's name, the hour up to this
	// minute's bars at its right edge, the totals, in type of a readable
	// size; no chart's box scrolls.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844), chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("last-hour-narrow"))); err != nil {
		t.Fatal(err)
	}
	narrow, err := chromedp.Run(ctx, chromedp.Evaluate[chartMeasure](measure("last-hour-narrow")))
	if err != nil {
		t.Fatalf("measure the narrow chart: %v", err)
	}
	checkChart(t, "at 390 px", narrow, hour)
	if narrow.Shown != "last-hour-narrow" || narrow.PageOverflow > 0 || narrow.BoxOverflow > 0 {
		t.Errorf("at 390 px the page shows the chart %q (want the narrow one), scrolls %v px sideways and a chart's box %v px (want 0)",
			narrow.Shown, narrow.PageOverflow, narrow.BoxOverflow)
	}
	// The worker's sends are this minute's bars, or the last one's if
	// the minute turned since.
	column := narrow.Now.Right - narrow.Now.Left
	if narrow.Chart.Left < 0 || narrow.Chart.Right > 390 || narrow.Now.Right > narrow.Chart.Right || narrow.Now.Left < narrow.Chart.Left ||
		narrow.LastBar.Right > 390 || narrow.LastBar.Right < narrow.Now.Left-column || narrow.TotalsRight > 390 {
		t.Errorf("at 390 px the chart spans %v to %v px, this minute %v to %v, its last bar ends at %v, the totals at %v: want all within the 390 px, the newest bars drawn",
			narrow.Chart.Left, narrow.Chart.Right, narrow.Now.Left, narrow.Now.Right, narrow.LastBar.Right, narrow.TotalsRight)
	}
	if narrow.SmallestText < 9 {
		t.Errorf("at 390 px the chart's smallest text is %.1f px high, want 9 or more", narrow.SmallestText)
	}
	if shot := os.Getenv("CONSOLE_SCREENSHOT"); shot != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		phone := strings.TrimSuffix(shot, ".png") + "-phone.png"
		if err := os.WriteFile(phone, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot at 390 px in %s", phone)
	}

	if refused := policyMessages(seen()); len(refused) > 0 {
		t.Errorf("the console's policy refused something on the overview:\n%s", strings.Join(refused, "\n"))
	}
	// The control: a style attribute, which the policy refuses, set now.
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`document.querySelector('h1').setAttribute('style', 'color: red')`)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the browser to say its policy refused the control's style attribute", 10*time.Second, func() bool {
		return len(policyMessages(seen())) > 0
	})
}

// checkChart checks what the browser measured of a chart: its lanes,
// bars and provider spans there and of a size, nothing outside it, no
// label running into the plot or out of its span, the down state
// hatched, the sent lane's total the hour's.
func checkChart(t *testing.T, at string, got chartMeasure, hour hourCounts) {
	t.Helper()
	if got.Lanes != 7 || got.Bars < 60 || got.Providers != 3 || got.Spans < 4 || got.EmptyNotice != 0 {
		t.Errorf("%s the chart has %d lanes, %d bars, %d provider lanes with %d spans, %d empty notices", at, got.Lanes, got.Bars, got.Providers, got.Spans, got.EmptyNotice)
	}
	for what, marks := range map[string][]string{"without a size": got.Flat, "outside the chart": got.Outside, "running into the plot or out of their span": got.IntoPlot} {
		if len(marks) > 0 {
			t.Errorf("%s marks %s:\n%s", at, what, strings.Join(marks, "\n"))
		}
	}
	if want := fmt.Sprint(hour.sent + 3); got.SentTotal != want {
		t.Errorf("%s the sent lane's total is %q, want %s (the hour's and the worker's three)", at, got.SentTotal, want)
	}
	if got.DownFill != `url("#hatch-down")` {
		t.Errorf("%s the down span is filled with %q, not the hatching", at, got.DownFill)
	}
}

// measureChart measures the chart whose id replaces CHART, in CSS
// pixels (chartMeasure).
const measureChart = `(() => {
	  const svg = document.getElementById('CHART');
	  const b = e => { const r = e.getBoundingClientRect(); return {Left: r.left, Right: r.right, Top: r.top, Bottom: r.bottom, Width: r.width, Height: r.height}; };
	  const c = b(svg), tag = e => e.outerHTML.slice(0, 120);
	  const plot = b(svg.querySelector('.lane .baseline'));
	  const marks = [...svg.querySelectorAll('rect.bar, .span rect')];
	  return {
	    Chart: c,
	    Lanes: svg.querySelectorAll('g.lane').length,
	    Bars: svg.querySelectorAll('rect.bar').length,
	    Spans: svg.querySelectorAll('.span rect').length,
	    Flat: marks.filter(e => { const r = b(e); return !(r.Width > 0 && r.Height > 0); }).map(tag),
	    Outside: [...svg.querySelectorAll('rect, line, text')].filter(e => !e.closest('pattern')).filter(e => { const r = b(e);
	      return r.Left < c.Left - 0.5 || r.Right > c.Right + 0.5 || r.Top < c.Top - 0.5 || r.Bottom > c.Bottom + 0.5; }).map(tag),
	    IntoPlot: [
	      ...[...svg.querySelectorAll('.lane-label, .worker-id')].filter(e => b(e).Right > plot.Left).map(tag),
	      ...[...svg.querySelectorAll('.lane-total, .lane-peak')].filter(e => b(e).Left < plot.Right).map(tag),
	      ...[...svg.querySelectorAll('.span text')].filter(e => { const r = b(e), s = b(e.parentNode.querySelector('rect'));
	        return e.classList.contains('before') ? r.Left < plot.Left || r.Right > s.Left : r.Left < s.Left || r.Right > s.Right; }).map(tag),
	    ],
	    SentTotal: svg.querySelector('.lane-sent .lane-total').textContent,
	    DownFill: getComputedStyle(svg.querySelector('.span-down rect')).fill,
	    PageOverflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
	    BoxOverflow: [...document.querySelectorAll('.chart-wrap')].map(w => w.scrollWidth - w.clientWidth).reduce((a, v) => Math.max(a, v), 0),
	    Providers: svg.querySelectorAll('g.provider').length,
	    EmptyNotice: svg.querySelectorAll('.empty-note').length,
	    Shown: [...document.querySelectorAll('svg.chart[id^="last-hour"]')].filter(e => e.getBoundingClientRect().width > 0).map(e => e.id).join(' '),
	    Now: b(svg.querySelector('rect.now-column')),
	    LastBar: [...svg.querySelectorAll('rect.bar')].map(b).reduce((a, r) => r.Right > a.Right ? r : a, {Left: 0, Right: 0, Top: 0, Bottom: 0, Width: 0, Height: 0}),
	    TotalsRight: Math.max(...[...svg.querySelectorAll('.lane-total, .lane-peak')].map(e => b(e).Right)),
	    SmallestText: Math.min(...[...svg.querySelectorAll('text')].map(e => b(e).Height)),
	  };
	})()`

// chartMeasure is what the browser measured of the overview's chart,
// in CSS pixels.
type chartMeasure struct {
	Chart                  box
	Now, LastBar           box     // the minute now is in; the rightmost bar
	TotalsRight            float64 // where the rightmost total or peak ends
	SmallestText           float64 // the height of the smallest text
	Shown                  string  // the ids of the charts the page shows
	Lanes, Bars, Spans     int
	Flat                   []string // marks without a size
	Outside                []string // marks beyond the chart
	IntoPlot               []string // labels running into the plot or out of their span
	SentTotal, DownFill    string
	PageOverflow           float64 // how far the page scrolls sideways
	BoxOverflow            float64 // how far a chart scrolls in its box
	Providers, EmptyNotice int
}

// box is an element's place on the page, in CSS pixels.
type box struct{ Left, Right, Top, Bottom, Width, Height float64 }

// policyMessages are the console's messages about the Content Security
// Policy.
func policyMessages(all []string) []string {
	var out []string
	for _, m := range all {
		if strings.Contains(m, "Content Security Policy") {
			out = append(out, m)
		}
	}
	return out
}

// hourCounts is what buildHour recorded.
type hourCounts struct{ sent int }

// buildHour makes an hour of history of orderID through the factory, each
// delivery's history moved to its minute (the factory's HistoryAt, on
// purpose): a few deliveries a minute recorded and sent, a relay that
// defers everything for ten minutes and the sends that catch up after
// it, three failures, a delivery held, one cancelled.
func buildHour(t *testing.T, s stack, orderID uuid.UUID) hourCounts {
	t.Helper()
	ctx := context.Background()
	data := map[string]any{"order_id": orderID.String(), "customer_name": "Ana", "carrier": "JNE", "tracking_number": "JNE-1",
		"items": []map[string]any{{"sku": "TEA-01", "name": "Teh", "quantity": 1}}, "shipped_at": "2026-12-01T10:00:00Z"}
	n := 0
	pending := func() notify.Delivery {
		n++
		return s.f.Scheduled(orderID, "order-shipped", fmt.Sprintf("c%d@example.com", n), data, time.Time{})
	}
	now := time.Now()
	ago := func(m int, sec int) time.Time {
		return now.Truncate(time.Minute).Add(time.Duration(-m)*time.Minute + time.Duration(sec)*time.Second)
	}
	var h hourCounts
	for m := 58; m >= 1; m-- {
		rate := 4 + int(math.Round(3*math.Sin(float64(m)/7)))
		switch {
		case m <= 24 && m >= 15: // the relay defers: recorded, deferred, sent after it
			for i := range rate {
				d := pending()
				for range 1 + (i+m)%2 {
					d = s.f.Deferred(d, "421 4.7.0 try again later", false)
				}
				s.f.HistoryAt(s.f.Sent(d, fmt.Sprintf("catch-up-%d", n)), ago(m, i))
				// Its send, after the relay came back: the sent row alone
				// moved to then, on purpose.
				if _, err := s.db.Pool.Exec(ctx, `UPDATE delivery_events SET at = $2 WHERE delivery_id = $1 AND event = 'sent'`,
					d.ID, ago(14-i%3, 5+i)); err != nil {
					t.Fatal(err)
				}
				h.sent++
			}
		default:
			for i := range rate {
				s.f.HistoryAt(s.f.Sent(pending(), fmt.Sprintf("p-%d", n)), ago(m, 3*i))
				h.sent++
			}
		}
		switch m {
		case 41, 33, 7:
			s.f.HistoryAt(s.f.Failed(pending(), "550 5.1.1 no such user"), ago(m, 30))
		case 9:
			s.f.HistoryAt(s.f.Held(pending(), "cannot render: customer_name is missing"), ago(m, 40))
		case 50:
			c := pending()
			if _, err := notify.Cancel(ctx, s.db.Pool, c.ID, notify.Canceller{Actor: "operator:Ana", Operator: true}, "ordered twice"); err != nil {
				t.Fatal(err)
			}
			s.f.HistoryAt(c, ago(m, 20))
		}
	}
	return h
}

// standInWorker publishes, as a worker does every few seconds
// (internal/worker's publishHealth), the providers of a worker that has
// sent through smtp for three hours and finds postmark refusing us for
// seven minutes: written to Redis here, since no test waits hours for a
// worker's state to age.
func standInWorker(t *testing.T, s stack) {
	t.Helper()
	rdb := redisconn.NewClient(s.redis.Opt)
	defer rdb.Close()
	now := time.Now()
	for _, st := range []notify.ProviderState{
		{WorkerID: "sekali-worker-7f9c8d5b-x2k4q", Provider: "smtp", Up: true, Since: now.Add(-3 * time.Hour)},
		{WorkerID: "sekali-worker-7f9c8d5b-x2k4q", Provider: "postmark", Up: false, Since: now.Add(-7 * time.Minute),
			Reason: "503 Service Unavailable: an outage at Postmark"},
	} {
		st.CheckedAt, st.ValidUntil = now, now.Add(time.Hour)
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.HSet(context.Background(), notify.ProviderStateKey(s.redis.Queue), st.WorkerID+" "+st.Provider, b).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
