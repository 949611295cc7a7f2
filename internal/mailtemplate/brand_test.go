package mailtemplate

import (
	"reflect"
	"strings"
	"testing"
)

func TestReadBrand(t *testing.T) {
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
	if b, p := read(nil); !b.isZero() || len(p) != 0 {
		t.Errorf("unset: %+v, %v; want no brand and no problem", b, p)
	}
	b, p := read(map[string]string{"BRAND_NAME": " Toko Ana ", "BRAND_LOGO_URL": "https://cdn.shop.example/logo.png",
		"BRAND_ADDRESS": "Jl. Melati 7, Bandung 40115", "BRAND_SUPPORT_EMAIL": "Help@Shop.Example"})
	if want := (Brand{Name: "Toko Ana", LogoURL: "https://cdn.shop.example/logo.png", Address: "Jl. Melati 7, Bandung 40115", SupportEmail: "help@shop.example"}); !reflect.DeepEqual(b, want) || len(p) != 0 {
		t.Errorf("read %+v, %v; want %+v", b, p, want)
	}
	for env, want := range map[[2]string]string{
		{"BRAND_LOGO_URL", "http://shop.example/logo.png"}:  "want an https URL",
		{"BRAND_LOGO_URL", "/logo.png"}:                     "want an https URL",
		{"BRAND_LOGO_URL", "https://u:p@shop.example/l"}:    "user name or password",
		{"BRAND_NAME", "Toko\nAna"}:                         "control characters",
		{"BRAND_ADDRESS", "Jl. Melati\u202e7"}:              "bidirectional",
		{"BRAND_SUPPORT_EMAIL", "Toko <help@shop.example>"}: "",
	} {
		_, p := read(map[string]string{env[0]: env[1]})
		if got, ok := p[env[0]]; !ok || !strings.Contains(got, want) {
			t.Errorf("%s=%q: problems %v, want one for it containing %q", env[0], env[1], p, want)
		}
	}
}
