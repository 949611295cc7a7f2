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
