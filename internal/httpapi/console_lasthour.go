package httpapi

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sekali-dev/sekali/internal/notify"
)

// The overview's last hour, drawn on the server as inline SVG: no script,
// no style attribute (the console's policy allows neither), every mark a
// class that console.css colours. One lane per kind of history row
// (notify.Minute), one per provider at each live worker, one time axis in
// UTC; every mark carries its <title> with its numbers, and each lane is
// named in words, so nothing is told by colour alone. The geometry is
// worked out here; console.html only writes it down.

// The chart's drawing units (its viewBox; CSS scales it to the page).
const (
	chartTop   = 6
	flowLaneH  = 34 // a lane of counts: bars up to flowBarH, total and peak on the right
	flowBarH   = 24
	laneGap    = 4
	stateLaneH = 30 // a provider at a worker
	stateBarH  = 20
	axisH      = 30
	charWidth  = 7 // a generous average width of a character of the chart's 12px text, to cut labels to their room
)

// chartLayout is where a chart's plot lies in its width, in drawing
// units: the wide chart a desktop shows, and the narrow one a phone
// shows (console.css shows one or the other by the page's width), each
// whole: every lane's name, the hour up to now, the totals.
type chartLayout struct {
	Suffix              string // of the chart's ids: "" for the wide one
	Width, Left, Column int    // Left: the lanes' names before it; Column: a minute
	Empty               string // what an empty hour says, as long as fits
	Peak                string // a lane's busiest minute, as long as fits: %s the count
}

func (l chartLayout) right() int { return l.Left + notify.HourMinutes*l.Column }

var (
	wideChart = chartLayout{Width: 960, Left: 150, Column: 12,
		Empty: "Nothing in the last hour: no delivery was recorded or changed status.", Peak: "peak %s/min"}
	// The narrow chart fits a phone 390 px wide at about its own size:
	// its lanes' names in smaller type (console.css), a minute 4 units.
	narrowChart = chartLayout{Suffix: "-narrow", Width: 384, Left: 74, Column: 4, Empty: "Nothing in the last hour.", Peak: "peak %s"}
)

// flowKinds are the lanes of counts, top to bottom, with what each counts.
var flowKinds = []struct {
	kind, help string
	count      func(notify.Minute) int
}{
	{"received", "recorded", func(m notify.Minute) int { return m.Received }},
	{"sent", "sent", func(m notify.Minute) int { return m.Sent }},
	{"deferred", "deferred (to be tried again)", func(m notify.Minute) int { return m.Deferred }},
	{"failed", "failed", func(m notify.Minute) int { return m.Failed }},
	{"held", "held for an operator", func(m notify.Minute) int { return m.Held }},
	{"suppressed", "suppressed", func(m notify.Minute) int { return m.Suppressed }},
	{"cancelled", "cancelled", func(m notify.Minute) int { return m.Cancelled }},
}

// lastHour is the overview's chart, ready to be written.
type lastHour struct {
	Narrow        bool   // the phone's layout
	Suffix        string // of its ids
	Width, Height int
	From          string // the hour's first minute, "15:04" UTC
	Now           string // now, "15:04:05" UTC
	Summary       string // the chart in one sentence, for its <desc>
	Empty         bool   // nothing in the history for the hour
	EmptyX        int    // the middle of the lanes of counts, where an empty hour says so
	EmptyY        int
	EmptyText     string
	Kinds         []string

	Flow      []flowLane
	Providers []stateLane
	// NoProviders says why there is no provider lane.
	NoProviders  string
	NoProvidersY int

	Ticks       []tick
	AxisY       int
	TickY       int // the ticks' lower end
	UnitY       int // "UTC"
	PlotTop     int // the grid lines' extent
	PlotH       int
	Left, Right int // the plot's edges
	TotalX      int // where the lanes' totals end
	NowX, NowW  int // the minute now is in
	NowTitle    string
	SeparatorY  int // between the counts and the providers

	Minutes []minuteRow // the same counts as a table
}

// flowLane is one kind of history row over the hour.
type flowLane struct {
	Kind        string
	BaseY       int // the bars' baseline
	LabelY      int
	Total, Peak string // Peak: "" when there was none
	TotalY      int
	PeakY       int
	Bars        []bar
}

// bar is one minute of a lane; a minute with nothing has none.
type bar struct {
	X, Y, W, H int
	Title      string
}

// stateLane is one provider as one worker reports it.
type stateLane struct {
	Provider, Worker string // the worker's id cut to its room
	LabelY           int
	WorkerY          int
	Spans            []span
	Title            string // the worker's id in full, and its last check
}

// span is a stretch of a provider lane in one state.
type span struct {
	State      string // up, down, unknown
	X, Y, W, H int
	Title      string
	Label      string // cut to its room; "" when there is none
	LabelX     int
	LabelY     int
	Before     bool // the label ends where the span begins: the span is too short for it
}

type tick struct {
	X, LabelY int
	Label     string
}

