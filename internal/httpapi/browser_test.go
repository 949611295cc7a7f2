//go:build browser

package httpapi_test

import (
	"bytes"
	"context"
	"html"
	"image/png"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/mailtemplate"
)

// The gallery in a real browser (Debian's headless Chromium): the page
// renders every template's subject, and a screenshot is taken, to
// docs/templates-gallery.png with make gallery. Run with -tags browser.
// TestGalleryFramesFitTheirWidthsInABrowser looks into its frames.
func TestGalleryInABrowser(t *testing.T) {
	chromium := chromiumPath(t)
	// The brand without its logo, which this machine cannot fetch: the
	// picture in the docs shows no broken image.
	brand := galleryBrand
	brand.LogoURL = ""
	templates, err := mailtemplate.Load(mailtemplate.Config{Dir: "../../deploy/templates", DefaultLanguage: "id", Brand: brand})
	if err != nil {
		t.Fatal(err)
	}
	s := setup(t, setupOpts{templates: templates})
	// The flags a sandboxed CI machine needs: no GPU, no network chatter,
	// a fresh profile.
	flags := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir()}
	browse := func(extra ...string) []byte {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, chromium, append(append(flags, extra...), s.url+"/templates")...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium %v: %v\n%s", extra, err, stderr.String())
		}
		return out
	}

	dom := string(browse("--dump-dom"))
	for _, name := range templates.Names() {
		sample, _ := templates.Sample(name)
		for _, lang := range templates.Languages(name) {
			out, _ := templates.RenderLocale(name, sample, lang)
			if !strings.Contains(dom, html.EscapeString(out.Subject)) {
				t.Errorf("the page Chromium rendered lacks the %s subject of %s", lang, name)
			}
		}
	}

	shot := os.Getenv("SCREENSHOT")
	if shot == "" {
		shot = t.TempDir() + "/gallery.png"
	}
	browse("--screenshot="+shot, "--window-size=1400,1800")
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1400 || b.Dy() != 1800 {
		t.Errorf("screenshot %v, want 1400x1800", b)
	}
	t.Logf("screenshot in %s", shot)
}

// chromiumPath is the browser the tests drive: CHROMIUM, or Debian's
// /usr/bin/chromium; the test fails, saying how to install it, if there
// is none.
func chromiumPath(t *testing.T) string {
	t.Helper()
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("no Chromium at %s (%v): apt-get install chromium, or make browser, which installs it", chromium, err)
	}
	return chromium
}
