// Package textrule holds the rules for text that people read: what a
// customer's name, an item's name or a template's data may hold before
// it reaches an e-mail, and what an operator's note or a key's name may
// hold before it reaches the next operator's screen, and what an id a
// caller chooses may hold before it goes into a key or a header. It
// imports nothing of the service, so every layer may use it.
package textrule

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/idna"
	"golang.org/x/net/publicsuffix"
	"golang.org/x/text/unicode/norm"
)

// OneLine says what keeps s from being one line of visible text of at
// most maxRunes runes, "" if nothing: it must be valid UTF-8, with no
// control characters, no line or paragraph separators (U+2028, U+2029),
// no bidirectional overrides or isolates (which make "Ana" read as
// something else in a mail client or a terminal), and at least one
// Visible character (a name of zero-width spaces or Hangul fillers only
// is empty). Every one-line text field the API takes, a customer's or an
// operator's, is held to it.
func OneLine(s string, maxRunes int) string { return Problem(s, maxRunes, true) }

// Problem is OneLine when oneLine is set. Otherwise s may run over
// lines, as an operator's note does: the one difference is which control
// characters it may hold, tab and line breaks (but not NUL, which
// PostgreSQL refuses), and line and paragraph separators.
func Problem(s string, maxRunes int, oneLine bool) string {
	switch {
	case s == "":
		return "must not be empty"
	case !utf8.ValidString(s):
		return "must be valid UTF-8"
	case utf8.RuneCountInString(s) > maxRunes:
		return fmt.Sprintf("must be at most %d characters", maxRunes)
	}
	if d := controlProblem(s, oneLine); d != "" {
		return d
	}
	switch {
	case strings.ContainsFunc(s, BidiControl):
		return "must not contain bidirectional control characters (U+202A to U+202E, U+2066 to U+2069, ...)"
	case !strings.ContainsFunc(s, Visible):
		return "must contain at least one visible character"
	}
	return ""
}

// Storable reports whether PostgreSQL's text type takes s: valid UTF-8
// without NUL. What a caller sends is held to it where it is decoded
// (the API's JSON bodies, paths, queries and forms, a key's token), so
// that no statement fails on it as a 500.
func Storable(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// Token reports whether s is an id a caller may choose (an X-Request-Id,
// an event id): 1 to maxLen ASCII letters, digits, '-', '_' and '.', so
// that it goes unescaped into a key's separators, a header or a log line.
func Token(s string, maxLen int) bool {
	if s == "" || len(s) > maxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// controlProblem is Problem's test of control characters and line
// separators, the part where one line and several differ.
func controlProblem(s string, oneLine bool) string {
	if oneLine {
		switch {
		case strings.ContainsFunc(s, unicode.IsControl):
			return "must not contain control characters such as line breaks"
		case strings.ContainsFunc(s, func(r rune) bool { return unicode.In(r, unicode.Zl, unicode.Zp) }):
			return "must be one line: no line or paragraph separators (U+2028, U+2029)"
		}
		return ""
	}
	switch {
	case strings.ContainsRune(s, 0):
		return "must not contain NUL characters"
	case strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) && r != '\t' && r != '\n' && r != '\r' }):
		return "must not contain control characters other than tabs and line breaks"
	}
	return ""
}

// BidiControl reports whether r is a bidirectional control character:
// an embedding, override or isolate, or a mark such as U+200F.
func BidiControl(r rune) bool { return unicode.Is(unicode.Bidi_Control, r) }

// Visible reports whether r shows as something on its own: a graphic
// character that is not a space, not a format character such as U+200B,
// not a character Unicode says to render as nothing (the Hangul fillers
// U+3164 and U+FFA0, U+034F, variation selectors), not the blank Braille
// pattern U+2800, and not a combining mark, which needs a character to
// sit on.
func Visible(r rune) bool {
	return unicode.IsGraphic(r) && !unicode.IsSpace(r) && r != '\u2800' &&
		!unicode.In(r, unicode.Cf, unicode.Mn, unicode.Me, unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector)
}

// Link says what in s a mail client would show as a link, or a reader
// would type into a browser, "" if nothing: a URL with a scheme
// (https://..., or javascript:...), an address starting with www., an
// e-mail address, a host name whose last label is a top-level domain
// (example.com, toko.co.id, пример.рф) or that a path or a port follows
// (evil.test/claim), or an IP address that a path or a port follows
// (203.0.113.5/claim, [2001:db8::1]:8080). It looks at s as a reader
// sees it (readable): evil。com, ｅｖｉｌ．ｃｏｍ, evil\u200b.com,
// evil .com and evil[.]com are evil.com, and that is what it returns.
// Text the public can put into an e-mail is held to it, so that a
// checkout cannot carry an advertisement; a name such as "Dr. Ana",
// "J. R. R. Tolkien" or "Teh.melati" is no link, nor is a number.
func Link(s string) string {
	s = readable(s)
	if m := bracketedIP.FindStringSubmatch(s); m != nil {
		if a, err := netip.ParseAddr(m[1]); err == nil && a.Is6() {
			return m[0]
		}
	}
	for _, token := range strings.FieldsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || strings.ContainsRune(`"'()<>[]{},;|`+"`", r)
	}) {
		if linkToken(strings.ToLower(token)) {
			return token
		}
	}
	return ""
}