// minuteRow is one minute of the table under the chart.
type minuteRow struct {
	Minute string
	Counts []int
}

// newLastHour lays out the hour of minutes (notify.LastHour's, oldest
// first) up to now, and the providers' states as the live workers last
// published them; providersErr is why those could not be read, if so:
// the wide chart.
func newLastHour(minutes []notify.Minute, now time.Time, workers []notify.ProviderState, providersErr string) lastHour {
	return newLastHourIn(wideChart, minutes, now, workers, providersErr)
}

// newLastHourIn is newLastHour in the layout l.
func newLastHourIn(lay chartLayout, minutes []notify.Minute, now time.Time, workers []notify.ProviderState, providersErr string) lastHour {
	chartWidth, chartLeft, chartColumn, chartRight := lay.Width, lay.Left, lay.Column, lay.right()
	now = now.UTC()
	start := minutes[0].Start
	c := lastHour{Narrow: lay.Suffix != "", Suffix: lay.Suffix, Width: chartWidth, Left: chartLeft, Right: chartRight, TotalX: chartWidth - 6,
		PlotTop: chartTop, From: start.Format("15:04"), Now: now.Format("15:04:05"), Empty: true, EmptyText: lay.Empty}
	x := func(t time.Time) int {
		d := min(max(t.Sub(start), 0), notify.HourMinutes*time.Minute)
		return chartLeft + int(d*time.Duration(chartColumn)/time.Minute)
	}
	c.NowX, c.NowW = x(now.Truncate(time.Minute)), chartColumn
	c.NowTitle = now.Format("15:04") + " UTC: the minute now is in, so far"

	barX, barW := 1, chartColumn-2 // a gap on each side
	if chartColumn < 8 {
		barX, barW = 0, chartColumn-1 // a narrow column: one gap
	}
	var summary []string
	y := chartTop
	for _, k := range flowKinds {
		c.Kinds = append(c.Kinds, k.kind)
		l := flowLane{Kind: k.kind, BaseY: y + 2 + flowBarH, LabelY: y + 19, TotalY: y + 14, PeakY: y + 28}
		total, peak := 0, 0
		for _, m := range minutes {
			n := k.count(m)
			total += n
			peak = max(peak, n)
		}
		for i, m := range minutes {
			n := k.count(m)
			if n == 0 {
				continue
			}
			h := max(1, (n*flowBarH+peak-1)/peak) // one row is still a mark
			so := ""
			if i == len(minutes)-1 {
				so = " (so far)"
			}
			l.Bars = append(l.Bars, bar{X: chartLeft + i*chartColumn + barX, Y: l.BaseY - h, W: barW, H: h,
				Title: fmt.Sprintf("%s UTC%s: %s %s", m.Start.Format("15:04"), so, thousands(n), k.help)})
		}
		l.Total = thousands(total)
		if total > 0 {
			c.Empty = false
			l.Peak = fmt.Sprintf(lay.Peak, thousands(peak))
		}
		summary = append(summary, thousands(total)+" "+k.help)
		c.Flow = append(c.Flow, l)
		y += flowLaneH + laneGap
	}
	flowBottom := y - laneGap
	c.EmptyX, c.EmptyY = (chartLeft+chartRight)/2, (chartTop+flowBottom)/2

	c.SeparatorY = y + 2
	y += 8
	switch {
	case providersErr != "":
		c.NoProviders = "The providers' states could not be read: " + providersErr
	case len(workers) == 0:
		c.NoProviders = "No live worker reports its providers: none is running, or none could reach Redis for a while."
	}
	if c.NoProviders != "" {
		c.NoProviders = cut(c.NoProviders, (chartWidth-chartLeft-8)/charWidth)
		c.NoProvidersY = y + 19
		y += stateLaneH
	}
	for _, w := range workers {
		state, word := "up", "takes mail"
		if !w.Up {
			state, word = "down", "refuses us"
		}
		l := stateLane{Provider: w.Provider, Worker: cut(w.WorkerID, (chartLeft-8)/charWidth), LabelY: y + 12, WorkerY: y + 25,
			Title: fmt.Sprintf("worker %s, last checked %s UTC", w.WorkerID, w.CheckedAt.UTC().Format("15:04:05"))}
		sx := x(w.Since)
		by := y + (stateLaneH-stateBarH)/2
		if sx > chartLeft {
			l.Spans = append(l.Spans, span{State: "unknown", X: chartLeft, Y: by, W: sx - chartLeft, H: stateBarH,
				Title: fmt.Sprintf("%s at %s: not known before %s UTC (the worker started, or the state changed, then)",
					w.Provider, w.WorkerID, w.Since.UTC().Format("15:04:05"))})
		}
		nx := max(x(now), sx+2)
		since := w.Since.UTC().Format("15:04")
		if w.Since.UTC().Format(time.DateOnly) != now.Format(time.DateOnly) {
			since = w.Since.UTC().Format("2 Jan 15:04")
		}
		label := fmt.Sprintf("%s for %s (since %s)", word, lasted(now.Sub(w.Since)), since)
		if w.Reason != "" {
			label += ": " + w.Reason
		}
		title := fmt.Sprintf("%s at %s: %s since %s UTC", w.Provider, w.WorkerID, word, since)
		if w.Reason != "" {
			title += ": " + w.Reason
		}
		s := span{State: state, X: sx, Y: by, W: nx - sx, H: stateBarH, Title: title, LabelY: by + 14}
		// The words go in the span, or before it when it is too short for
		// them and the room there (what is not known) is longer.
		inside, before := (s.W-8)/charWidth, (sx-chartLeft-8)/charWidth
		if len([]rune(label)) > inside && before > inside {
			s.Label, s.LabelX, s.Before = cut(label, before), sx-4, true
		} else {
			s.Label, s.LabelX = cut(label, inside), sx+4
		}
		l.Spans = append(l.Spans, s)
		c.Providers = append(c.Providers, l)
		summary = append(summary, title)
		y += stateLaneH + laneGap
	}
	c.AxisY = y + 2
	c.TickY, c.UnitY = c.AxisY+4, c.AxisY+16
	c.PlotH = c.AxisY - chartTop
	for i, m := range minutes {
		if m.Start.Minute()%10 == 0 {
			c.Ticks = append(c.Ticks, tick{X: chartLeft + i*chartColumn, LabelY: c.AxisY + 16, Label: m.Start.Format("15:04")})
		}
	}
	c.Height = c.AxisY + axisH

	if c.Empty {
		c.Summary = fmt.Sprintf("From %s to %s UTC nothing was recorded, sent, deferred, failed, held, suppressed or cancelled", c.From, c.Now)
	} else {
		c.Summary = fmt.Sprintf("From %s to %s UTC: %s", c.From, c.Now, strings.Join(summary[:len(flowKinds)], ", "))
	}
	if len(summary) > len(flowKinds) {
		c.Summary += ". " + strings.Join(summary[len(flowKinds):], ". ")
	}
	c.Summary += "."

	for i := len(minutes) - 1; i >= 0; i-- {
		r := minuteRow{Minute: minutes[i].Start.Format("15:04")}
		for _, k := range flowKinds {
			r.Counts = append(r.Counts, k.count(minutes[i]))
		}
		c.Minutes = append(c.Minutes, r)
	}
	return c
}

