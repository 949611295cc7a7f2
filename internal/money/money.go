// Package money knows the ISO 4217 currencies a shop may charge in and
// how many minor-unit digits each has, so that amounts travel as integers
// and are only turned into text when an e-mail is rendered.
package money

import (
	"strconv"
	"strings"
)

// digits lists the active ISO 4217 currencies (List One, 2026) with their
// minor-unit exponent. Fund codes (BOV, CHE, CLF, ...), precious metals,
// SDRs and the test codes XTS/XXX are left out on purpose: nobody prices
// a basket in them.
var digits = map[string]int{
	"AED": 2, "AFN": 2, "ALL": 2, "AMD": 2, "ANG": 2, "AOA": 2, "ARS": 2, "AUD": 2,
	"AWG": 2, "AZN": 2, "BAM": 2, "BBD": 2, "BDT": 2, "BGN": 2, "BHD": 3, "BIF": 0,
	"BMD": 2, "BND": 2, "BOB": 2, "BRL": 2, "BSD": 2, "BTN": 2, "BWP": 2, "BYN": 2,
	"BZD": 2, "CAD": 2, "CDF": 2, "CHF": 2, "CLP": 0, "CNY": 2, "COP": 2, "CRC": 2,
	"CUP": 2, "CVE": 2, "CZK": 2, "DJF": 0, "DKK": 2, "DOP": 2, "DZD": 2, "EGP": 2,
	"ERN": 2, "ETB": 2, "EUR": 2, "FJD": 2, "FKP": 2, "GBP": 2, "GEL": 2, "GHS": 2,
	"GIP": 2, "GMD": 2, "GNF": 0, "GTQ": 2, "GYD": 2, "HKD": 2, "HNL": 2, "HTG": 2,
	"HUF": 2, "IDR": 2, "ILS": 2, "INR": 2, "IQD": 3, "IRR": 2, "ISK": 0, "JMD": 2,
	"JOD": 3, "JPY": 0, "KES": 2, "KGS": 2, "KHR": 2, "KMF": 0, "KPW": 2, "KRW": 0,
	"KWD": 3, "KYD": 2, "KZT": 2, "LAK": 2, "LBP": 2, "LKR": 2, "LRD": 2, "LSL": 2,
	"LYD": 3, "MAD": 2, "MDL": 2, "MGA": 2, "MKD": 2, "MMK": 2, "MNT": 2, "MOP": 2,
	"MRU": 2, "MUR": 2, "MVR": 2, "MWK": 2, "MXN": 2, "MYR": 2, "MZN": 2, "NAD": 2,
	"NGN": 2, "NIO": 2, "NOK": 2, "NPR": 2, "NZD": 2, "OMR": 3, "PAB": 2, "PEN": 2,
	"PGK": 2, "PHP": 2, "PKR": 2, "PLN": 2, "PYG": 0, "QAR": 2, "RON": 2, "RSD": 2,
	"RUB": 2, "RWF": 0, "SAR": 2, "SBD": 2, "SCR": 2, "SDG": 2, "SEK": 2, "SGD": 2,
	"SHP": 2, "SLE": 2, "SOS": 2, "SRD": 2, "SSP": 2, "STN": 2, "SVC": 2, "SYP": 2,
	"SZL": 2, "THB": 2, "TJS": 2, "TMT": 2, "TND": 3, "TOP": 2, "TRY": 2, "TTD": 2,
	"TWD": 2, "TZS": 2, "UAH": 2, "UGX": 0, "USD": 2, "UYU": 2, "UZS": 2, "VED": 2,
	"VES": 2, "VND": 0, "VUV": 0, "WST": 2, "XAF": 0, "XCD": 2, "XCG": 2, "XOF": 0,
	"XPF": 0, "YER": 2, "ZAR": 2, "ZMW": 2, "ZWG": 2,
}

// Known reports whether code is an accepted currency code. Codes are
// upper-case; "usd" is not accepted, so that what is stored is canonical.
func Known(code string) bool {
	_, ok := digits[code]
	return ok
}

// Format renders an amount of minor units as "IDR 150,000.00" or
// "JPY 1,200": the currency code, thousands separated by commas and the
// minor units after a point. It is locale-neutral: it is the English
// style, and [Style.Format] writes an amount the way another language does.
func Format(minor int64, code string) string {
	return Style{Decimal: ".", Group: ","}.Format(minor, code)
}

// Style is how a language writes an amount of money.
type Style struct {
	// Decimal comes before the minor units ("." in English, "," in
	// Indonesian) and Group between thousands ("," and ".").
	Decimal, Group string
	// Own is the currency the language writes with a symbol, Symbol, in
	// place of its code ("IDR" and "Rp" for Indonesian); every other
	// currency is written by its ISO 4217 code. Empty: codes only.
	Own, Symbol string
}

// Format renders minor units of the currency code in this style: the
// code (or the symbol of the language's own currency), a space, a minus
// sign for a negative amount, then the digits, as many minor-unit digits
// as the currency has (none for JPY, three for KWD, two for an unknown
// code). Indonesian: "Rp 215.000,50", "USD 1.234,56", "JPY 1.200".
func (s Style) Format(minor int64, code string) string {
	d, ok := digits[code]
	if !ok {
		d = 2
	}
	neg := minor < 0
	// Work on the magnitude as uint64 so that math.MinInt64 formats too.
	mag := uint64(minor)
	if neg {
		mag = -mag
	}
	digitsOf := strconv.FormatUint(mag, 10)
	if len(digitsOf) <= d {
		digitsOf = strings.Repeat("0", d-len(digitsOf)+1) + digitsOf
	}
	whole, frac := digitsOf[:len(digitsOf)-d], digitsOf[len(digitsOf)-d:]

	var b strings.Builder
	if s.Own != "" && code == s.Own {
		b.WriteString(s.Symbol)
	} else {
		b.WriteString(code)
	}
	b.WriteByte(' ')
	if neg {
		b.WriteByte('-')
	}
	for i, r := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteString(s.Group)
		}
		b.WriteRune(r)
	}
	if d > 0 {
		b.WriteString(s.Decimal)
		b.WriteString(frac)
	}
	return b.String()
}
