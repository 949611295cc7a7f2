package mailtemplate

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// shopBrand is a deploy with every setting of the shop: the brand, its
// time zone and its links, so that every branch of the templates renders.
var shopBrand = Brand{Name: "Toko Ana", LogoURL: "https://shop.example/logo.png",
	Address: "Jl. Melati 7, Bandung 40115, Indonesia", SupportEmail: "help@shop.example",
	TimeZone: "Asia/Jakarta", OrderURL: "https://shop.example/account/orders/{reference}",
	TrackingURLs: map[string]string{"JNE": "https://www.jne.co.id/tracking?awb={tracking_number}"}}

// The built-in e-mails speak the shop's own words: its order number
// (the checkout's reference) in the subject, the HTML and the text, and
// never the order's whole UUID; every time in the shop's time zone,
// named (WIB for Asia/Jakarta); its links to the order and to the
// carrier's page of the parcel. Without an order number, the short id.
func TestTheBuiltinEmailsSpeakTheShopsOwnWords(t *testing.T) {
	t.Parallel()
	tmpl, err := Load(Config{Brand: shopBrand})
	if err != nil {
		t.Fatal(err)
	}
	const uuid = "0193a5b2-7c1e-7d4a-9f00-3c2b1a0e9d87"
	confirmation := `{"order_id":"` + uuid + `","reference":"TA-2026-0042","customer_name":"Maria","currency":"IDR",
		"items":[{"sku":"S","name":"Teh","quantity":1,"unit_price":21500050,"line_total":21500050}],"total":21500050,"placed_at":"2026-11-30T09:15:00Z"}`
	shipped := `{"order_id":"` + uuid + `","reference":"TA-2026-0042","customer_name":"Maria","carrier":"jne",
		"tracking_number":"JNE 0042/7781","items":[{"sku":"S","name":"Teh","quantity":1}],"shipped_at":"2026-12-01T03:00:00Z"}`
	for _, tc := range []struct {
		template, data, lang string
		want                 []string // in the text and in the HTML
	}{
		{"order-confirmation", confirmation, "en", []string{"30 November 2026, 16:15 WIB", "https://shop.example/account/orders/TA-2026-0042"}},
		{"order-confirmation", confirmation, "id", []string{"30 November 2026 pukul 16.15 WIB", "https://shop.example/account/orders/TA-2026-0042"}},
		// The carrier as the warehouse spelt it; the number percent-encoded.
		{"order-shipped", shipped, "en", []string{"1 December 2026, 10:00 WIB", "https://www.jne.co.id/tracking?awb=JNE%200042%2F7781", "https://shop.example/account/orders/TA-2026-0042"}},
		{"order-shipped", shipped, "id", []string{"1 Desember 2026 pukul 10.00 WIB", "https://www.jne.co.id/tracking?awb=JNE%200042%2F7781", "https://shop.example/account/orders/TA-2026-0042"}},
	} {
		r, err := tmpl.RenderLocale(tc.template, json.RawMessage(tc.data), tc.lang)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(r.Subject, "TA-2026-0042") {
			t.Errorf("%s (%s): subject %q lacks the order number", tc.template, tc.lang, r.Subject)
		}
		for _, w := range append(tc.want, "TA-2026-0042") {
			if !strings.Contains(r.Text, w) || !strings.Contains(r.HTML, w) {
				t.Errorf("%s (%s): text or HTML lacks %q:\n%s\n%s", tc.template, tc.lang, w, r.Text, r.HTML)
			}
		}
		if strings.Contains(r.Subject+r.Text+r.HTML, uuid) || strings.Contains(r.Text+r.HTML, "UTC") {
			t.Errorf("%s (%s) shows the order's UUID or a UTC time:\n%s\n%s", tc.template, tc.lang, r.Text, r.HTML)
		}

		// Without an order number: the short id, and no link that needs one.
		var m map[string]any
		_ = json.Unmarshal([]byte(tc.data), &m)
		delete(m, "reference")
		data, _ := json.Marshal(m)
		r, err = tmpl.RenderLocale(tc.template, data, tc.lang)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(r.Subject, "0193A5B2") || !strings.Contains(r.Text, "0193A5B2") || !strings.Contains(r.HTML, "0193A5B2") {
			t.Errorf("%s (%s) without an order number: no short id:\n%s\n%s", tc.template, tc.lang, r.Subject, r.Text)
		}
		if strings.Contains(r.Subject+r.Text+r.HTML, uuid) || strings.Contains(r.Text+r.HTML, "account/orders") {
			t.Errorf("%s (%s) without an order number shows its UUID, or a link made for a reference:\n%s", tc.template, tc.lang, r.Text)
		}
	}

	// A link by the order's id; no link settings, no links.
	byID := shopBrand
	byID.OrderURL, byID.TrackingURLs = "https://shop.example/o/{order_id}?ref={reference}", nil
	for b, want := range map[*Brand]string{&byID: "https://shop.example/o/" + uuid + "?ref=TA-2026-0042", {}: ""} {
		tmpl, err := Load(Config{Brand: *b})
		if err != nil {
			t.Fatal(err)
		}
		r, err := tmpl.RenderLocale("order-shipped", json.RawMessage(shipped), "en")
		if err != nil {
			t.Fatal(err)
		}
		if want != "" && !strings.Contains(r.Text, want) {
			t.Errorf("SHOP_ORDER_URL %q: the text lacks %q:\n%s", b.OrderURL, want, r.Text)
		}
		if want == "" && strings.Contains(r.Text+r.HTML, "https://") {
			t.Errorf("no links set, yet:\n%s", r.Text)
		}
		if strings.Contains(r.Text, "jne.co.id") {
			t.Errorf("no tracking URLs set, yet a tracking link:\n%s", r.Text)
		}
	}
}

