// Package locale says how a language writes amounts of money and dates
// in an e-mail: its separators, the symbol of its own currency, its month
// names. Indonesian and English have formats; every other language is
// written the English way until its format is added here.
package locale

import (
	"strconv"
	"strings"
	"time"

	"golang.org/x/text/language"

	"github.com/sekali-dev/sekali/internal/money"
)

// Format is how one language writes money and dates.
type Format struct {
	lang   language.Tag
	money  money.Style
	months [12]string
	// at joins the date and the time, timeSep the hours and the minutes
	// (CLDR's long date-time pattern and short time pattern).
	at, timeSep string
}

var (
	english = Format{
		lang:    language.English,
		money:   money.Style{Decimal: ".", Group: ","},
		months:  [12]string{"January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"},
		at:      ", ",
		timeSep: ":",
	}
	indonesian = Format{
		lang:    language.Indonesian,
		money:   money.Style{Decimal: ",", Group: ".", Own: "IDR", Symbol: "Rp"},
		months:  [12]string{"Januari", "Februari", "Maret", "April", "Mei", "Juni", "Juli", "Agustus", "September", "Oktober", "November", "Desember"},
		at:      " pukul ",
		timeSep: ".",
	}
)

// For returns the format of tag's language: Indonesian for id and its
// regional forms (id-ID), English for en and for every language that has
// no format of its own.
func For(tag language.Tag) Format {
	if base, _ := tag.Base(); base == indonesianBase {
		return indonesian
	}
	return english
}

var indonesianBase, _ = language.Indonesian.Base()

// Language is the language whose format this is: id or en.
func (f Format) Language() language.Tag { return f.lang }

// Money writes an amount of minor units of currency code: English
// "IDR 215,000.50", "JPY 1,200", "KWD 1,234.567"; Indonesian
// "Rp 215.000,50", "USD 1.234,56", "JPY 1.200".
func (f Format) Money(minor int64, code string) string {
	return f.money.Format(minor, code)
}

// Date writes the day of t in t's location (t.In converts): "30 November
// 2026" in both languages, "1 December 2026" and "1 Desember 2026".
func (f Format) Date(t time.Time) string {
	return strconv.Itoa(t.Day()) + " " + f.months[t.Month()-1] + " " + strconv.Itoa(t.Year())
}

// DateTime writes t in t's location, to the minute, with the zone as
// its readers know it (Zone): English "30 November 2026, 16:15 WIB",
// Indonesian "30 November 2026 pukul 16.15 WIB"; in UTC
// "30 November 2026, 09:15 UTC".
func (f Format) DateTime(t time.Time) string {
	var b strings.Builder
	b.WriteString(f.Date(t))
	b.WriteString(f.at)
	b.WriteString(twoDigits(t.Hour()))
	b.WriteString(f.timeSep)
	b.WriteString(twoDigits(t.Minute()))
	b.WriteString(" ")
	b.WriteString(Zone(t))
	return b.String()
}

// Zone names the zone of t as a clock's reader knows it: its usual
// abbreviation where the time zone database has one (WIB for
// Asia/Jakarta, CET, UTC), else its offset from UTC, to the minute only
// where it has minutes: Asia/Singapore's "+08" is "UTC+8", Asia/Kathmandu's
// "+0545" "UTC+5:45", a zone without a name at -03:00 "UTC-3".
func Zone(t time.Time) string {
	name, offset := t.Zone()
	if name != "" && name[0] != '+' && name[0] != '-' {
		return name
	}
	sign := "+"
	if offset < 0 {
		sign, offset = "-", -offset
	}
	s := "UTC" + sign + strconv.Itoa(offset/3600)
	if m := offset % 3600 / 60; m != 0 {
		s += ":" + twoDigits(m)
	}
	return s
}

func twoDigits(n int) string {
	if n < 10 {
		return "0" + strconv.Itoa(n)
	}
	return strconv.Itoa(n)
}
