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

func TestPlotDrawsEverySeriesOnALogAxis(t *testing.T) {
	ms := time.Millisecond
	steps := []step{
		{Offered: 50, P50: 2 * ms, P99: 4 * ms, SentP50: 14 * ms, SentP99: 30 * ms},
		{Offered: 500, P50: 2 * ms, P99: 15 * ms, SentP50: 25 * ms, SentP99: 60 * ms},
		{Offered: 800, P50: 2 * ms, P99: 40 * ms, SentP50: 2000 * ms, SentP99: 3000 * ms},
	}
	path := filepath.Join(t.TempDir(), "p.png")
	if err := plot(path, steps, 100*ms); err != nil {
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
	series := map[string]color.RGBA{
		"API p50": {40, 120, 40, 255}, "API p99": {200, 40, 40, 255},
		"checkout->sent p50": {120, 120, 230, 255}, "checkout->sent p99": {40, 40, 200, 255},
	}
	// Count each series' pixels in the plotting area, leaving out the
	// legend (drawn in the same colours) and the dashed p99 bound with
	// its label (drawn in API p99's red).
	bound := -100
	for y := 0; y < img.Bounds().Dy(); y++ {
		if color.RGBAModel.Convert(img.At(72, y)) == (color.RGBA{200, 40, 40, 255}) { // the dashes start at the left edge
			bound = y
		}
	}
	for name, c := range series {
		n := 0
		b := img.Bounds()
		for y := 40; y < b.Dy()-60; y++ {
			if y >= bound-16 && y <= bound+1 { // the line and its label above it
				continue
			}
			for x := 70; x < b.Dx()-30; x++ {
				inLegend := x >= b.Dx()-30-190 && y < 40+20+16*len(series)
				if !inLegend && color.RGBAModel.Convert(img.At(x, y)).(color.RGBA) == c {
					n++
				}
			}
		}
		if n < 100 {
			t.Errorf("series %s (colour %v): %d pixels in the plot, want a line across it", name, c, n)
		}
	}
	// The x axis is 60 px above the bottom. A flat 2 ms API p50 under a
	// 3 s maximum lies on it with a linear scale; on the logarithmic one
	// (1 ms to 10 s) it is about 30 px above.
	axis := img.Bounds().Dy() - 60
	if y := lowest(img, series["API p50"]); y > axis-15 {
		t.Errorf("API p50 of 2 ms drawn down to y=%d, the axis is at %d: the latency scale is not logarithmic", y, axis)
	}
}

// lowest is the lowest row holding a pixel of colour c, or -1.
func lowest(img image.Image, c color.RGBA) int {
	b := img.Bounds()
	for y := b.Max.Y - 1; y >= b.Min.Y; y-- {
		for x := b.Min.X; x < b.Max.X; x++ {
			if color.RGBAModel.Convert(img.At(x, y)).(color.RGBA) == c {
				return y
			}
		}
	}
	return -1
}
