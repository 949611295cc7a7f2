package order

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// price is a unit price as the API decodes one: a pointer, nil when the
// field is missing.
func price(n int64) *int64 { return &n }

// basket is a valid checkout: two paid lines, a language.
func basket() Checkout {
	return Checkout{
		CustomerEmail: "ana.maria@example.com",
		CustomerName:  "Ana Maria",
		Currency:      "IDR",
		Locale:        "id-ID",
		Items: []CheckoutItem{
			{SKU: "TEA-01", Name: "Teh melati 250 g", Quantity: 2, UnitPrice: price(4500000)},
			{SKU: "CUP-02", Name: "Cangkir & tatakan", Quantity: 1, UnitPrice: price(12500050)},
		},
	}
}

// with returns basket() changed by f.
func with(f func(c *Checkout)) Checkout {
	c := basket()
	f(&c)
	return c
}

// items is n lines of the same item.
func items(n int, it CheckoutItem) []CheckoutItem {
	out := make([]CheckoutItem, n)
	for i := range out {
		out[i] = it
	}
	return out
}

// A checkout that passes is recorded in canonical form: text trimmed
// (Unicode spaces too), the address lower-cased, the language tag
// canonical, every line's total and the order's computed in integer minor
// units, up to 2^53-1 exactly; non-ASCII text is kept as it came.
func TestCheckoutCanonicalForm(t *testing.T) {
	t.Parallel()
	// 9007199254740991 = 6361 × 1416003655831: a line exactly at the bound.
	const boundQuantity, boundPrice = 6361, 1416003655831
	tests := []struct {
		name string
		in   Checkout
		want validCheckout
	}{
		{"trimmed and lower-cased", Checkout{
			CustomerEmail: "  Ana.Maria@Example.COM\t",
			CustomerName:  "\u00a0 Siti Nurhaliza \u3000",
			Currency:      "IDR",
			Locale:        "id-id",
			Items: []CheckoutItem{
				{SKU: " TEA-01 ", Name: "\tTeh melati 250 g\u2003", Quantity: 2, UnitPrice: price(4500000)},
				{SKU: "CUP-02", Name: "Cangkir & tatakan", Quantity: 1, UnitPrice: price(12500050)},
			},
		}, validCheckout{
			Email: "ana.maria@example.com", Name: "Siti Nurhaliza", Currency: "IDR", Locale: "id-ID",
			Items: []Item{
				{SKU: "TEA-01", Name: "Teh melati 250 g", Quantity: 2, UnitPrice: 4500000, LineTotal: 9000000},
				{SKU: "CUP-02", Name: "Cangkir & tatakan", Quantity: 1, UnitPrice: 12500050, LineTotal: 12500050},
			},
			Total: 21500050,
		}},
		{"non-ASCII text as it came, no locale", Checkout{
			CustomerEmail: "sara@example.com", CustomerName: "سارة 佐藤 Café\u0301 ☕", Currency: "JPY",
			Items: []CheckoutItem{{SKU: "湯呑-1", Name: "Kopi Toraja – 200 g «premium»", Quantity: 3, UnitPrice: price(1200)}},
		}, validCheckout{
			Email: "sara@example.com", Name: "سارة 佐藤 Café\u0301 ☕", Currency: "JPY",
			Items: []Item{{SKU: "湯呑-1", Name: "Kopi Toraja – 200 g «premium»", Quantity: 3, UnitPrice: 1200, LineTotal: 3600}},
			Total: 3600,
		}},
		{"a free order (a keyed caller may place one)", with(func(c *Checkout) {
			c.Items = []CheckoutItem{{SKU: "GIFT", Name: "Sampel", Quantity: 5, UnitPrice: price(0)}}
		}), validCheckout{
			Email: "ana.maria@example.com", Name: "Ana Maria", Currency: "IDR", Locale: "id-ID",
			Items: []Item{{SKU: "GIFT", Name: "Sampel", Quantity: 5, UnitPrice: 0, LineTotal: 0}},
		}},
		{"every bound reached, none passed", with(func(c *Checkout) {
			c.CustomerName = strings.Repeat("é", maxNameRunes) // 400 bytes: the bound counts characters
			c.Items = []CheckoutItem{
				{SKU: strings.Repeat("号", maxSKURunes), Name: "Satu", Quantity: MaxQuantity, UnitPrice: price(0)},
				{SKU: "B", Name: "Dua", Quantity: boundQuantity, UnitPrice: price(boundPrice - 1)},
				{SKU: "C", Name: "Tiga", Quantity: 1, UnitPrice: price(boundQuantity)}, // the total at 2^53-1 exactly
			}
		}), validCheckout{
			Email: "ana.maria@example.com", Name: strings.Repeat("é", maxNameRunes), Currency: "IDR", Locale: "id-ID",
			Items: []Item{
				{SKU: strings.Repeat("号", maxSKURunes), Name: "Satu", Quantity: MaxQuantity, UnitPrice: 0, LineTotal: 0},
				{SKU: "B", Name: "Dua", Quantity: boundQuantity, UnitPrice: boundPrice - 1, LineTotal: MaxAmount - boundQuantity},
				{SKU: "C", Name: "Tiga", Quantity: 1, UnitPrice: boundQuantity, LineTotal: boundQuantity},
			},
			Total: MaxAmount,
		}},
		{"one line at 2^53-1", with(func(c *Checkout) {
			c.Items = []CheckoutItem{{SKU: "A", Name: "A", Quantity: boundQuantity, UnitPrice: price(boundPrice)}}
		}), validCheckout{
			Email: "ana.maria@example.com", Name: "Ana Maria", Currency: "IDR", Locale: "id-ID",
			Items: []Item{{SKU: "A", Name: "A", Quantity: boundQuantity, UnitPrice: boundPrice, LineTotal: MaxAmount}},
			Total: MaxAmount,
		}},
	}
	for _, tt := range tests {
		got, err := tt.in.validate()
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.name, got, tt.want)
		}
	}

	// A hundred items, the most a checkout may hold.
	c := with(func(c *Checkout) {
		c.Items = items(MaxItems, CheckoutItem{SKU: "A", Name: "A", Quantity: 1, UnitPrice: price(7)})
	})
	if v, err := c.validate(); err != nil || len(v.Items) != MaxItems || v.Total != 7*MaxItems {
		t.Errorf("a hundred items: %d items, total %d, %v", len(v.Items), v.Total, err)
	}
}

