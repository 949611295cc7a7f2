package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// seriesStyle is how one pipeline is drawn: a colour per latency series
// and one for its throughput, solid or dashed lines.
type seriesStyle struct {
	apiP50, apiP99, sentP50, sentP99, rate color.RGBA
	dashed                                 bool
}

// styles are the pipelines' styles, in the order they ran: sekali's
// colours are the ones its plot always had.
var styles = []seriesStyle{
	{apiP50: color.RGBA{40, 120, 40, 255}, apiP99: color.RGBA{200, 40, 40, 255}, sentP50: color.RGBA{120, 120, 230, 255}, sentP99: color.RGBA{40, 40, 200, 255},
		rate: color.RGBA{0, 110, 160, 255}},
	{apiP50: color.RGBA{150, 200, 50, 255}, apiP99: color.RGBA{240, 140, 20, 255}, sentP50: color.RGBA{200, 130, 210, 255}, sentP99: color.RGBA{130, 30, 150, 255},
		rate: color.RGBA{230, 100, 0, 255}, dashed: true},
}

// The plot's geometry: a latency panel over a throughput panel, sharing
// the offered-rate axis, and a legend column on the right.
const (
	plotW, plotH          = 1100, 840
	plotLeft, plotRight   = 70, 860 // x of the plotting area
	latTop, latBottom     = 40, 500 // y of the latency panel
	rateTop, rateBottom   = 560, 770
	legendX, legendTop    = 880, 50
	legendLine, legendGap = 16, 10
)

