package mailtemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // SHOP_TIMEZONE's zones, whatever the machine (or a distroless image) has

	"github.com/sekali-dev/sekali/internal/textrule"
)

// The placeholders of the shop's links: each is replaced by its value,
// percent-encoded.
const (
	placeOrderID   = "{order_id}"
	placeReference = "{reference}"
	placeTracking  = "{tracking_number}"
)

// readShop reads SHOP_TIMEZONE, SHOP_ORDER_URL and SHOP_TRACKING_URLS
// into b, telling check each one's problem.
func readShop(getenv func(string) string, check func(name string, err error) bool, b *Brand) {
	if tz := strings.TrimSpace(getenv("SHOP_TIMEZONE")); tz != "" {
		if _, err := location(tz); check("SHOP_TIMEZONE", err) {
			b.TimeZone = tz
		}
	}
	if u := strings.TrimSpace(getenv("SHOP_ORDER_URL")); u != "" {
		if check("SHOP_ORDER_URL", checkLink(u, placeOrderID, placeReference)) {
			b.OrderURL = u
		}
	}
	if raw := strings.TrimSpace(getenv("SHOP_TRACKING_URLS")); raw != "" {
		urls, err := parseTrackingURLs(raw)
		if check("SHOP_TRACKING_URLS", err) {
			b.TrackingURLs = urls
		}
	}
}

// shop is what the template functions need of a Brand, made once a
// load: the time zone, and the links by the carrier's key.
type shop struct {
	loc      *time.Location
	orderURL string
	tracking map[string]string // by carrierKey
}

// newShop checks b's time zone and links (ReadBrand's checks, for a
// Brand made otherwise: a test's, a kept version's) and makes its shop.
func newShop(b Brand) (shop, error) {
	var errs []error
	s := shop{loc: time.UTC, orderURL: b.OrderURL, tracking: map[string]string{}}
	loc, err := location(b.TimeZone)
	if err != nil {
		errs = append(errs, fmt.Errorf("SHOP_TIMEZONE: %w", err))
	} else {
		s.loc = loc
	}
	if b.OrderURL != "" {
		if err := checkLink(b.OrderURL, placeOrderID, placeReference); err != nil {
			errs = append(errs, fmt.Errorf("SHOP_ORDER_URL: %w", err))
		}
	}
	for carrier, u := range b.TrackingURLs {
		if err := checkTrackingURL(carrier, u); err != nil {
			errs = append(errs, fmt.Errorf("SHOP_TRACKING_URLS: %w", err))
		}
		s.tracking[carrierKey(carrier)] = u
	}
	return s, errors.Join(errs...)
}

// location is the IANA time zone tz; "" is UTC. Local is refused: it
// would be whatever the machine says.
func location(tz string) (*time.Location, error) {
	if tz == "Local" {
		return nil, errors.New(`"Local" depends on the machine: name the shop's zone, such as Asia/Jakarta`)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("%q is not a time zone of the IANA database: want a name such as Asia/Jakarta, Asia/Makassar or UTC", tz)
	}
	return loc, nil
}

// linkPlaceholder finds what a link names in braces.
var linkPlaceholder = regexp.MustCompile(`\{[^{}]*\}`)

// checkLink checks a link of the shop: an absolute https URL, with no
// user name or password, whose placeholders are among allowed and none
// in its host name.
func checkLink(link string, allowed ...string) error {
	for _, p := range linkPlaceholder.FindAllString(link, -1) {
		if !slices.Contains(allowed, p) {
			return fmt.Errorf("%q: %s is not a placeholder of this link (it may have %s)", link, p, strings.Join(allowed, ", "))
		}
	}
	filled := linkPlaceholder.ReplaceAllString(link, "x")
	if strings.ContainsAny(filled, "{} \t\r\n") {
		return fmt.Errorf("%q: a brace without its pair, or a space", link)
	}
	u, err := url.Parse(filled)
	switch {
	case err != nil:
		return fmt.Errorf("%q: %w", link, err)
	case u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("%q: want an https URL, such as https://shop.example/…", link)
	case u.User != nil:
		return fmt.Errorf("%q: must not carry a user name or password", link)
	}
	host := strings.TrimPrefix(link, "https://")
	if i := strings.IndexAny(host, "/?#"); i >= 0 {
		host = host[:i]
	}
	if linkPlaceholder.MatchString(host) {
		return fmt.Errorf("%q: a placeholder may not be in the host name", link)
	}
	return nil
}

// parseTrackingURLs reads SHOP_TRACKING_URLS: a JSON object of a URL by
// carrier, {"JNE": "https://…?awb={tracking_number}", …}.
func parseTrackingURLs(raw string) (map[string]string, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
	var urls map[string]string
	if err := dec.Decode(&urls); err != nil || dec.More() || urls == nil {
		return nil, errors.New(`want a JSON object of a URL by carrier, such as {"JNE": "https://www.jne.co.id/tracking?awb={tracking_number}"}`)
	}
	keys := map[string]string{}
	var errs []error
	for _, carrier := range slices.Sorted(maps.Keys(urls)) {
		if err := checkTrackingURL(carrier, urls[carrier]); err != nil {
			errs = append(errs, err)
			continue
		}
		if other, dup := keys[carrierKey(carrier)]; dup {
			errs = append(errs, fmt.Errorf("%q and %q are the same carrier", other, carrier))
		}
		keys[carrierKey(carrier)] = carrier
	}
	return urls, errors.Join(errs...)
}

// checkTrackingURL checks one carrier's entry of SHOP_TRACKING_URLS.
func checkTrackingURL(carrier, link string) error {
	if p := textrule.OneLine(strings.TrimSpace(carrier), 100); p != "" {
		return fmt.Errorf("the carrier %q %s", carrier, p)
	}
	if err := checkLink(link, placeTracking); err != nil {
		return fmt.Errorf("%s: %w", carrier, err)
	}
	if !strings.Contains(link, placeTracking) {
		return fmt.Errorf("%s: %q has no %s, where the parcel's number goes", carrier, link, placeTracking)
	}
	return nil
}

// carrierKey is how a carrier is matched: "J&T  express" is "j&t express".
func carrierKey(carrier string) string {
	return strings.ToLower(strings.Join(strings.Fields(carrier), " "))
}

// expandLink fills link's placeholders with values, percent-encoded;
// "" when one of them has no value: no link rather than a broken one.
func expandLink(link string, values map[string]string) string {
	ok := true
	out := linkPlaceholder.ReplaceAllStringFunc(link, func(p string) string {
		v := values[p]
		if v == "" {
			ok = false
		}
		return escapeValue(v)
	})
	if !ok {
		return ""
	}
	return out
}

// escapeValue percent-encodes every byte of v but RFC 3986's unreserved
// characters, so that a value is one path segment or one query value
// wherever the link puts it ("JNE/0042 7781" is "JNE%2F0042%207781").
func escapeValue(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}
