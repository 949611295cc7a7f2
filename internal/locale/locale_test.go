package locale

import (
	"testing"
	"time"
	_ "time/tzdata" // the zones below, whatever the machine has

	"golang.org/x/text/language"
	"golang.org/x/text/message"
	"golang.org/x/text/number"
)

func TestFor(t *testing.T) {
	t.Parallel()
	for tag, want := range map[string]language.Tag{
		"id":    language.Indonesian,
		"id-ID": language.Indonesian,
		"in":    language.Indonesian, // the old code for Indonesian
		"en":    language.English,
		"en-GB": language.English,
		"fr":    language.English, // no format of its own
		"ms":    language.English, // Malay writes 1,234.50, not 1.234,50
		"und":   language.English,
	} {
		if got := For(language.MustParse(tag)).Language(); got != want {
			t.Errorf("For(%s) is the format of %v, want %v", tag, got, want)
		}
	}
}

func TestMoney(t *testing.T) {
	t.Parallel()
	id, en := For(language.Indonesian), For(language.English)
	tests := []struct {
		minor  int64
		code   string
		id, en string
	}{
		{21500050, "IDR", "Rp 215.000,50", "IDR 215,000.50"},
		{123456, "USD", "USD 1.234,56", "USD 1,234.56"},
		{1200, "JPY", "JPY 1.200", "JPY 1,200"},
		{1234567, "KWD", "KWD 1.234,567", "KWD 1,234.567"},
		{7, "IDR", "Rp 0,07", "IDR 0.07"},
		{-250000, "IDR", "Rp -2.500,00", "IDR -2,500.00"},
	}
	for _, tt := range tests {
		if got := id.Money(tt.minor, tt.code); got != tt.id {
			t.Errorf("Indonesian Money(%d, %s) = %q, want %q", tt.minor, tt.code, got, tt.id)
		}
		if got := en.Money(tt.minor, tt.code); got != tt.en {
			t.Errorf("English Money(%d, %s) = %q, want %q", tt.minor, tt.code, got, tt.en)
		}
	}
}

// The separators are CLDR's, as golang.org/x/text prints numbers; only
// the digits after them come from internal/money (x/text rounds IDR to
// whole rupiah and formats through float64).
func TestSeparatorsAgreeWithCLDR(t *testing.T) {
	t.Parallel()
	for _, f := range []Format{For(language.Indonesian), For(language.English)} {
		want := message.NewPrinter(f.Language()).Sprint(number.Decimal(1234567.25))
		got := f.money.Format(123456725, "USD")[len("USD "):]
		if got != want {
			t.Errorf("%v writes %q, CLDR %q", f.Language(), got, want)
		}
	}
}

func TestDates(t *testing.T) {
	t.Parallel()
	id, en := For(language.Indonesian), For(language.English)
	placed := time.Date(2026, 11, 30, 9, 15, 30, 0, time.UTC)
	shipped := time.Date(2026, 12, 1, 3, 0, 0, 0, time.FixedZone("WIB", 7*3600)) // 2026-11-30T20:00Z
	lateUTC := time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC)
	tests := []struct {
		got, want string
	}{
		{id.Date(placed), "30 November 2026"},
		{en.Date(placed), "30 November 2026"},
		{id.DateTime(placed), "30 November 2026 pukul 09.15 UTC"},
		{en.DateTime(placed), "30 November 2026, 09:15 UTC"},
		// A time is written in its own zone, named: the day is that
		// zone's, not UTC's.
		{id.DateTime(shipped), "1 Desember 2026 pukul 03.00 WIB"},
		{en.DateTime(shipped), "1 December 2026, 03:00 WIB"},
		{id.Date(shipped), "1 Desember 2026"},
		{en.DateTime(lateUTC), "30 November 2026, 20:00 UTC"},
		{id.Date(time.Date(2027, 5, 1, 0, 0, 0, 0, time.UTC)), "1 Mei 2027"},
		{en.Date(time.Date(2027, 5, 1, 0, 0, 0, 0, time.UTC)), "1 May 2027"},
		{id.Date(time.Date(2026, 8, 17, 0, 0, 0, 0, time.UTC)), "17 Agustus 2026"},
		{id.Date(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)), "1 Desember 2026"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

// A zone is named by its abbreviation where the time zone database has
// one, and by its offset where it has only digits ("+08") or no name.
func TestZone(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 7, 7, 8, 0, 0, time.UTC)
	for zone, want := range map[string]string{
		"Asia/Jakarta":      "WIB",
		"Asia/Makassar":     "WITA",
		"Asia/Jayapura":     "WIT",
		"UTC":               "UTC",
		"Europe/Berlin":     "CET", // December: winter time
		"Asia/Singapore":    "UTC+8",
		"Asia/Kathmandu":    "UTC+5:45",
		"America/Sao_Paulo": "UTC-3",
	} {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		if got := Zone(at.In(loc)); got != want {
			t.Errorf("Zone in %s = %q, want %q", zone, got, want)
		}
	}
	if got := Zone(at.In(time.FixedZone("", -(9*3600 + 30*60)))); got != "UTC-9:30" {
		t.Errorf("a zone without a name at -09:30: %q, want UTC-9:30", got)
	}
	if got := For(language.English).DateTime(at.In(time.FixedZone("", 5*3600+30*60))); got != "7 December 2026, 12:38 UTC+5:30" {
		t.Errorf("DateTime in a zone without a name: %q", got)
	}
}