// plot draws, for each pipeline, API p50 and p99 and checkout→sent p50
// and p99 against the offered rate on a logarithmic axis, with the p99
// bound; below, the rate each achieved against the rate offered, with
// each one's maximum sustainable rate marked; a PNG.
func plot(path string, outs []outcome, bound time.Duration) error {
	img := image.NewRGBA(image.Rect(0, 0, plotW, plotH))
	for i := range img.Pix {
		img.Pix[i] = 255
	}
	var maxX, maxY, maxRate float64
	for _, o := range outs {
		for _, s := range o.steps {
			maxX = math.Max(maxX, s.Offered)
			maxRate = math.Max(maxRate, math.Max(s.Offered, s.Achieved))
			maxY = math.Max(maxY, math.Max(msf(s.P99), msf(s.SentP99)))
		}
	}
	// Latency on a logarithmic axis, from 1 ms to the next power of ten:
	// the knee and the few-millisecond region both stay readable.
	maxY = math.Pow(10, math.Ceil(math.Log10(math.Max(maxY, msf(bound))*1.01)))
	maxX = math.Max(maxX, 1) * 1.05
	maxRate = math.Max(maxRate, 1) * 1.05
	px := func(x float64) int { return plotLeft + int(x/maxX*float64(plotRight-plotLeft)) }
	py := func(y float64) int {
		frac := math.Log10(math.Min(math.Max(y, 1), maxY)) / math.Log10(maxY)
		return latBottom - int(frac*float64(latBottom-latTop))
	}
	pr := func(r float64) int { return rateBottom - int(r/maxRate*float64(rateBottom-rateTop)) }

	grey := color.RGBA{200, 200, 200, 255}
	black := color.RGBA{0, 0, 0, 255}
	for _, panel := range [][2]int{{latTop, latBottom}, {rateTop, rateBottom}} {
		line(img, plotLeft, panel[1], plotRight, panel[1], black)
		line(img, plotLeft, panel[0], plotLeft, panel[1], black)
	}
	for y := 1.0; y <= maxY; y *= 10 {
		line(img, plotLeft, py(y), plotRight, py(y), grey)
		label(img, 5, py(y)+4, fmt.Sprintf("%.0f ms", y), black)
	}
	for i := 0; i <= 4; i++ {
		v := maxRate * float64(i) / 4
		line(img, plotLeft, pr(v), plotRight, pr(v), grey)
		label(img, 5, pr(v)+4, fmt.Sprintf("%.0f/s", v), black)
	}
	for i := 0; i <= 5; i++ {
		x := maxX * float64(i) / 5
		label(img, px(x)-10, latBottom+18, fmt.Sprintf("%.0f", x), black)
		label(img, px(x)-10, rateBottom+18, fmt.Sprintf("%.0f", x), black)
	}
	label(img, plotLeft, 20, "latency against offered rate (open loop, logarithmic)", black)
	label(img, plotLeft, rateTop-12, "achieved against offered checkouts per second", black)
	label(img, plotW/2-180, plotH-20, "offered checkouts per second", black)
	// Achieving what is offered is the diagonal.
	for x := 0.0; x < math.Min(maxX, maxRate); x += maxX / 100 {
		img.SetRGBA(px(x), pr(x), grey)
	}

	legendY := legendTop
	for k, o := range outs {
		st := styles[k%len(styles)]
		series := []struct {
			name string
			c    color.RGBA
			v    func(step) float64
		}{
			{"API p50", st.apiP50, func(s step) float64 { return msf(s.P50) }},
			{"API p99", st.apiP99, func(s step) float64 { return msf(s.P99) }},
			{"checkout->sent p50", st.sentP50, func(s step) float64 { return msf(s.SentP50) }},
			{"checkout->sent p99", st.sentP99, func(s step) float64 { return msf(s.SentP99) }},
		}
		style := "solid"
		if st.dashed {
			style = "dashed"
		}
		label(img, legendX, legendY, fmt.Sprintf("%s (%s)", o.pipeline.name, style), black)
		legendY += legendLine
		for _, sr := range series {
			for i := 1; i < len(o.steps); i++ {
				a, b := o.steps[i-1], o.steps[i]
				thick(img, px(a.Offered), py(sr.v(a)), px(b.Offered), py(sr.v(b)), sr.c, st.dashed)
			}
			for _, s := range o.steps {
				dot(img, px(s.Offered), py(sr.v(s)), sr.c)
			}
			label(img, legendX+10, legendY, sr.name, sr.c)
			legendY += legendLine
		}
		for i := 1; i < len(o.steps); i++ {
			a, b := o.steps[i-1], o.steps[i]
			thick(img, px(a.Offered), pr(a.Achieved), px(b.Offered), pr(b.Achieved), st.rate, st.dashed)
		}
		for _, s := range o.steps {
			dot(img, px(s.Offered), pr(s.Achieved), st.rate)
		}
		// The maximum sustainable rate: a dotted vertical line.
		if best := o.best.Offered; best > 0 {
			for y := rateTop; y < rateBottom; y += 6 {
				line(img, px(best), y, px(best), y+2, st.rate)
			}
			text := fmt.Sprintf("%s max %.0f/s", o.pipeline.name, best)
			x := px(best) + 4
			if x+7*len(text) > plotRight { // basicfont is 7 px wide: keep it inside
				x = px(best) - 4 - 7*len(text)
			}
			label(img, x, rateTop+14+16*k, text, st.rate)
		}
		label(img, legendX+10, legendY, "achieved/s", st.rate)
		legendY += legendLine + legendGap
	}
	red := color.RGBA{200, 40, 40, 255}
	for x := plotLeft; x < plotRight; x += 8 {
		line(img, x, py(msf(bound)), x+4, py(msf(bound)), red)
	}
	label(img, plotLeft+5, py(msf(bound))-4, fmt.Sprintf("p99 bound %v", bound), red)

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return png.Encode(f, img)
}

func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	dx, dy := math.Abs(float64(x1-x0)), math.Abs(float64(y1-y0))
	n := int(math.Max(dx, dy))
	for i := 0; i <= n; i++ {
		t := 0.0
		if n > 0 {
			t = float64(i) / float64(n)
		}
		img.SetRGBA(x0+int(t*float64(x1-x0)), y0+int(t*float64(y1-y0)), c)
	}
}

// thick draws a line three pixels high; dashed, it leaves every other
// stretch of 6 pixels out.
func thick(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA, dashed bool) {
	n := int(math.Max(math.Abs(float64(x1-x0)), math.Abs(float64(y1-y0))))
	for i := 0; i <= n; i++ {
		if dashed && (i/6)%2 == 1 {
			continue
		}
		t := 0.0
		if n > 0 {
			t = float64(i) / float64(n)
		}
		x, y := x0+int(t*float64(x1-x0)), y0+int(t*float64(y1-y0))
		for d := -1; d <= 1; d++ {
			img.SetRGBA(x, y+d, c)
		}
	}
}

func dot(img *image.RGBA, x, y int, c color.RGBA) {
	for dx := -3; dx <= 3; dx++ {
		for dy := -3; dy <= 3; dy++ {
			img.SetRGBA(x+dx, y+dy, c)
		}
	}
}

func label(img *image.RGBA, x, y int, s string, c color.RGBA) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}