// A language tag is kept in its canonical form, so that the same
// customer's language is one value wherever it is compared (the
// Idempotency-Key's fingerprint, the template's language match).
func TestCheckoutLocaleIsCanonical(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"id-ID":      "id-ID",
		"id-id":      "id-ID",
		"EN-gb":      "en-GB",
		"en_GB":      "en-GB", // a POSIX-style tag, as some clients send
		"in":         "id",    // the old code for Indonesian
		"iw":         "he",
		"zh-hant-tw": "zh-Hant-TW",
		"":           "",
	} {
		v, err := with(func(c *Checkout) { c.Locale = in }).validate()
		if err != nil || v.Locale != want {
			t.Errorf("locale %q: %q, %v; want %q", in, v.Locale, err, want)
		}
	}
}

// pointers lists the fields an error names, in order.
func pointers(t *testing.T, err error) []string {
	t.Helper()
	var verr *ValidationError
	if !errors.As(err, &verr) {
		t.Errorf("error %v, want a *ValidationError", err)
		return nil
	}
	var out []string
	for _, f := range verr.Fields {
		if f.Detail == "" {
			t.Errorf("%s has no detail", f.Pointer)
		}
		out = append(out, f.Pointer)
	}
	return out
}

// A checkout that would not be recorded is refused with every problem at
// once, each at its field, and a problem is reported once: a line in
// error does not also count towards the total, and a total past the
// bound is one problem however many lines push it further.
func TestCheckoutRefusals(t *testing.T) {
	t.Parallel()
	item := func(f func(it *CheckoutItem)) func(c *Checkout) {
		return func(c *Checkout) { f(&c.Items[0]) }
	}
	tests := []struct {
		name string
		in   Checkout
		want []string
	}{
		{"every field at once", Checkout{
			CustomerEmail: "ana", CustomerName: " ", Currency: "idr", Locale: "english",
			Items: []CheckoutItem{{SKU: "", Name: "\u200b", Quantity: 0}, {SKU: "B", Name: "B", Quantity: 1, UnitPrice: price(-1)}},
		}, []string{"/customer_email", "/customer_name", "/locale", "/currency",
			"/items/0/sku", "/items/0/name", "/items/0/quantity", "/items/0/unit_price", "/items/1/unit_price"}},
		{"quantity above the bound", with(item(func(it *CheckoutItem) { it.Quantity = MaxQuantity + 1 })), []string{"/items/0/quantity"}},
		// Were the bound not checked first, int32(2^32+1) would record a
		// quantity of 1.
		{"quantity past int32", with(item(func(it *CheckoutItem) { it.Quantity = 1<<32 + 1 })), []string{"/items/0/quantity"}},
		{"unit price above 2^53-1", with(item(func(it *CheckoutItem) { it.UnitPrice = price(MaxAmount + 1) })), []string{"/items/0/unit_price"}},
		{"the most negative unit price", with(item(func(it *CheckoutItem) { it.UnitPrice = price(math.MinInt64) })), []string{"/items/0/unit_price"}},
		{"a line one step past 2^53-1", with(item(func(it *CheckoutItem) { it.Quantity, it.UnitPrice = 6361, price(1416003655832) })), []string{"/items/0"}},
		// 2^53-1 × 10^6 is past int64: the product wraps, and is refused
		// as the line it is, not as a total.
		{"a line past int64", with(item(func(it *CheckoutItem) { it.Quantity, it.UnitPrice = MaxQuantity, price(MaxAmount) })), []string{"/items/0"}},
		{"a total one past 2^53-1", with(func(c *Checkout) {
			c.Items = []CheckoutItem{{SKU: "A", Name: "A", Quantity: 1, UnitPrice: price(MaxAmount)}, {SKU: "B", Name: "B", Quantity: 1, UnitPrice: price(1)}}
		}), []string{"/items"}},
		{"a total past the bound, said once", with(func(c *Checkout) {
			c.Items = items(3, CheckoutItem{SKU: "A", Name: "A", Quantity: 1, UnitPrice: price(MaxAmount)})
		}), []string{"/items"}},
		{"a refused line does not count towards the total", with(func(c *Checkout) {
			c.Items = []CheckoutItem{{SKU: "A", Name: "A", Quantity: 1, UnitPrice: price(-5)}, {SKU: "B", Name: "B", Quantity: 1, UnitPrice: price(MaxAmount)}}
		}), []string{"/items/0/unit_price"}},
		{"no items", with(func(c *Checkout) { c.Items = nil }), []string{"/items"}},
		{"a hundred and one items", with(func(c *Checkout) {
			c.Items = items(MaxItems+1, CheckoutItem{SKU: "A", Name: "A", Quantity: 1, UnitPrice: price(1)})
		}), []string{"/items"}},
		{"a name one character too long", with(func(c *Checkout) { c.CustomerName = strings.Repeat("é", maxNameRunes+1) }), []string{"/customer_name"}},
		{"an item name one character too long", with(item(func(it *CheckoutItem) { it.Name = strings.Repeat("名", maxNameRunes+1) })), []string{"/items/0/name"}},
		{"a SKU one character too long", with(item(func(it *CheckoutItem) { it.SKU = strings.Repeat("S", maxSKURunes+1) })), []string{"/items/0/sku"}},
		{"a SKU on two lines", with(item(func(it *CheckoutItem) { it.SKU = "TEA\n01" })), []string{"/items/0/sku"}},
		{"a well-formed but unknown language", with(func(c *Checkout) { c.Locale = "xx" }), []string{"/locale"}},
		{"a language tag over 35 characters", with(func(c *Checkout) { c.Locale = "en-GB-u-ca-gregory-nu-latn-x-abcdefg" }), []string{"/locale"}},
		{"a currency no longer in use", with(func(c *Checkout) { c.Currency = "HRK" }), []string{"/currency"}},
	}
	for _, tt := range tests {
		err := refused(t, tt.in)
		if got := pointers(t, err); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v, want %v\n(%v)", tt.name, got, tt.want, err)
		}
	}
}

