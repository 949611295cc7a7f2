package order

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/text/language"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/money"
	"github.com/sekali-dev/sekali/internal/textrule"
)

// Limits on a checkout. MaxAmount is the largest integer a JSON client in
// JavaScript reads exactly (2^53-1); no price or total may exceed it.
const (
	MaxItems          = 100
	MaxQuantity       = 1_000_000
	MaxAmount         = 1<<53 - 1
	MaxReferenceRunes = 64
	maxNameRunes      = 200
	maxSKURunes       = 64
)

// Checkout is what a customer asks to buy, as received.
type Checkout struct {
	CustomerEmail string
	CustomerName  string
	Currency      string
	Items         []CheckoutItem
	Locale        string // the customer's language, BCP 47 (id-ID, en); "" for the default
	// Reference is the shop's own order number ("TA-2026-0042"), which
	// its e-mails show; "" for none (they show the short id). One owner's
	// orders never share one.
	Reference string
}

// CheckoutItem is one requested line. UnitPrice is a pointer so that a
// missing price is told apart from a free item.
type CheckoutItem struct {
	SKU       string
	Name      string
	Quantity  int64
	UnitPrice *int64
}

// FieldError names one invalid field by its JSON pointer, e.g. "/items/0/quantity".
type FieldError struct {
	Pointer string `json:"pointer"`
	Detail  string `json:"detail"`
}

// ValidationError lists every problem found in a checkout at once.
type ValidationError struct {
	Fields []FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Pointer + ": " + f.Detail
	}
	return "order: invalid checkout: " + strings.Join(parts, "; ")
}

func (e *ValidationError) add(pointer, format string, args ...any) {
	e.Fields = append(e.Fields, FieldError{Pointer: pointer, Detail: fmt.Sprintf(format, args...)})
}

// validCheckout is a checkout that passed validation, in canonical form.
type validCheckout struct {
	Email    string
	Name     string
	Currency string
	Items    []Item
	Total    int64
	Locale   string `json:",omitempty"` // canonical BCP 47
	// Reference is left out when empty, so that a checkout without one
	// has the fingerprint it had before there were references.
	Reference string `json:",omitempty"`
}

// Validate reports what is wrong with the checkout (a *ValidationError
// naming each field), or nil when Place would record it.
func (c Checkout) Validate() error {
	_, err := c.validate()
	return err
}

// validate checks every field and computes the line totals and the total,
// refusing any sum that would leave the safe integer range.
func (c Checkout) validate() (validCheckout, error) {
	var verr ValidationError
	v := validCheckout{Currency: c.Currency}

	email, err := mail.NormalizeAddress(c.CustomerEmail)
	if err != nil {
		verr.add("/customer_email", "%v", err)
	}
	v.Email = email

	v.Name = strings.TrimSpace(c.CustomerName)
	checkText(&verr, "/customer_name", v.Name, maxNameRunes)

	if v.Reference = strings.TrimSpace(c.Reference); v.Reference != "" {
		checkText(&verr, "/reference", v.Reference, MaxReferenceRunes)
	} else if c.Reference != "" {
		verr.add("/reference", "is blank: leave it out for an order without a number of the shop's")
	}

	if c.Locale != "" {
		v.Locale, err = canonicalLocale(c.Locale)
		if err != nil {
			verr.add("/locale", "%v", err)
		}
	}

	if !money.Known(c.Currency) {
		verr.add("/currency", "must be an active ISO 4217 currency code in upper case, such as USD or IDR")
	}

	switch {
	case len(c.Items) == 0:
		verr.add("/items", "must hold at least one item")
	case len(c.Items) > MaxItems:
		verr.add("/items", "must hold at most %d items", MaxItems)
	default:
		v.Items = make([]Item, 0, len(c.Items))
		totalOK := true
		for i, it := range c.Items {
			// An item's pointer is spelt out only for a problem: a valid
			// checkout formats none.
			p := func() string { return "/items/" + strconv.Itoa(i) }
			item := Item{SKU: strings.TrimSpace(it.SKU), Name: strings.TrimSpace(it.Name)}
			if d := textrule.OneLine(item.SKU, maxSKURunes); d != "" {
				verr.add(p()+"/sku", "%s", d)
			}
			if d := textrule.OneLine(item.Name, maxNameRunes); d != "" {
				verr.add(p()+"/name", "%s", d)
			}
			lineOK := true
			if it.Quantity < 1 || it.Quantity > MaxQuantity {
				verr.add(p()+"/quantity", "must be a whole number from 1 to %d", MaxQuantity)
				lineOK = false
			}
			switch {
			case it.UnitPrice == nil:
				verr.add(p()+"/unit_price", "is required (integer minor units; 0 for a free item)")
				lineOK = false
			case *it.UnitPrice < 0 || *it.UnitPrice > MaxAmount:
				verr.add(p()+"/unit_price", "must be a whole number of minor units from 0 to %d", int64(MaxAmount))
				lineOK = false
			}
			if lineOK {
				item.Quantity = int32(it.Quantity)
				item.UnitPrice = *it.UnitPrice
				// Both factors are at most 2^53 and 2^20, so a product that
				// overflows int64 is caught by the division check.
				item.LineTotal = item.UnitPrice * int64(item.Quantity)
				if item.LineTotal/int64(item.Quantity) != item.UnitPrice || item.LineTotal > MaxAmount {
					verr.add(p(), "quantity times unit_price exceeds %d minor units", int64(MaxAmount))
					lineOK = false
				}
			}
			if lineOK && totalOK {
				if v.Total > MaxAmount-item.LineTotal {
					verr.add("/items", "the order total exceeds %d minor units", int64(MaxAmount))
					totalOK = false
				} else {
					v.Total += item.LineTotal
				}
			}
			v.Items = append(v.Items, item)
		}
	}

	if len(verr.Fields) > 0 {
		return validCheckout{}, &verr
	}
	return v, nil
}

// checkText requires one line of visible text of at most maxRunes runes
// (textrule.OneLine).
func checkText(verr *ValidationError, pointer, s string, maxRunes int) {
	if d := textrule.OneLine(s, maxRunes); d != "" {
		verr.add(pointer, "%s", d)
	}
}

// canonicalLocale checks a BCP 47 language tag and returns its canonical
// form: "id-id" becomes "id-ID", "in" (the old code) "id".
func canonicalLocale(s string) (string, error) {
	if len(s) > 35 {
		return "", errors.New("must be a BCP 47 language tag such as id-ID or en, of at most 35 characters")
	}
	tag, err := language.Parse(s)
	if err != nil {
		return "", errors.New("must be a BCP 47 language tag such as id-ID or en")
	}
	return tag.String(), nil
}
