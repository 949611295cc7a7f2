package httpapi_test

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"

	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/smtpsink"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// The overview's last hour, from a history built through the domain
// (the factory's transitions, each delivery's history moved to its
// minute on purpose) and a real worker whose relay refuses us: the SVG
// is well-formed XML, every mark inside its box; each minute's bar
// carries its count in its <title>, a minute with nothing has none, each
// lane's total and peak are written out; the worker's provider is drawn
// down since it found out, with the relay's words, and not known before
// the worker's state began. The page stays within the console's policy
// (no script, no style attribute or element) and passes the Nu Html
// Checker.
func TestConsoleOverviewDrawsTheLastHour(t *testing.T) {
	t.Parallel()
	s := setup(t)
	s.startWorkerTo(t, nil, smtpsink.Config{OnMail: func(string) error {
		return &gosmtp.SMTPError{Code: 421, EnhancedCode: gosmtp.EnhancedCode{4, 3, 2}, Message: "System not accepting network messages"}
	}})
	var o order.Order
	s.postOrder(t, validCheckout, nil).decode(t, &o)

	now := time.Now().UTC()
	a, b, c, d := now.Add(-40*time.Minute), now.Add(-20*time.Minute), now.Add(-30*time.Minute), now.Add(-10*time.Minute)
	data := map[string]any{"order_id": o.ID.String(), "customer_name": "Ana", "carrier": "JNE", "tracking_number": "JNE-1",
		"items": []map[string]any{{"sku": "TEA-01", "name": "Teh", "quantity": 1}}, "shipped_at": "2026-12-01T10:00:00Z"}
	n := 0
	pending := func() notify.Delivery {
		n++
		return s.f.Scheduled(o.ID, "order-shipped", fmt.Sprintf("c%d@example.com", n), data, time.Time{})
	}
	for i := range 3 {
		s.f.HistoryAt(s.f.Sent(pending(), fmt.Sprintf("p-%d", i)), a)
	}
	s.f.HistoryAt(s.f.Failed(pending(), "550 5.1.1 no such user"), b)
	s.f.HistoryAt(s.f.Held(pending(), "cannot render"), b)
	s.f.HistoryAt(s.f.Held(pending(), "cannot render"), b)
	s.f.HistoryAt(s.f.Deferred(s.f.Deferred(pending(), "421 try later", false), "451 greylisted", true), c)

	br, _ := s.operator(t, "Ana")
	var page string
	var h http.Header
	testenv.WaitFor(t, "the worker to find its relay refusing us", 30*time.Second, func() bool {
		_, h, page = br.do(http.MethodGet, "/admin/", nil)
		return strings.Contains(page, "span span-down")
	})
	if got, want := h.Get("Content-Security-Policy"), "default-src 'none'; style-src 'self'; frame-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"; got != want {
		t.Errorf("the overview's policy is %q, want %q", got, want)
	}
	for _, refused := range []string{"style=", "<style", "<script"} {
		if strings.Contains(page, refused) {
			t.Errorf("the overview has %s, which its policy refuses", refused)
		}
	}

	chart := parseSVG(t, page, "last-hour")
	chart.inside(t)
	label := func(at time.Time) string { return at.Format("15:04") + " UTC: " }
	for _, want := range []struct {
		lane, title, total, peak string
	}{
		{"sent", label(a) + "3 sent", "3", "peak 3/min"},
		{"failed", label(b) + "1 failed", "1", "peak 1/min"},
		{"held", label(b) + "2 held for an operator", "2", "peak 2/min"},
		{"deferred", label(c) + "2 deferred (to be tried again)", "", ""}, // and the worker's, now
		{"received", label(a) + "3 recorded", "8", "peak 3/min"},          // 3, 3 and 1, and the order's now
		{"suppressed", "", "0", ""},
		{"cancelled", "", "0", ""},
	} {
		lane := chart.find("g", "lane lane-"+want.lane)
		if lane == nil {
			t.Errorf("no %s lane", want.lane)
			continue
		}
		bars := lane.all("rect", "bar")
		titles := map[string]*svgNode{}
		for _, b := range bars {
			titles[b.title()] = b
		}
		if want.title != "" {
			b := titles[want.title]
			if b == nil {
				t.Errorf("%s: no bar %q among %v", want.lane, want.title, keys(titles))
			} else if b.num(t, "height") != 24 {
				t.Errorf("%s: the bar of its busiest minute is %v high, want the lane's 24", want.lane, b.num(t, "height"))
			}
		} else if len(bars) != 0 {
			t.Errorf("%s: %d bars in an hour without any: %v", want.lane, len(bars), keys(titles))
		}
		for title := range titles {
			if strings.HasPrefix(title, label(d)) {
				t.Errorf("%s: a bar %q for %s, when nothing happened", want.lane, title, label(d))
			}
		}
		if total := lane.find("text", "lane-total").Text; want.total != "" && total != want.total {
			t.Errorf("%s: total %q, want %q", want.lane, total, want.total)
		}
		if peak := lane.find("text", "lane-peak"); want.peak != "" && (peak == nil || peak.Text != want.peak) {
			t.Errorf("%s: peak %v, want %q", want.lane, peak, want.peak)
		}
	}
	deferred := chart.find("g", "lane lane-deferred").find("text", "lane-total").Text
	if n, err := strconv.Atoi(deferred); err != nil || n < 3 {
		t.Errorf("deferred: total %q, want the factory's 2 and the worker's refused attempt", deferred)
	}

	provider := chart.find("g", "provider")
	if provider == nil {
		t.Fatalf("no provider lane:\n%s", page)
	}
	if name := provider.find("text", "lane-label provider-name"); name == nil || name.Text != "smtp" {
		t.Errorf("the provider lane names %v, want smtp", name)
	}
	down := provider.find("g", "span span-down")
	if title := down.title(); !regexp.MustCompile(`^smtp at test-worker: refuses us since \d\d:\d\d UTC: .*421`).MatchString(title) {
		t.Errorf("the down span says %q", title)
	}
	if unknown := provider.find("g", "span span-unknown"); unknown == nil || !strings.Contains(unknown.title(), "not known before") {
		t.Errorf("no span of what is not known before the worker's state began: %v", unknown)
	}
	desc := chart.find("desc", "").Text
	for _, want := range []string{"3 sent", "1 failed", "2 held for an operator", "smtp at test-worker: refuses us since"} {
		if !strings.Contains(desc, want) {
			t.Errorf("the chart's description lacks %q: %s", want, desc)
		}
	}

	// The same hour for a phone: within a width that a screen 390 px
	// wide shows at about its size, every mark inside, the same bars and
	// totals, this minute at the plot's right edge (console.css shows
	// this chart instead of the wide one on a narrow page).
	narrow := parseSVG(t, page, "last-hour-narrow")
	narrow.inside(t)
	if box := strings.Fields(narrow.attr("viewBox")); len(box) != 4 || atoi(box[2]) > 390 || atoi(box[2]) <= 0 {
		t.Errorf("the narrow chart's viewBox is %q, want at most 390 wide", narrow.attr("viewBox"))
	}
	titles := func(c *svgNode) string {
		var out []string
		for _, b := range c.all("rect", "bar") {
			out = append(out, b.title())
		}
		for _, l := range c.all("text", "lane-total") {
			out = append(out, l.Text)
		}
		return strings.Join(out, "; ")
	}
	if w, n := titles(chart), titles(narrow); w != n {
		t.Errorf("the narrow chart's bars and totals differ from the wide one's:\n%s\n%s", n, w)
	}
	nowColumn, axis := narrow.find("rect", "now-column"), narrow.find("line", "axis")
	if right := nowColumn.num(t, "x") + nowColumn.num(t, "width"); right != axis.num(t, "x2") {
		t.Errorf("in the narrow chart this minute ends at %v, the plot at %v: want it at the right edge", right, axis.num(t, "x2"))
	}
	css := string(s.do(t, http.MethodGet, "/admin/console.css", "", nil, nil).body)
	if _, phone, ok := strings.Cut(css, "@media (max-width: 52rem)"); !ok || !strings.Contains(phone, ".chart-wide { display: none; }") ||
		!strings.Contains(phone, ".chart-narrow { display: block; }") || !strings.Contains(page, `<div class="chart-wrap chart-narrow">`) {
		t.Error("console.css does not show the narrow chart instead of the wide one on a narrow page")
	}

	queue := parseSVG(t, page, "queue-now")
	queue.inside(t)
	if bars := queue.all("rect", "bar"); len(bars) != 4 || !strings.HasPrefix(bars[0].title(), "waiting: ") {
		t.Errorf("the queue's chart: %d bars, the first %q", len(bars), bars[0].title())
	}
	if _, table, ok := strings.Cut(page, `id="last-hour-table"`); !ok {
		t.Error("no table of the minutes")
	} else if rows := strings.Count(table, "<tr><td>"); rows != notify.HourMinutes {
		t.Errorf("the table of minutes has %d rows, want %d", rows, notify.HourMinutes)
	}
	testenv.CheckHTML(t, map[string]string{"the overview": page})
}