// refused is c's validation error, checked to agree with the exported
// Validate and to come with no checkout.
func refused(t *testing.T, c Checkout) error {
	t.Helper()
	v, err := c.validate()
	if !reflect.DeepEqual(v, validCheckout{}) {
		t.Errorf("a refused checkout came back as %+v", v)
	}
	if exported := c.Validate(); !reflect.DeepEqual(exported, err) {
		t.Errorf("Validate = %v, validate = %v", exported, err)
	}
	return err
}

// The public checkout's rules (PublicRules), on a checkout that passed
// validation: what the confirmation shows (the customer's name, the
// items' names and SKUs) carries no link, and a total of 0 is refused
// unless the shop gives things away; a free line in a paid order is
// fine, and so is text that only looks like it has dots.
func TestPublicRules(t *testing.T) {
	t.Parallel()
	free := func(c *Checkout) {
		for i := range c.Items {
			c.Items[i].UnitPrice = price(0)
		}
	}
	tests := []struct {
		name  string
		rules PublicRules
		in    Checkout
		want  []string // nil: admitted
	}{
		{"an ordinary checkout", PublicRules{}, with(func(c *Checkout) {
			c.CustomerName, c.Items[0].Name, c.Items[0].SKU = "Dr. Ana M. Siregar", "Teh 2.5 kg, v1.2", "TEA-01.B"
		}), nil},
		{"a link in the name", PublicRules{}, with(func(c *Checkout) { c.CustomerName = "WIN: http://evil.test/claim" }), []string{"/customer_name"}},
		{"an address in the name", PublicRules{}, with(func(c *Checkout) { c.CustomerName = "write to ana@evil.test" }), []string{"/customer_name"}},
		{"a domain in an item's name", PublicRules{}, with(func(c *Checkout) { c.Items[1].Name = "Cangkir, more at toko-murah.co.id" }), []string{"/items/1/name"}},
		{"a domain as a SKU", PublicRules{}, with(func(c *Checkout) { c.Items[0].SKU = "SKU.example.com" }), []string{"/items/0/sku"}},
		{"a free line in a paid order", PublicRules{}, with(func(c *Checkout) { c.Items[0].UnitPrice = price(0) }), nil},
		{"a free order", PublicRules{}, with(free), []string{"/items"}},
		{"a free order where the shop gives things away", PublicRules{FreeOrders: true}, with(free), nil},
		{"everything at once", PublicRules{}, with(func(c *Checkout) {
			free(c)
			c.CustomerName, c.Items[0].Name, c.Items[0].SKU = "www.evil.test", "more at tokomurah.id", "promo.co.id"
		}), []string{"/customer_name", "/items/0/name", "/items/0/sku", "/items"}},
	}
	for _, tt := range tests {
		v, err := tt.in.validate()
		if err != nil {
			t.Fatalf("%s: not a valid checkout: %v", tt.name, err)
		}
		err = tt.rules.checkPublic(v)
		switch {
		case tt.want == nil && err != nil:
			t.Errorf("%s: refused: %v", tt.name, err)
		case tt.want != nil:
			if got := pointers(t, err); !slices.Equal(got, tt.want) {
				t.Errorf("%s: %v, want %v\n(%v)", tt.name, got, tt.want, err)
			}
		}
	}
}

