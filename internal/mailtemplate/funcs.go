package mailtemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/text/language"

	"github.com/sekali-dev/sekali/internal/locale"
)

// templateFuncs are the functions of every template, writing money and
// dates in the language lang (f its formats), with the shop's brand (s:
// its time zone and links).
func templateFuncs(f locale.Format, lang language.Tag, b Brand, s shop) map[string]any {
	return map[string]any{
		// lang is the BCP 47 tag of the variant rendered: <html lang="{{lang}}">,
		// and {{if eq lang "id"}} in a layout shared by every language.
		"lang": lang.String,
		// brand is the shop (Config.Brand): {{brand.Name}}, {{brand.LogoURL}},
		// {{brand.Address}}, {{brand.SupportEmail}}.
		"brand": func() Brand { return b },
		// money formats minor units of a currency: {{money .total .currency}}.
		"money": func(amount any, currency string) (string, error) {
			n, err := toInt64(amount)
			if err != nil {
				return "", err
			}
			return f.Money(n, currency), nil
		},
		// date formats an RFC 3339 timestamp in the shop's time zone
		// (SHOP_TIMEZONE), named: {{date .placed_at}}.
		"date": func(v string) (string, error) {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return "", fmt.Errorf("date: %w", err)
			}
			return f.DateTime(t.In(s.loc)), nil
		},
		// shortid is the first block of a UUID, upper case: {{shortid .order_id}}.
		"shortid": shortID,
		// ordernumber is the order as its customer knows it: the shop's
		// own number (.reference), or without one the short id of
		// .order_id: {{ordernumber .}}. Never the whole UUID, which
		// reads as noise and as a hash to spam filters.
		"ordernumber": func(data map[string]any) (string, error) {
			if ref, _ := data["reference"].(string); ref != "" {
				return ref, nil
			}
			id, _ := data["order_id"].(string)
			if id == "" {
				return "", errors.New("ordernumber: the data has neither reference nor order_id")
			}
			return shortID(id), nil
		},
		// orderurl is the shop's page of the order (SHOP_ORDER_URL, with
		// .order_id and .reference), "" without one, or when it names a
		// reference the order has not: {{with orderurl .}}…{{end}}.
		"orderurl": func(data map[string]any) string {
			if s.orderURL == "" {
				return ""
			}
			id, _ := data["order_id"].(string)
			ref, _ := data["reference"].(string)
			return expandLink(s.orderURL, map[string]string{placeOrderID: id, placeReference: ref})
		},
		// trackingurl is the carrier's page of the parcel
		// (SHOP_TRACKING_URLS), "" for a carrier it has none for:
		// {{with trackingurl .carrier .tracking_number}}…{{end}}.
		"trackingurl": func(carrier, number string) string {
			link := s.tracking[carrierKey(carrier)]
			if link == "" {
				return ""
			}
			return expandLink(link, map[string]string{placeTracking: number})
		},
	}
}

// shortID is the first block of a UUID, upper case: "0193A5B2".
func shortID(id string) string {
	head, _, _ := strings.Cut(id, "-")
	return strings.ToUpper(head)
}

func toInt64(v any) (int64, error) {
	switch n := v.(type) {
	case json.Number:
		return n.Int64()
	case int64:
		return n, nil
	case int:
		return int64(n), nil
	case string:
		return strconv.ParseInt(n, 10, 64)
	default:
		return 0, fmt.Errorf("money: %v (%T) is not a whole number of minor units", v, v)
	}
}
