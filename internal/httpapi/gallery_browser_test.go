//go:build browser

package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"

	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// galleryBrand is a shop with every field of the brand set, so that the
// gallery shows every part of the built-in layout.
var galleryBrand = mailtemplate.Brand{Name: "Toko Ana", LogoURL: "https://shop.example/logo.png",
	Address: "Jl. Melati 7, Bandung 40115", SupportEmail: "help@shop.example", TimeZone: "Asia/Jakarta",
	OrderURL:     "https://shop.example/account/orders/{reference}",
	TrackingURLs: map[string]string{"JNE": "https://www.jne.co.id/tracking?awb={tracking_number}"}}

// galleryFrame is one e-mail of the gallery as Chromium laid it out in
// its frame.
type galleryFrame struct {
	Template, Lang string
	Width          int
	// Of the frame's document: how wide its content is, and how wide its
	// viewport (without a scroll bar).
	ScrollWidth, ClientWidth int
	Text                     string // what a reader sees
	PNG                      []byte // the frame's screenshot
}

func (f galleryFrame) String() string {
	return fmt.Sprintf("%s in %s at %d px", f.Template, f.Lang, f.Width)
}

// galleryFrames opens GET /templates in headless Chromium (driven by
// chromedp) and measures and photographs every frame. The frames are
// sandboxed without scripts, and Chrome runs each as a target of its
// own; the test reaches into each through the DevTools protocol, which
// the sandbox does not stop.
func galleryFrames(t *testing.T, url string) []galleryFrame {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromiumPath(t)), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1400, 1000), chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, chromedp.Navigate(url+"/templates"), chromedp.WaitVisible(chromedp.CSS("iframe"))); err != nil {
		t.Fatalf("open the gallery: %v", err)
	}
	nodes, err := chromedp.Run(ctx, chromedp.Nodes(chromedp.CSSAll("iframe")))
	if err != nil {
		t.Fatal(err)
	}
	var frames []galleryFrame
	for _, n := range nodes {
		width, err := strconv.Atoi(n.AttributeValue("data-width"))
		if err != nil {
			t.Fatalf("frame %q: data-width: %v", n.AttributeValue("title"), err)
		}
		f := galleryFrame{Template: n.AttributeValue("data-template"), Lang: n.AttributeValue("data-lang"), Width: width}
		// The frame's own target has the frame's id. Cancelling the
		// context detaches from it; without WithDetachOnCancel it would
		// close the frame.
		fctx, fcancel := chromedp.NewContext(ctx, chromedp.WithTargetID(target.ID(n.FrameID)), chromedp.WithDetachOnCancel())
		var m struct {
			Ready                    string
			ScrollWidth, ClientWidth int
			Text                     string
		}
		for {
			m, err = chromedp.Run(fctx, chromedp.Evaluate[struct {
				Ready                    string
				ScrollWidth, ClientWidth int
				Text                     string
			}](`({ready: document.readyState, scrollWidth: document.documentElement.scrollWidth,
				clientWidth: document.documentElement.clientWidth, text: document.body ? document.body.innerText : ""})`))
			if err != nil || m.Ready == "complete" {
				break
			}
			time.Sleep(50 * time.Millisecond) // the frame is still loading: ask again
		}
		fcancel()
		if err != nil {
			t.Fatalf("%s: measure the frame: %v", f, err)
		}
		f.ScrollWidth, f.ClientWidth, f.Text = m.ScrollWidth, m.ClientWidth, m.Text
		// Chrome paints a frame out of view only once it is scrolled to.
		sel := chromedp.CSS(fmt.Sprintf(`iframe[data-template=%q][data-lang=%q][data-width="%d"]`, f.Template, f.Lang, f.Width))
		if err := chromedp.Do(ctx, chromedp.ScrollIntoView(sel)); err != nil {
			t.Fatalf("%s: scroll to it: %v", f, err)
		}
		// A frame just scrolled to may not be painted yet: photograph it
		// again, for a few seconds, until it shows more than its border
		// and background (checkFrame fails it if it never does).
		for deadline := time.Now().Add(3 * time.Second); ; {
			if f.PNG, err = chromedp.Run(ctx, chromedp.ScreenshotNodes([]*chromedp.Node{n}, 1)); err != nil {
				t.Fatalf("%s: screenshot: %v", f, err)
			}
			if img, err := png.Decode(bytes.NewReader(f.PNG)); err != nil || painted(img) || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		frames = append(frames, f)
	}
	return frames
}