// A shipment's carrier and tracking number are trimmed, one line each, at
// most 100 characters.
func TestShipmentValidation(t *testing.T) {
	t.Parallel()
	got, err := Shipment{Carrier: "  J&T Express\u00a0", TrackingNumber: "\tJT-0042 7781 "}.validate()
	if err != nil || got != (Shipment{Carrier: "J&T Express", TrackingNumber: "JT-0042 7781"}) {
		t.Errorf("validate = %+v, %v", got, err)
	}
	if _, err := (Shipment{Carrier: strings.Repeat("運", 100), TrackingNumber: strings.Repeat("9", 100)}).validate(); err != nil {
		t.Errorf("at the bound: %v", err)
	}
	for _, tt := range []struct {
		in   Shipment
		want []string
	}{
		{Shipment{}, []string{"/carrier", "/tracking_number"}},
		{Shipment{Carrier: strings.Repeat("運", 101), TrackingNumber: "1"}, []string{"/carrier"}},
		{Shipment{Carrier: "JNE", TrackingNumber: "JNE-1\r\nBcc: eve@example.com"}, []string{"/tracking_number"}},
	} {
		got, err := tt.in.validate()
		if p := pointers(t, err); !slices.Equal(p, tt.want) || got != (Shipment{}) {
			t.Errorf("%+v: %v %+v, want %v", tt.in, p, got, tt.want)
		}
	}
}
