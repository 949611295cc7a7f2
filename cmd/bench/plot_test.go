package main

import (
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestPlotDrawsBothPipelinesOnALogAxis(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	sekaliSteps := []step{
		{Offered: 50, Achieved: 50, P50: 2 * ms, P99: 4 * ms, SentP50: 14 * ms, SentP99: 30 * ms},
		{Offered: 500, Achieved: 500, P50: 2 * ms, P99: 15 * ms, SentP50: 25 * ms, SentP99: 60 * ms},
		{Offered: 800, Achieved: 780, P50: 2 * ms, P99: 40 * ms, SentP50: 2000 * ms, SentP99: 3000 * ms},
	}
	riverSteps := []step{
		{Offered: 50, Achieved: 50, P50: 3 * ms, P99: 6 * ms, SentP50: 20 * ms, SentP99: 45 * ms},
		{Offered: 600, Achieved: 600, P50: 3 * ms, P99: 20 * ms, SentP50: 30 * ms, SentP99: 80 * ms},
		{Offered: 1000, Achieved: 950, P50: 5 * ms, P99: 60 * ms, SentP50: 1500 * ms, SentP99: 2500 * ms},
	}
	outs := []outcome{
		{pipeline: sekali, steps: sekaliSteps, best: sekaliSteps[1]},
		{pipeline: riverReference, steps: riverSteps, best: riverSteps[1]},
	}
	path := filepath.Join(t.TempDir(), "p.png")
	if err := plot(path, outs, 100*ms); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	// The dashed p99 bound starts at the left edge of the latency panel,
	// in the red of sekali's API p99.
	bound := -100
	for y := latTop; y < latBottom; y++ {
		if at(img, plotLeft+2, y) == styles[0].apiP99 {
			bound = y
		}
	}
	for i, st := range styles {
		latency := map[string]color.RGBA{"API p50": st.apiP50, "API p99": st.apiP99, "checkout->sent p50": st.sentP50, "checkout->sent p99": st.sentP99}
		for name, c := range latency {
			// Leave out the bound and its label above it.
			if n := count(img, c, latTop, latBottom, func(y int) bool { return y >= bound-16 && y <= bound+1 }); n < 100 {
				t.Errorf("%s %s (colour %v): %d pixels in the latency panel, want a line across it", outs[i].pipeline.name, name, c, n)
			}
			if n := count(img, c, legendTop-13, plotH, nil, legendX, plotW); n == 0 {
				t.Errorf("%s %s: not in the legend", outs[i].pipeline.name, name)
			}
		}
		if n := count(img, st.rate, rateTop, rateBottom, nil); n < 100 {
			t.Errorf("%s achieved/s (colour %v): %d pixels in the throughput panel, want a line across it", outs[i].pipeline.name, st.rate, n)
		}
	}
	// A flat 2 ms API p50 under a 3 s maximum lies on the axis with a
	// linear scale; on the logarithmic one (1 ms to 10 s) it is about
	// 35 px above.
	if y := lowest(img, styles[0].apiP50); y > latBottom-15 {
		t.Errorf("API p50 of 2 ms drawn down to y=%d, the axis is at %d: the latency scale is not logarithmic", y, latBottom)
	}
}

func at(img image.Image, x, y int) color.RGBA {
	return color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
}

// count counts pixels of colour c in rows [top, bottom) but those skip
// leaves out, within the plotting area or, given, columns [x0, x1).
func count(img image.Image, c color.RGBA, top, bottom int, skip func(int) bool, cols ...int) int {
	x0, x1 := plotLeft, plotRight
	if len(cols) == 2 {
		x0, x1 = cols[0], cols[1]
	}
	n := 0
	for y := top; y < bottom; y++ {
		if skip != nil && skip(y) {
			continue
		}
		for x := x0; x < x1; x++ {
			if at(img, x, y) == c {
				n++
			}
		}
	}
	return n
}

// lowest is the lowest row of the plotting area holding a pixel of
// colour c, or -1.
func lowest(img image.Image, c color.RGBA) int {
	for y := img.Bounds().Max.Y - 1; y >= 0; y-- {
		for x := plotLeft; x < plotRight; x++ {
			if at(img, x, y) == c {
				return y
			}
		}
	}
	return -1
}