// checkFrame fails the test unless f shows its e-mail at its width: its
// screenshot is that wide (and its 1 px border), and nothing in it is
// wider than the frame, which a phone would scroll sideways.
func checkFrame(t *testing.T, f galleryFrame) {
	t.Helper()
	if f.ClientWidth != f.Width || f.ScrollWidth > f.ClientWidth {
		t.Errorf("%s: the document is %d px wide in a viewport of %d px: it overflows horizontally", f, f.ScrollWidth, f.ClientWidth)
	}
	img, err := png.Decode(bytes.NewReader(f.PNG))
	if err != nil {
		t.Fatalf("%s: the screenshot is not a PNG: %v", f, err)
	}
	if w := img.Bounds().Dx(); w != f.Width+2 {
		t.Errorf("%s: the screenshot is %d px wide, want %d and the border", f, w, f.Width)
	}
	if !painted(img) {
		t.Errorf("%s: the screenshot is blank", f)
	}
	if dir := os.Getenv("GALLERY_FRAMES"); dir != "" {
		file := filepath.Join(dir, fmt.Sprintf("%s.%s.%d.png", f.Template, f.Lang, f.Width))
		if err := os.WriteFile(file, f.PNG, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// painted reports whether img shows more than a frame's border and
// background: three colours at least.
func painted(img image.Image) bool {
	colors := map[color.Color]bool{}
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y && len(colors) < 3; y += 4 {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X && len(colors) < 3; x += 4 {
			colors[img.At(x, y)] = true
		}
	}
	return len(colors) >= 3
}

// Every e-mail of the gallery, the built-in ones and deploy/templates',
// in every language, is shown at 375 px (a phone) and 800 px, and at
// each width nothing in it overflows horizontally; both screenshots are
// taken (GALLERY_FRAMES=dir saves them).
func TestGalleryFramesFitTheirWidthsInABrowser(t *testing.T) {
	templates, err := mailtemplate.Load(mailtemplate.Config{Dir: "../../deploy/templates", DefaultLanguage: "id", Brand: galleryBrand})
	if err != nil {
		t.Fatal(err)
	}
	s := setup(t, setupOpts{templates: templates})
	frames := galleryFrames(t, s.url)
	want := map[string]bool{}
	for _, name := range templates.Names() {
		for _, lang := range templates.Languages(name) {
			for _, w := range []int{375, 800} {
				want[fmt.Sprintf("%s in %s at %d px", name, lang, w)] = true
			}
		}
	}
	for _, f := range frames {
		if !want[f.String()] {
			t.Errorf("an unexpected frame: %s", f)
		}
		delete(want, f.String())
		checkFrame(t, f)
	}
	for f := range want {
		t.Errorf("the gallery lacks %s", f)
	}
}

// The "done when" of issue 35: a template a shop adds to TEMPLATES_DIR
// that names the built-in layout (deploy/templates/payment-reminder, the
// worked example of docs/templates.md, with its _partials/pay-button)
// renders branded at 375 px and 800 px without horizontal overflow, and
// its HTML passes the Nu Html Checker.
func TestANewTemplateOnTheBuiltInLayoutInABrowser(t *testing.T) {
	dir := "../../deploy/templates"
	meta, err := os.ReadFile(filepath.Join(dir, "payment-reminder", "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(meta), `"layout": "default"`) {
		t.Fatalf("payment-reminder/meta.json does not name the built-in layout:\n%s", meta)
	}
	if _, err := os.Stat(filepath.Join(dir, "_layouts")); err == nil {
		t.Fatalf("%s has layouts of its own: the built-in one is what this test is about", dir)
	}
	templates, err := mailtemplate.Load(mailtemplate.Config{Dir: dir, DefaultLanguage: "id", Brand: galleryBrand})
	if err != nil {
		t.Fatal(err)
	}
	sample, _ := templates.Sample("payment-reminder")
	docs := map[string]string{}
	for _, lang := range templates.Languages("payment-reminder") {
		r, err := templates.RenderLocale("payment-reminder", sample, lang)
		if err != nil {
			t.Fatal(err)
		}
		docs["payment-reminder "+lang] = r.HTML
		for _, want := range []string{galleryBrand.Name, galleryBrand.Address, galleryBrand.SupportEmail, "Ana Maria"} {
			if !strings.Contains(r.Text, want) {
				t.Errorf("the %s text part lacks %q:\n%s", lang, want, r.Text)
			}
		}
	}
	testenv.CheckHTML(t, docs)

	s := setup(t, setupOpts{templates: templates})
	seen := 0
	for _, f := range galleryFrames(t, s.url) {
		if f.Template != "payment-reminder" {
			continue
		}
		seen++
		checkFrame(t, f)
		button := map[string]string{"id": "Bayar sekarang", "en": "Pay now"}[f.Lang]
		for _, want := range []string{galleryBrand.Name, galleryBrand.Address, galleryBrand.SupportEmail, "Ana Maria", button} {
			if !strings.Contains(f.Text, want) {
				t.Errorf("%s shows no %q:\n%s", f, want, f.Text)
			}
		}
	}
	if seen != 4 {
		t.Errorf("the gallery shows payment-reminder in %d frames, want 2 languages × 2 widths", seen)
	}
}
