package mailtemplate

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// A template's version is the digest of its files: the same files give
// the same digest however often they are loaded and wherever they lie, a
// change in any file another; a hidden file is none of them.
func TestVersionIsTheDigestOfTheTemplatesFiles(t *testing.T) {
	t.Parallel()
	load := func(files map[string]string) *Templates {
		t.Helper()
		tmpl, err := Load(Config{Dir: writeDir(t, files)})
		if err != nil {
			t.Fatal(err)
		}
		return tmpl
	}
	a, b := load(cancelled()), load(with(cancelled(), map[string]string{"order-cancelled/.DS_Store": "x"}))
	v := a.Version("order-cancelled")
	if len(v) != 32 || v != b.Version("order-cancelled") {
		t.Errorf("the same files give %q and %q, want one digest of 32 hex digits", v, b.Version("order-cancelled"))
	}
	changed := load(with(cancelled(), map[string]string{"order-cancelled/en/html.tmpl": "<p>Hello {{.customer_name}}.</p>\n"}))
	if changed.Version("order-cancelled") == v {
		t.Error("a changed html.tmpl kept the version")
	}
	if a.Version("order-confirmation") == "" || a.Version("order-confirmation") != b.Version("order-confirmation") {
		t.Error("the built-in templates have no version, or not the same in two loads")
	}
	if a.Version("no-such-template") != "" {
		t.Error("an unknown template has a version")
	}
	var files []string
	for _, ver := range a.Versions() {
		if ver.Template == "order-cancelled" {
			for _, f := range ver.Files {
				files = append(files, f.Path)
			}
		}
	}
	want := []string{"en/html.tmpl", "en/subject.tmpl", "en/text.tmpl", "id/html.tmpl", "id/subject.tmpl", "id/text.tmpl", "sample.json", "schema.json"}
	if !slices.Equal(files, want) {
		t.Errorf("the version's files: %v, want %v", files, want)
	}
}

// A version loaded again from its files renders, in the language it
// rendered, what the template did before it changed; files that are not
// the version's are refused.
func TestLoadVersionRendersTheVersionAsItWas(t *testing.T) {
	t.Parallel()
	before, err := Load(Config{Dir: writeDir(t, cancelled()), DefaultLanguage: "id"})
	if err != nil {
		t.Fatal(err)
	}
	var v Version
	for _, ver := range before.Versions() {
		if ver.Template == "order-cancelled" {
			v = ver
		}
	}
	data := json.RawMessage(`{"customer_name": "Ana", "refund": 15000000, "currency": "IDR", "cancelled_at": "2026-11-30T09:15:00Z"}`)
	for _, lang := range []string{"en", "id"} {
		want, err := before.RenderLocale("order-cancelled", data, lang)
		if err != nil {
			t.Fatal(err)
		}
		again, err := LoadVersion(v, lang)
		if err != nil {
			t.Fatalf("LoadVersion(%s): %v", lang, err)
		}
		got, err := again.Render("order-cancelled", data)
		if err != nil || got != want {
			t.Errorf("%s: the version loaded again renders %+v, %v; want %+v", lang, got, err, want)
		}
	}
	forged := v
	forged.Files = slices.Clone(v.Files)
	forged.Files[0] = File{Path: forged.Files[0].Path, Content: []byte("<p>not this</p>")}
	if _, err := LoadVersion(forged, "en"); err == nil {
		t.Error("files that are not the version's loaded as the version")
	}
	if _, err := LoadVersion(v, "fr"); err == nil {
		t.Error("the version loaded in a language it does not have")
	}
}

// A template on a layout renders its layout, the partials and the brand
// as much as its own files: each is part of its version. A change of the
// layout, a partial or the brand is a new version, and the version kept
// from before renders, loaded again, the layout, footer and brand the
// customer got, not today's.
func TestAVersionHoldsItsLayoutPartialsAndBrand(t *testing.T) {
	t.Parallel()
	load := func(files map[string]string, brand string) *Templates {
		t.Helper()
		tmpl, err := Load(Config{Dir: writeDir(t, files), DefaultLanguage: "id", Brand: Brand{Name: brand}})
		if err != nil {
			t.Fatal(err)
		}
		return tmpl
	}
	before := load(shopLayout(), "Toko Ana")
	v := before.Version("order-cancelled")
	for name, after := range map[string]*Templates{
		"the layout":  load(with(shopLayout(), map[string]string{"_layouts/shop/text.tmpl": "{{template \"content\" .}}\n"}), "Toko Ana"),
		"a partial":   load(with(shopLayout(), map[string]string{"_partials/footer.text.tmpl": "-- \nsalam\n"}), "Toko Ana"),
		"the brand":   load(shopLayout(), "Toko Budi"),
		"the content": load(with(shopLayout(), map[string]string{"order-cancelled/en/text.tmpl": "Hi {{.customer_name}}.\n"}), "Toko Ana"),
	} {
		if after.Version("order-cancelled") == v {
			t.Errorf("a change of %s kept the version", name)
		}
	}
	var kept Version
	for _, ver := range before.Versions() {
		if ver.Template == "order-cancelled" {
			kept = ver
		}
	}
	want, err := before.RenderLocale("order-cancelled", json.RawMessage(`{"customer_name": "Ana", "refund": 15000000, "currency": "IDR", "cancelled_at": "2026-11-30T09:15:00Z"}`), "en")
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadVersion(kept, "en")
	if err != nil {
		t.Fatalf("LoadVersion: %v", err)
	}
	got, err := again.Render("order-cancelled", json.RawMessage(`{"customer_name": "Ana", "refund": 15000000, "currency": "IDR", "cancelled_at": "2026-11-30T09:15:00Z"}`))
	if err != nil || got != want {
		t.Errorf("the version loaded again renders\n%+v (%v)\nwant\n%+v", got, err, want)
	}
	if !strings.Contains(got.Text, "Toko Ana") {
		t.Errorf("the version's text lacks its brand's footer: %q", got.Text)
	}
	// The built-in templates' versions hold the built-in layout.
	if !slices.ContainsFunc(builtinVersion(t, "order-confirmation").Files, func(f File) bool { return f.Path == "_layouts/default/html.tmpl" }) {
		t.Error("the built-in confirmation's version lacks the built-in layout")
	}
}

// builtinVersion is the version of a built-in template.
func builtinVersion(t *testing.T, name string) Version {
	t.Helper()
	tmpl, err := LoadBuiltin()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range tmpl.Versions() {
		if v.Template == name {
			return v
		}
	}
	t.Fatalf("no version of %s", name)
	return Version{}
}