// Copy as a careful shop writes it: in every template the service
// ships, in every language, no paragraph of the text or the HTML starts
// with a lower-case letter (the greeting's comma ends a paragraph of its
// own: "Hi Maria," then "Thank you …").
func TestParagraphsStartWithACapital(t *testing.T) {
	t.Parallel()
	tmpl, err := Load(Config{Brand: shopBrand, Dir: filepath.Join("..", "..", "deploy", "templates")})
	if err != nil {
		t.Fatal(err)
	}
	tag := regexp.MustCompile(`<[^>]*>`)
	para := regexp.MustCompile(`(?s)<p[ >].*?</p>`)
	for _, name := range tmpl.Names() {
		sample, _ := tmpl.Sample(name)
		for _, lang := range tmpl.Languages(name) {
			r, err := tmpl.RenderLocale(name, sample, lang)
			if err != nil {
				t.Fatal(err)
			}
			paragraphs := strings.Split(r.Text, "\n\n")
			for _, p := range para.FindAllString(r.HTML, -1) {
				paragraphs = append(paragraphs, tag.ReplaceAllString(p, ""))
			}
			for _, p := range paragraphs {
				p = strings.TrimSpace(p)
				if c, _ := utf8.DecodeRuneInString(p); unicode.IsLower(c) {
					t.Errorf("%s (%s): a paragraph starts lower case: %q", name, lang, p)
				}
			}
		}
	}
}