// bracketedIP is an IPv6 address in a URL's brackets, which Link's
// tokens would split, with the port or path that makes it a link.
var bracketedIP = regexp.MustCompile(`\[([0-9A-Fa-f:.]+)\](?::[0-9]+|[/?#\\])`)

// readable is s as Link reads it, the way a reader sees it rather than
// the way its bytes spell it: without the characters that show as
// nothing (zero-width spaces and joiners, the soft hyphen, variation
// selectors), in Unicode's compatibility form (NFKC: full-width and
// mathematical letters are letters, U+FF0E and U+2024 are dots, the
// odd spaces are spaces), with the ideographic full stops (。, ｡) as
// the dots IDNA takes them for, a dot in brackets ([.], (.), {.},
// [dot]) as a dot, and the spaces around a dot that a space precedes
// dropped ("evil . com"): no one writes a sentence that way. A dot
// that only a space follows is left alone, as in "Dr. Ana" or
// "Mr. Bond" (.bond is a top-level domain).
func readable(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.In(r, unicode.Cf, unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector) {
			return -1
		}
		return r
	}, s)
	s = norm.NFKC.String(s)
	s = strings.Map(func(r rune) rune {
		if r == '\u3002' || r == '\uff61' {
			return '.'
		}
		return r
	}, s)
	s = bracketedDot.ReplaceAllString(s, ".")
	return spacedDot.ReplaceAllString(s, ".")
}

var (
	// bracketedDot is a dot written in brackets, with the spaces around.
	bracketedDot = regexp.MustCompile(`(?i)[\s\p{Zs}]*[\[({][\s\p{Zs}]*(?:\.|dot)[\s\p{Zs}]*[\])}][\s\p{Zs}]*`)
	// spacedDot is a dot that spaces precede, with the spaces after it.
	spacedDot = regexp.MustCompile(`[\s\p{Zs}]+\.[\s\p{Zs}]*`)
)

// linkToken reports whether a token of Link's, in lower case, is a link.
func linkToken(t string) bool {
	if i := strings.Index(t, ":"); i > 0 && scheme(t[:i]) && (strings.HasPrefix(t[i+1:], "//") || knownScheme(t[:i])) {
		return true
	}
	// What a linkifier starts a link at: a letter or a digit, not the
	// punctuation before it (//evil.com, *evil.com*, \\evil.com\share).
	t = strings.TrimLeftFunc(t, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	if strings.HasPrefix(t, "www.") {
		return true
	}
	if local, domain, ok := strings.Cut(t, "@"); ok && local != "" && strings.Contains(domain, ".") {
		return true
	}
	// A bare IPv6 address before a path (2001:db8::1/claim), then any
	// host before a path or a port.
	if i := strings.IndexAny(t, `/?#\`); i > 0 {
		if a, err := netip.ParseAddr(t[:i]); err == nil && a.Is6() {
			return true
		}
	}
	host, rest := t, ""
	if i := strings.IndexAny(t, `/:?#\`); i >= 0 {
		host, rest = t[:i], t[i:]
	}
	host = strings.TrimRightFunc(host, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) // "example.com.", "*evil.com*"
	if a, err := netip.ParseAddr(host); err == nil && a.Is4() {
		return rest != "" && rest != ":" // 203.0.113.5/claim, not "1.2.3.4:"
	}
	labels := strings.Split(host, ".")
	if len(labels) < 2 {
		return false
	}
	for _, l := range labels {
		if l == "" || strings.ContainsFunc(l, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '-' }) {
			return false
		}
	}
	tld := labels[len(labels)-1]
	punycode := strings.HasPrefix(tld, "xn--")
	if !punycode && strings.ContainsFunc(tld, func(r rune) bool { return !unicode.IsLetter(r) }) || utf8.RuneCountInString(tld) < 2 {
		return false // 1.5, v2.0, A.B
	}
	if rest != "" && rest != ":" {
		return true // evil.test/claim, shop.local:8080
	}
	// The list of suffixes spells internationalized ones in punycode.
	if ascii, err := idna.Lookup.ToASCII(host); err == nil {
		host = ascii
	}
	_, icann := publicsuffix.PublicSuffix(host)
	return icann
}

// scheme reports whether s is a URL scheme's syntax (RFC 3986 §3.1).
func scheme(s string) bool {
	for i, r := range s {
		if !(r >= 'a' && r <= 'z' || i > 0 && (r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.')) {
			return false
		}
	}
	return true
}

// knownScheme is a scheme a mail client links without "//".
func knownScheme(s string) bool {
	switch s {
	case "mailto", "tel", "sms", "javascript", "data", "magnet", "whatsapp", "tg":
		return true
	}
	return false
}

// Clip makes s fit a text column of at most maxBytes bytes: invalid
// UTF-8 becomes "?", NUL bytes (which PostgreSQL's text refuses) go, and
// a longer s is cut at a character boundary and ends in "...". What it
// is for: a provider's reply, a receiver's answer or an error, stored
// for the next operator; a cut in the middle of a character would make
// the statement that stores it fail.
func Clip(s string, maxBytes int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "?"), "\x00", "")
	if len(s) <= maxBytes {
		return s
	}
	const more = "..."
	cut := max(maxBytes-len(more), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + more
}
