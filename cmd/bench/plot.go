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

// plot draws API p50 and p99 and checkout→sent p50 and p99 against the offered
// rate, with the p99 bound, as a PNG.
func plot(path string, steps []step, bound time.Duration) error {
	const w, h, left, right, top, bottom = 900, 520, 70, 30, 40, 60
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = 255
	}
	var maxX, maxY float64
	for _, s := range steps {
		maxX = math.Max(maxX, s.Offered)
		maxY = math.Max(maxY, math.Max(msf(s.P99), msf(s.SentP99)))
	}
	// Latency on a logarithmic axis, from 1 ms to the next power of ten:
	// the knee and the few-millisecond region both stay readable.
	maxY = math.Pow(10, math.Ceil(math.Log10(math.Max(maxY, msf(bound))*1.01)))
	maxX *= 1.05
	px := func(x float64) int { return left + int(x/maxX*float64(w-left-right)) }
	py := func(y float64) int {
		frac := math.Log10(math.Min(math.Max(y, 1), maxY)) / math.Log10(maxY)
		return h - bottom - int(frac*float64(h-top-bottom))
	}

	grey := color.RGBA{200, 200, 200, 255}
	black := color.RGBA{0, 0, 0, 255}
	line(img, left, h-bottom, w-right, h-bottom, black)
	line(img, left, top, left, h-bottom, black)
	for y := 1.0; y <= maxY; y *= 10 {
		line(img, left, py(y), w-right, py(y), grey)
		label(img, 5, py(y)+4, fmt.Sprintf("%.0f ms", y), black)
	}
	for i := 0; i <= 5; i++ {
		x := maxX * float64(i) / 5
		label(img, px(x)-10, h-bottom+18, fmt.Sprintf("%.0f", x), black)
	}
	label(img, w/2-80, h-15, "offered checkouts per second", black)
	label(img, left, 20, "latency against offered rate (open loop, logarithmic)", black)

	series := []struct {
		name string
		c    color.RGBA
		v    func(step) time.Duration
	}{
		{"API p50", color.RGBA{40, 120, 40, 255}, func(s step) time.Duration { return s.P50 }},
		{"API p99", color.RGBA{200, 40, 40, 255}, func(s step) time.Duration { return s.P99 }},
		{"checkout->sent p50", color.RGBA{120, 120, 230, 255}, func(s step) time.Duration { return s.SentP50 }},
		{"checkout->sent p99", color.RGBA{40, 40, 200, 255}, func(s step) time.Duration { return s.SentP99 }},
	}
	for k, sr := range series {
		for i := 1; i < len(steps); i++ {
			a, b := steps[i-1], steps[i]
			thick(img, px(a.Offered), py(msf(sr.v(a))), px(b.Offered), py(msf(sr.v(b))), sr.c)
		}
		for _, s := range steps {
			dot(img, px(s.Offered), py(msf(sr.v(s))), sr.c)
		}
		label(img, w-right-190, top+20+16*k, sr.name, sr.c)
	}
	red := color.RGBA{200, 40, 40, 255}
	for x := left; x < w-right; x += 8 {
		line(img, x, py(msf(bound)), x+4, py(msf(bound)), red)
	}
	label(img, left+5, py(msf(bound))-4, fmt.Sprintf("p99 bound %v", bound), red)

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

func thick(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	for d := -1; d <= 1; d++ {
		line(img, x0, y0+d, x1, y1+d, c)
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