func TestReadShopSettings(t *testing.T) {
	t.Parallel()
	read := func(env map[string]string) (Brand, map[string]string) {
		problems := map[string]string{}
		b := ReadBrand(func(k string) string { return env[k] }, func(name string, err error) bool {
			if err != nil {
				problems[name] = err.Error()
			}
			return err == nil
		})
		return b, problems
	}
	b, p := read(map[string]string{"SHOP_TIMEZONE": "Asia/Jakarta", "SHOP_ORDER_URL": "https://shop.example/orders/{reference}?id={order_id}",
		"SHOP_TRACKING_URLS": `{"JNE": "https://www.jne.co.id/tracking?awb={tracking_number}", "J&T Express": "https://jet.co.id/track/{tracking_number}"}`})
	want := Brand{TimeZone: "Asia/Jakarta", OrderURL: "https://shop.example/orders/{reference}?id={order_id}",
		TrackingURLs: map[string]string{"JNE": "https://www.jne.co.id/tracking?awb={tracking_number}", "J&T Express": "https://jet.co.id/track/{tracking_number}"}}
	if !reflect.DeepEqual(b, want) || len(p) != 0 {
		t.Errorf("read %+v, %v; want %+v", b, p, want)
	}
	for env, want := range map[[2]string]string{
		{"SHOP_TIMEZONE", "Asia/Bandung"}:                                                                       "not a time zone of the IANA database",
		{"SHOP_TIMEZONE", "WIB"}:                                                                                "not a time zone of the IANA database",
		{"SHOP_TIMEZONE", "Local"}:                                                                              "depends on the machine",
		{"SHOP_ORDER_URL", "http://shop.example/orders/{reference}"}:                                            "want an https URL",
		{"SHOP_ORDER_URL", "https://shop.example/orders/{order}"}:                                               "{order} is not a placeholder",
		{"SHOP_ORDER_URL", "https://shop.example/orders/{reference"}:                                            "a brace without its pair",
		{"SHOP_ORDER_URL", "https://{reference}.shop.example/"}:                                                 "not be in the host name",
		{"SHOP_ORDER_URL", "https://u:p@shop.example/{reference}"}:                                              "user name or password",
		{"SHOP_TRACKING_URLS", `JNE=https://jne.co.id/{tracking_number}`}:                                       "want a JSON object",
		{"SHOP_TRACKING_URLS", `{"JNE": "https://jne.co.id/track"}`}:                                            "has no {tracking_number}",
		{"SHOP_TRACKING_URLS", `{"JNE": "https://jne.co.id/{reference}"}`}:                                      "{reference} is not a placeholder",
		{"SHOP_TRACKING_URLS", `{"JNE": "https://a/{tracking_number}", "jne": ""}`}:                             "want an https URL",
		{"SHOP_TRACKING_URLS", `{"JNE": "https://a/{tracking_number}", " jne": "https://b/{tracking_number}"}`}: "the same carrier",
	} {
		_, p := read(map[string]string{env[0]: env[1]})
		if got, ok := p[env[0]]; !ok || !strings.Contains(got, want) {
			t.Errorf("%s=%q: problems %v, want one for it containing %q", env[0], env[1], p, want)
		}
	}
	// A Brand made in code is held to the same rules when it loads.
	if _, err := Load(Config{Brand: Brand{TimeZone: "Mars/Olympus"}}); err == nil || !strings.Contains(err.Error(), "SHOP_TIMEZONE") {
		t.Errorf("Load with an unknown time zone: %v", err)
	}
}

// A template version keeps the shop's settings it rendered with: loaded
// again, it writes times in the same zone; another zone is another
// version.
func TestAVersionKeepsTheTimeZone(t *testing.T) {
	t.Parallel()
	utc, err := Load(Config{})
	if err != nil {
		t.Fatal(err)
	}
	jakarta, err := Load(Config{Brand: Brand{TimeZone: "Asia/Jakarta"}})
	if err != nil {
		t.Fatal(err)
	}
	if utc.Version("order-shipped") == jakarta.Version("order-shipped") {
		t.Error("SHOP_TIMEZONE changed, the version did not")
	}
	for _, v := range jakarta.Versions() {
		if v.Template != "order-shipped" {
			continue
		}
		again, err := LoadVersion(v, "en")
		if err != nil {
			t.Fatal(err)
		}
		sample, _ := again.Sample("order-shipped")
		r, err := again.Render("order-shipped", sample)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(r.Text, "1 December 2026, 10:00 WIB") {
			t.Errorf("the version loaded again writes its time otherwise:\n%s", r.Text)
		}
	}
}
