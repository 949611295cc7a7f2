package mailtemplate

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/text/language"

	"github.com/sekali-dev/sekali/internal/locale"
)

// templateFuncs are the functions of every template, writing money and
// dates in the language lang (f its formats), with the shop's brand.
func templateFuncs(f locale.Format, lang language.Tag, b Brand) map[string]any {
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
		// date formats an RFC 3339 timestamp, in UTC: {{date .placed_at}}.
		"date": func(v string) (string, error) {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return "", fmt.Errorf("date: %w", err)
			}
			return f.DateTime(t), nil
		},
		// shortid is the first block of a UUID, for subjects: {{shortid .order_id}}.
		"shortid": func(v string) string {
			head, _, _ := strings.Cut(v, "-")
			return strings.ToUpper(head)
		},
	}
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
