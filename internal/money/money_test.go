package money

import (
	"math"
	"testing"
)

func TestFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		minor int64
		code  string
		want  string
	}{
		{0, "USD", "USD 0.00"},
		{5, "USD", "USD 0.05"},
		{123456, "USD", "USD 1,234.56"},
		{15000000, "IDR", "IDR 150,000.00"},
		{1200, "JPY", "JPY 1,200"},
		{999, "JPY", "JPY 999"},
		{1234567, "KWD", "KWD 1,234.567"},
		{-250, "EUR", "EUR -2.50"},
		{math.MaxInt64, "USD", "USD 92,233,720,368,547,758.07"},
		{math.MinInt64, "USD", "USD -92,233,720,368,547,758.08"},
	}
	for _, tt := range tests {
		if got := Format(tt.minor, tt.code); got != tt.want {
			t.Errorf("Format(%d, %q) = %q, want %q", tt.minor, tt.code, got, tt.want)
		}
	}
}

func TestKnown(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"USD", "IDR", "JPY", "EUR", "KWD"} {
		if !Known(code) {
			t.Errorf("Known(%q) = false, want true", code)
		}
	}
	for _, code := range []string{"", "usd", "XXX", "XTS", "ABC", "US", "USDD", "XAU"} {
		if Known(code) {
			t.Errorf("Known(%q) = true, want false", code)
		}
	}
}

func TestStyleFormat(t *testing.T) {
	t.Parallel()
	indonesian := Style{Decimal: ",", Group: ".", Own: "IDR", Symbol: "Rp"}
	tests := []struct {
		minor int64
		code  string
		want  string
	}{
		{21500050, "IDR", "Rp 215.000,50"},
		{0, "IDR", "Rp 0,00"},
		{123456, "USD", "USD 1.234,56"},
		{1200, "JPY", "JPY 1.200"},
		{1234567, "KWD", "KWD 1.234,567"},
		{5, "BHD", "BHD 0,005"},
		{-250000, "IDR", "Rp -2.500,00"},
		{math.MinInt64, "IDR", "Rp -92.233.720.368.547.758,08"},
	}
	for _, tt := range tests {
		if got := indonesian.Format(tt.minor, tt.code); got != tt.want {
			t.Errorf("Indonesian Format(%d, %q) = %q, want %q", tt.minor, tt.code, got, tt.want)
		}
	}
	// The zero style's own currency is none: every amount keeps its code.
	if got := (Style{Decimal: ".", Group: ","}).Format(21500050, "IDR"); got != "IDR 215,000.50" {
		t.Errorf("English Format = %q", got)
	}
}
