package mailtemplate

import (
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/textrule"
)

// Brand is the shop as its e-mails show it: the layouts read it with
// {{brand.Name}}, {{brand.LogoURL}}, {{brand.Address}} and
// {{brand.SupportEmail}}; the template functions write times in its
// time zone (date) and make its links (orderurl, trackingurl). Every
// field is optional; a layout leaves out what is empty. A template
// version keeps it whole (Version), so a change is a new version.
type Brand struct {
	Name         string // BRAND_NAME: "Toko Ana"
	LogoURL      string // BRAND_LOGO_URL: an https URL of the logo
	Address      string // BRAND_ADDRESS: the shop's postal address, one line
	SupportEmail string // BRAND_SUPPORT_EMAIL: where customers write
	// TimeZone is SHOP_TIMEZONE, an IANA name ("Asia/Jakarta"): every
	// date and time an e-mail shows is written in it; "" for UTC.
	TimeZone string `json:",omitempty"`
	// OrderURL is SHOP_ORDER_URL: the shop's page of one order, an https
	// URL with {order_id} or {reference} where the order's goes; "" for
	// none (orderurl).
	OrderURL string `json:",omitempty"`
	// TrackingURLs is SHOP_TRACKING_URLS: by carrier, as a shipment names
	// it (matched without regard to case or spacing: carrierKey), the
	// carrier's page of one parcel, an https URL with {tracking_number}
	// (trackingurl).
	TrackingURLs map[string]string `json:",omitempty"`
}

// isZero reports whether no field of b is set.
func (b Brand) isZero() bool { return reflect.ValueOf(b).IsZero() }

// ReadBrand reads the Brand from BRAND_NAME, BRAND_LOGO_URL,
// BRAND_ADDRESS, BRAND_SUPPORT_EMAIL, SHOP_TIMEZONE, SHOP_ORDER_URL and
// SHOP_TRACKING_URLS through getenv, and tells check (a binary's
// envconfig.Reader.Check) each variable's problem: text that is not one
// line, a logo URL that is not https, a support address that is not
// one, a time zone the database does not know, a link that is not an
// https URL with the placeholders it may have.
func ReadBrand(getenv func(string) string, check func(name string, err error) bool) Brand {
	b := Brand{
		Name:         strings.TrimSpace(getenv("BRAND_NAME")),
		LogoURL:      strings.TrimSpace(getenv("BRAND_LOGO_URL")),
		Address:      strings.TrimSpace(getenv("BRAND_ADDRESS")),
		SupportEmail: strings.TrimSpace(getenv("BRAND_SUPPORT_EMAIL")),
	}
	readShop(getenv, check, &b)
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
