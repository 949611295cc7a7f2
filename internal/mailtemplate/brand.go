package mailtemplate

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/textrule"
)

// Brand is the shop as its e-mails show it: the layouts read it with
// {{brand.Name}}, {{brand.LogoURL}}, {{brand.Address}} and
// {{brand.SupportEmail}}. Every field is optional; a layout leaves out
// what is empty.
type Brand struct {
	Name         string // BRAND_NAME: "Toko Ana"
	LogoURL      string // BRAND_LOGO_URL: an https URL of the logo
	Address      string // BRAND_ADDRESS: the shop's postal address, one line
	SupportEmail string // BRAND_SUPPORT_EMAIL: where customers write
}

// ReadBrand reads the Brand from BRAND_NAME, BRAND_LOGO_URL,
// BRAND_ADDRESS and BRAND_SUPPORT_EMAIL through getenv, and tells check
// (a binary's envconfig.Reader.Check) each variable's problem: text that
// is not one line, a logo URL that is not https, a support address that
// is not one.
func ReadBrand(getenv func(string) string, check func(name string, err error) bool) Brand {
	b := Brand{
		Name:         strings.TrimSpace(getenv("BRAND_NAME")),
		LogoURL:      strings.TrimSpace(getenv("BRAND_LOGO_URL")),
		Address:      strings.TrimSpace(getenv("BRAND_ADDRESS")),
		SupportEmail: strings.TrimSpace(getenv("BRAND_SUPPORT_EMAIL")),
	}
	for _, f := range []struct{ name, v string }{{"BRAND_NAME", b.Name}, {"BRAND_ADDRESS", b.Address}} {
		if f.v == "" {
			continue
		}
		if p := textrule.OneLine(f.v, 300); p != "" {
			check(f.name, errors.New(p))
		}
	}
	if b.LogoURL != "" {
		check("BRAND_LOGO_URL", checkLogoURL(b.LogoURL))
	}
	if b.SupportEmail != "" {
		addr, err := mail.NormalizeAddress(b.SupportEmail)
		if check("BRAND_SUPPORT_EMAIL", err) {
			b.SupportEmail = addr
		}
	}
	return b
}

// checkLogoURL: an image a mail client loads, so https (clients block
// or warn about http), absolute, with a host.
func checkLogoURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return err
	case u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("%q: want an https URL such as https://shop.example/logo.png", s)
	case u.User != nil:
		return errors.New("must not carry a user name or password")
	}
	return nil
}