// queueNow is the queue's depth as asynq tells it now, drawn as bars.
type queueNow struct {
	Width, Height int
	Left          int // where the bars begin
	Bars          []queueBar
}

type queueBar struct {
	Label, Class string
	N            string
	Y, W         int // W: the bar's length
	LabelY, NX   int
	Title        string
}

// The queue's chart, in its own drawing units: narrow enough for a phone.
const (
	queueWidth = 400
	queueLeft  = 100
	queueBarW  = 230 // the longest bar
	queueRowH  = 24
)

// newQueueNow draws the queue's tasks by state.
func newQueueNow(q notify.QueueState) queueNow {
	rows := []struct {
		label, class, help string
		n                  int
	}{
		{"waiting", "pending", "tasks waiting for a worker", q.Pending},
		{"sending now", "active", "tasks a worker is on", q.Active},
		{"retrying", "retry", "tasks to be tried again after a back-off", q.Retry},
		{"scheduled", "scheduled", "tasks for later (send_at)", q.Scheduled},
	}
	most := 0
	for _, r := range rows {
		most = max(most, r.n)
	}
	c := queueNow{Width: queueWidth, Height: len(rows)*queueRowH + 4, Left: queueLeft}
	for i, r := range rows {
		w := 0
		if r.n > 0 {
			w = max(2, r.n*queueBarW/most)
		}
		y := 2 + i*queueRowH
		c.Bars = append(c.Bars, queueBar{Label: r.label, Class: r.class, N: thousands(r.n), Y: y + 4, W: w, LabelY: y + 16,
			NX: queueLeft + w + 6, Title: fmt.Sprintf("%s: %s %s", r.label, thousands(r.n), r.help)})
	}
	return c
}

// lasted says how long d is, to the minute.
func lasted(d time.Duration) string {
	d = d.Truncate(time.Minute)
	switch {
	case d < time.Minute:
		return "under a minute"
	case d < time.Hour:
		return fmt.Sprintf("%d min", d/time.Minute)
	case d < 48*time.Hour:
		if m := d % time.Hour / time.Minute; m > 0 {
			return fmt.Sprintf("%d h %d min", d/time.Hour, m)
		}
		return fmt.Sprintf("%d h", d/time.Hour)
	}
	return fmt.Sprintf("%d days", d/(24*time.Hour))
}

// thousands writes n with a comma between each three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// cut shortens s to at most n characters, with an ellipsis when it had
// more; "" when not even the ellipsis and one character fit.
func cut(s string, n int) string {
	r := []rune(s)
	switch {
	case len(r) <= n:
		return s
	case n < 2:
		return ""
	}
	return string(r[:n-1]) + "…"
}