// An hour with nothing in the history, and no worker: an empty chart
// that says so, every lane at 0 without a bar, and a sentence where the
// providers would be.
func TestConsoleOverviewDrawsAnEmptyHour(t *testing.T) {
	t.Parallel()
	s := setup(t)
	br, _ := s.operator(t, "Ana")
	_, _, page := br.do(http.MethodGet, "/admin/", nil)
	chart := parseSVG(t, page, "last-hour")
	chart.inside(t)
	if empty := chart.find("text", "empty-note"); empty == nil || !strings.HasPrefix(empty.Text, "Nothing in the last hour") {
		t.Errorf("the empty hour does not say so: %v", empty)
	}
	if bars := chart.all("rect", "bar"); len(bars) != 0 {
		t.Errorf("%d bars in an empty hour", len(bars))
	}
	lanes := chart.all("g", "")
	total := 0
	for _, l := range lanes {
		if strings.HasPrefix(l.attr("class"), "lane lane-") {
			total++
			if got := l.find("text", "lane-total").Text; got != "0" {
				t.Errorf("%s: total %q in an empty hour", l.attr("class"), got)
			}
		}
	}
	if total != 7 {
		t.Errorf("%d lanes, want 7", total)
	}
	if no := chart.find("text", "no-providers"); no == nil || !strings.Contains(no.Text, "No live worker") {
		t.Errorf("no sentence for the missing workers: %v", no)
	}
	if !strings.Contains(chart.find("desc", "").Text, "nothing was recorded") {
		t.Errorf("the description of an empty hour: %q", chart.find("desc", "").Text)
	}
}

