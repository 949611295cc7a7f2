package textrule_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sekali-dev/sekali/internal/textrule"
)

func TestOneLine(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want string // part of the problem, "" for none
	}{
		{"Ana Maria", ""},
		{"Thị Ánh", ""},
		{"王小明", ""},
		{"José\u0301", ""}, // a combining mark on a letter is fine
		{"", "must not be empty"},
		{"Ana\nMaria", "control characters"},
		{"Ana\u2028Maria", "one line"},
		{"Ana\u202eairaM", "bidirectional"},
		{"\u200b\u200b", "visible"},
		{"\u3164", "visible"},              // HANGUL FILLER
		{"\u3164\u3164 \uffa0", "visible"}, // and its half-width form
		{"\u2800\u2800", "visible"},        // BRAILLE PATTERN BLANK
		{"\u115f\u1160", "visible"},        // HANGUL CHOSEONG and JUNGSEONG FILLER
		{"\u034f\ufe0f", "visible"},        // COMBINING GRAPHEME JOINER, VARIATION SELECTOR-16
		{"\u0301\u0301", "visible"},        // combining marks with nothing to sit on
		{"\xff", "UTF-8"},
		{strings.Repeat("a", 11), "at most 10"},
	} {
		got := textrule.OneLine(tt.in, 10)
		if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
			t.Errorf("OneLine(%+q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestProblemOverLines(t *testing.T) {
	t.Parallel()
	if got := textrule.Problem("line one\r\n\tline two", 100, false); got != "" {
		t.Errorf("a note over lines: %q", got)
	}
	for in, want := range map[string]string{"a\x00b": "NUL", "a\x07b": "control", "\n\t": "visible", "a\u2066b": "bidirectional"} {
		if got := textrule.Problem(in, 100, false); !strings.Contains(got, want) {
			t.Errorf("Problem(%+q) = %q, want %q", in, got, want)
		}
	}
}

// Storable is what PostgreSQL's text takes: any valid UTF-8 but NUL.
func TestStorable(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{"": true, "Ana": true, "a\u2028\u202eb\x07": true, "\uFFFD": true,
		"a\x00": false, "\xff": false, "a\xc3": false, "\xed\xa0\x80": false /* a surrogate */} {
		if got := textrule.Storable(in); got != want {
			t.Errorf("Storable(%+q) = %v, want %v", in, got, want)
		}
	}
}

// Link finds what a mail client would make a link of, and leaves the
// names people and teas have alone.
func TestLink(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want string // the link found, "" for none
	}{
		{"WIN A PRIZE: visit http://evil.test/claim now", "http://evil.test/claim"},
		{"HTTPS://EVIL.TEST", "HTTPS://EVIL.TEST"},
		{"go to www.evil.test", "www.evil.test"},
		{"evil.test/claim", "evil.test/claim"},
		{"(shop.local:8080)", "shop.local:8080"},
		{"buy at toko.co.id!", "toko.co.id!"},
		{"example.com.", "example.com."},
		{"mail prize@evil.test", "prize@evil.test"},
		{"javascript:alert(1)", "javascript:alert"},
		{"tel:+6281234", "tel:+6281234"},
		{"bücher.de", "bücher.de"},
		{"Ana Maria", ""},
		{"Dr. Ana", ""},
		{"Teh.melati", ""},
		{"A.B. Tea", ""},
		{"Sepatu v2.0", ""},
		{"Kopi 1.5 kg", ""},
		{"Re: order 12", ""},
		{"at 10:30", ""},
		{"1/2 kg", ""},
		{"Ana @ home", ""},
	} {
		if got := textrule.Link(tt.in); got != tt.want {
			t.Errorf("Link(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// Link reads text as its reader sees it, not as its bytes spell it: a
// host name spelled with other dots, other letters, invisible characters
// or spaces around its dot is still a host name, and a bare IP address
// before a path is a link too. These are the forms that got past it, and
// those that Gmail's and Outlook's linkifiers, or a reader, take for a
// link. Names with dots, initials and numbers still pass.
func TestLinkReadsWhatTheReaderSees(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"evil。com",               // IDEOGRAPHIC FULL STOP
		"evil｡com",               // HALFWIDTH IDEOGRAPHIC FULL STOP
		"ｅｖｉｌ．ｃｏｍ",               // full-width letters and FULLWIDTH FULL STOP
		"𝐞𝐯𝐢𝐥.𝐜𝐨𝐦",               // mathematical bold
		"ⓔⓥⓘⓛ.ⓒⓞⓜ",               // circled letters
		"evil﹒com",               // SMALL FULL STOP
		"evil\u2024com",          // ONE DOT LEADER
		"evil\u200b.com",         // ZERO WIDTH SPACE
		"e\u200cvil.c\u200dom",   // zero-width non-joiner and joiner
		"evil\u2060.\ufeffcom",   // WORD JOINER, BOM
		"evil\u00ad.com",         // SOFT HYPHEN
		"evil .com",              // a space before the dot
		"evil . com",             // around it
		"evil \u3000.\u00a0 com", // ideographic and no-break spaces
		"evil[.]com",             // defanged
		"evil(.)com",             //
		"evil{.}com",             //
		"evil [ . ] com",         //
		"evil[dot]com",           //
		"evil (DOT) com",         //
		"203.0.113.5/claim",      // a bare IPv4 address and a path
		"203.0.113.5:8080",       // and a port
		"２０３．０．１１３．５/claim",         // full-width
		"2001:db8::1/claim",         // a bare IPv6 address and a path
		"[2001:db8::1]:8080",        // in brackets, with a port
		"go to [2001:db8::1]/claim", //
		"пример.рф",                 // an internationalized top-level domain
		"例子.中国",                     //
		"xn--e1afmkfd.xn--p1ai",     // and in punycode
		"//evil.com",                // scheme-relative
		"*evil.com*",                // emphasis around it
		"\\\\evil.com\\share",       // a UNC path (Outlook links it)
		"\\\\203.0.113.5\\share",    //
		"EVIL.COM/Claim",            //
		"ｗｗｗ．evil",                  // full-width www.
		"prize＠evil.test",           // FULLWIDTH COMMERCIAL AT
		"hxxps://evil.test",         // a defanged scheme is still a scheme
	} {
		if textrule.Link(in) == "" {
			t.Errorf("Link(%+q) found no link", in)
		}
	}
	for _, in := range []string{
		"J. R. R. Tolkien",
		"Dr. Ana",
		"Mr. Bond", // .bond is a top-level domain, but no one reads a link here
		"Co. Ltd",
		"St. Louis",
		"Jl. Sudirman No. 12",
		"U.S.A.",
		"e.g. teh",
		"Kopi 1.5 kg",
		"Kopi 1。5 kg",
		"Rp 12.500",
		"3.14159",
		"Size 10.5 / 11",
		"Sepatu v2.0.1",
		"1.2.3.4", // no path: a version as well as an address
		"at 10:30",
		"Ana…",
		"Ana . Maria", // spaced, but maria is no top-level domain
		"Teh (hijau)",
		"Ana[1]",
		"José\u0301 Ñuñez",
		"王小明",
		"Thị Ánh",
	} {
		if got := textrule.Link(in); got != "" {
			t.Errorf("Link(%+q) = %q, want no link", in, got)
		}
	}
}

// Clip's result is always valid UTF-8 without NUL, within its bound, and
// cut only at a character boundary: PostgreSQL refuses anything else in
// a text column, and the statement that records an outcome would fail.
func TestClip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"550 5.1.1 user unknown", 12, "550 5.1.1..."},
		{"abcdefgü", 10, "abcdefgü"}, // 9 bytes: fits
		{"abcdefgüzz", 10, "abcdefg..."},
		{"abcdefüzzz", 10, "abcdef..."}, // ü (2 bytes) would end at byte 8, then "..." is 11
		{"bad \xff byte", 20, "bad ? byte"},
		{"nul\x00byte", 20, "nulbyte"},
		{"日本語のテキスト", 10, "日本..."},
	} {
		got := textrule.Clip(tc.in, tc.max)
		if got != tc.want || len(got) > tc.max || !utf8.ValidString(got) || strings.ContainsRune(got, 0) {
			t.Errorf("Clip(%q, %d) = %q (%d bytes), want %q", tc.in, tc.max, got, len(got), tc.want)
		}
	}
}

func TestToken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"r-1_a.B9", true},
		{strings.Repeat("a", 8), true},
		{strings.Repeat("a", 9), false},
		{"", false},
		{"a b", false},
		{"a:b", false},
		{"ü", false},
		{"a\n", false},
	} {
		if got := textrule.Token(tc.in, 8); got != tc.want {
			t.Errorf("Token(%q, 8) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