// svgNode is an element of an SVG parsed with encoding/xml: a parse
// that fails is SVG that is not well-formed.
type svgNode struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Text    string     `xml:",chardata"`
	Nodes   []*svgNode `xml:",any"`
}

// parseSVG parses the <svg> of the page with the id.
func parseSVG(t *testing.T, page, id string) *svgNode {
	t.Helper()
	i := strings.Index(page, `id="`+id+`"`)
	if i < 0 {
		t.Fatalf("no svg #%s on the page:\n%s", id, page)
	}
	i = strings.LastIndex(page[:i], "<svg")
	j := strings.Index(page[i:], "</svg>")
	var root svgNode
	if i < 0 || j < 0 {
		t.Fatalf("svg #%s has no end", id)
	}
	if err := xml.Unmarshal([]byte(page[i:i+j+len("</svg>")]), &root); err != nil {
		t.Fatalf("svg #%s is not well-formed XML: %v\n%s", id, err, page[i:i+j+len("</svg>")])
	}
	return &root
}

func (n *svgNode) attr(name string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func (n *svgNode) num(t *testing.T, name string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(n.attr(name), 64)
	if err != nil {
		t.Fatalf("<%s %s=%q>: %v", n.XMLName.Local, name, n.attr(name), err)
	}
	return v
}

// all is every element under n named name with class (any, if "").
func (n *svgNode) all(name, class string) []*svgNode {
	var out []*svgNode
	for _, c := range n.Nodes {
		if c.XMLName.Local == name && (class == "" || c.attr("class") == class) {
			out = append(out, c)
		}
		out = append(out, c.all(name, class)...)
	}
	return out
}

func (n *svgNode) find(name, class string) *svgNode {
	if n == nil {
		return nil
	}
	if all := n.all(name, class); len(all) > 0 {
		return all[0]
	}
	return nil
}

// title is the text of n's own <title>.
func (n *svgNode) title() string {
	if n == nil {
		return ""
	}
	for _, c := range n.Nodes {
		if c.XMLName.Local == "title" {
			return c.Text
		}
	}
	return ""
}

// inside checks that every rectangle and line of the SVG lies within
// its viewBox: nothing drawn where the chart is cut off.
func (n *svgNode) inside(t *testing.T) {
	t.Helper()
	box := strings.Fields(n.attr("viewBox"))
	if len(box) != 4 {
		t.Fatalf("viewBox %q", n.attr("viewBox"))
	}
	w, _ := strconv.ParseFloat(box[2], 64)
	h, _ := strconv.ParseFloat(box[3], 64)
	within := func(what string, x, y float64) {
		if x < 0 || y < 0 || x > w || y > h {
			t.Errorf("%s reaches %v,%v, outside the chart's %vx%v", what, x, y, w, h)
		}
	}
	for _, r := range n.all("rect", "") {
		if r.attr("x") == "" { // a pattern's or a swatch's, at its origin
			continue
		}
		x, y := r.num(t, "x"), r.num(t, "y")
		within("a rect "+r.title(), x, y)
		within("a rect "+r.title(), x+r.num(t, "width"), y+r.num(t, "height"))
	}
	for _, l := range n.all("line", "") {
		within("a line", l.num(t, "x1"), l.num(t, "y1"))
		within("a line", l.num(t, "x2"), l.num(t, "y2"))
	}
	for _, tx := range n.all("text", "") {
		within("the text "+strconv.Quote(tx.Text), tx.num(t, "x"), tx.num(t, "y"))
	}
}

func keys(m map[string]*svgNode) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// atoi is s as an int, or -1.
func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}
