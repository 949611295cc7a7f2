package smtpsink

import (
	"bytes"
	"strings"
	"unicode/utf8"

	"github.com/emersion/go-smtp"
)

const (
	maxCommandLine = 512  // octets, CRLF included (RFC 5321 §4.5.3.1.4)
	maxTextLine    = 1000 // octets, CRLF included, the stuffed dot not counted (RFC 5321 §4.5.3.1.6)
)

// The replies to what a client must not send. The texts are Mailpit's
// (v1.33.1, internal/smtpd/smtpd.go) where Mailpit refuses the same thing,
// else Postfix's (src/smtpd/smtpd.c).
var (
	// Command lines, answered by conn before go-smtp reads them.
	errLineTooLong = refuse(500, 5, 5, 2, "Line too long") // Mailpit; it reads on, as the sink does
	// Postfix answers a command ending in a bare LF with
	// smtpd_forbid_bare_newline_reject_code (550) and hangs up; the sink
	// hangs up too, with 500, the code RFC 5321 gives a malformed command.
	errBareLF  = refuse(500, 5, 5, 2, "Error: bare <LF> received")
	errBareCR  = refuse(500, 5, 5, 2, "Error: bare <CR> received")
	errBadUTF8 = refuse(500, 5, 5, 2, "Error: bad UTF-8 syntax") // Postfix

	errNeedHello  = refuse(503, 5, 5, 1, "Bad sequence of commands (HELO/EHLO required before MAIL)")
	errNestedMail = refuse(503, 5, 5, 1, "Bad sequence of commands (RSET/HELO/EHLO required before MAIL)")
	errNeedMail   = refuse(503, 5, 5, 1, "Bad sequence of commands (MAIL required before RCPT)")
	errNeedRcpt   = refuse(503, 5, 5, 1, "Bad sequence of commands (MAIL & RCPT required before DATA)")
	errFromSyntax = refuse(501, 5, 5, 4, "Syntax error in parameters or arguments (invalid FROM parameter)")
	errToSyntax   = refuse(501, 5, 5, 4, "Syntax error in parameters or arguments (invalid TO parameter)")

	// Addresses, answered by the session.
	errUnicodeAddress = refuse(553, 5, 6, 7, "Must declare SMTPUTF8 to send unicode address") // Postfix

	// Message text, answered after the final dot; the message is not recorded.
	// Postfix, with smtpd_forbid_bare_newline = reject, answers a bare LF in
	// the text so, after the final dot, and goes on with the session.
	errTextBareLF = refuse(550, 5, 5, 2, "Error: bare <LF> received")
	errTextBareCR = refuse(550, 5, 5, 2, "Error: bare <CR> received")
	// Neither Postfix nor Mailpit refuses a long line, so the reply is the
	// sink's own, in the bare LF's terms.
	errTextLineTooLong = refuse(550, 5, 5, 2, "Error: message text line longer than 1000 octets")
	// Postfix's strict_8bitmime refuses 8-bit octets where the
	// Content-Transfer-Encoding (not BODY=) does not allow them, with the
	// same 5.6.0 ("improper use of 8-bit data in message body").
	err8BitBody   = refuse(550, 5, 6, 0, "Error: 8-bit data in message without BODY=8BITMIME")
	err8BitHeader = refuse(550, 5, 6, 0, "Error: 8-bit data in message header without SMTPUTF8")
)

func refuse(code, class, subject, detail int, text string) *smtp.SMTPError {
	return &smtp.SMTPError{Code: code, EnhancedCode: smtp.EnhancedCode{class, subject, detail}, Message: text}
}

// validMailArg reports whether arg, what follows "MAIL ", is
// "FROM:" Reverse-path [SP Mail-parameters] (RFC 5321 §4.1.1.2): no space
// around the colon, the path in angle brackets, "<>" for the null sender.
// go-smtp takes a path without brackets.
func validMailArg(arg string) bool {
	rest, ok := cutPrefixFold(arg, "FROM:")
	if !ok {
		return false
	}
	if r, null := strings.CutPrefix(rest, "<>"); null {
		return validParams(r)
	}
	rest, ok = cutPath(rest)
	return ok && validParams(rest)
}

// validRcptArg reports whether arg, what follows "RCPT ", is
// "TO:" ( "<Postmaster>" / Forward-path ) [SP Rcpt-parameters]
// (RFC 5321 §4.1.1.3).
func validRcptArg(arg string) bool {
	rest, ok := cutPrefixFold(arg, "TO:")
	if !ok {
		return false
	}
	if r, postmaster := cutPrefixFold(rest, "<Postmaster>"); postmaster {
		return validParams(r)
	}
	rest, ok = cutPath(rest)
	return ok && validParams(rest)
}

// cutPath cuts a Path, "<" [ A-d-l ":" ] Mailbox ">" (RFC 5321 §4.1.2),
// from the start of s. Non-ASCII is let through here: whether the
// transaction allows it is the session's to say (SMTPUTF8).
func cutPath(s string) (rest string, ok bool) {
	if s, ok = strings.CutPrefix(s, "<"); !ok {
		return "", false
	}
	if strings.HasPrefix(s, "@") { // a source route, obsolete but valid
		route, after, found := strings.Cut(s, ":")
		if !found {
			return "", false
		}
		for hop := range strings.SplitSeq(route, ",") {
			if d, ok := strings.CutPrefix(hop, "@"); !ok || !validDomain(d) {
				return "", false
			}
		}
		s = after
	}
	if s, ok = cutLocalPart(s); !ok {
		return "", false
	}
	if s, ok = strings.CutPrefix(s, "@"); !ok {
		return "", false
	}
	domain, rest, found := strings.Cut(s, ">")
	if !found || !validDomainOrLiteral(domain) {
		return "", false
	}
	return rest, true
}

// cutLocalPart cuts a Local-part, Dot-string / Quoted-string, from the start
// of s.
func cutLocalPart(s string) (rest string, ok bool) {
	if q, quoted := strings.CutPrefix(s, `"`); quoted {
		for i := 0; i < len(q); i++ {
			switch c := q[i]; {
			case c == '"':
				return q[i+1:], true
			case c == '\\': // quoted-pairSMTP
				i++
				if i == len(q) || q[i] < ' ' || q[i] > '~' {
					return "", false
				}
			case c < ' ' || c == 0x7f:
				return "", false
			}
		}
		return "", false
	}
	i := 0
	for i < len(s) && (isAtext(s[i]) || s[i] == '.') {
		i++
	}
	local := s[:i]
	if local == "" || local[0] == '.' || local[len(local)-1] == '.' || strings.Contains(local, "..") {
		return "", false
	}
	return s[i:], true
}

// isAtext reports whether c may appear in an Atom (RFC 5321 §4.1.2), with
// RFC 6531's UTF-8 octets.
func isAtext(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("!#$%&'*+-/=?^_`{|}~", c) >= 0 || c >= utf8.RuneSelf
}

func validDomainOrLiteral(s string) bool {
	lit, ok := strings.CutPrefix(s, "[")
	if !ok {
		return validDomain(s)
	}
	lit, ok = strings.CutSuffix(lit, "]")
	if !ok || lit == "" {
		return false
	}
	for i := 0; i < len(lit); i++ { // dcontent
		if c := lit[i]; c < '!' || c > '~' || c == '[' || c == '\\' || c == ']' {
			return false
		}
	}
	return true
}

// validDomain reports whether s is a Domain: dot-separated labels of letters,
// digits and inner hyphens (RFC 5321 §4.1.2), with RFC 6531's U-labels.
func validDomain(s string) bool {
	if s == "" {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			if c := label[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c >= utf8.RuneSelf) {
				return false
			}
		}
	}
	return true
}

// validParams reports whether s is empty or SP esmtp-param *(SP esmtp-param),
// esmtp-param = esmtp-keyword ["=" esmtp-value] (RFC 5321 §4.1.2). Which
// parameters the sink knows is go-smtp's to say.
func validParams(s string) bool {
	if s == "" {
		return true
	}
	s, ok := strings.CutPrefix(s, " ")
	if !ok {
		return false
	}
	for param := range strings.SplitSeq(s, " ") {
		keyword, value, hasValue := strings.Cut(param, "=")
		if keyword == "" || !isAlnum(keyword[0]) {
			return false
		}
		for i := 1; i < len(keyword); i++ {
			if !isAlnum(keyword[i]) && keyword[i] != '-' {
				return false
			}
		}
		if hasValue && value == "" {
			return false
		}
		for i := 0; i < len(value); i++ {
			if c := value[i]; c <= ' ' || c == '=' || c == 0x7f {
				return false
			}
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// checkText returns the reply refusing the message text data, as go-smtp
// hands it over (dot-stuffing undone, line ends kept), or nil. eightBit says
// whether MAIL had BODY=8BITMIME (RFC 6152: 8-bit octets anywhere in the
// text need it), smtputf8 whether it had SMTPUTF8 (RFC 6531, 6532: 8-bit
// octets in the header need it as well).
func checkText(data []byte, eightBit, smtputf8 bool) *smtp.SMTPError {
	header := true
	for len(data) > 0 {
		line, rest, hasLF := bytes.Cut(data, []byte("\n"))
		data = rest
		if hasLF {
			var ok bool
			if line, ok = bytes.CutSuffix(line, []byte("\r")); !ok {
				return errTextBareLF
			}
		}
		switch {
		case bytes.IndexByte(line, '\r') >= 0:
			return errTextBareCR
		case len(line)+len(crlf) > maxTextLine:
			return errTextLineTooLong
		case len(line) == 0:
			header = false
		case !isASCII(line) && !eightBit:
			return err8BitBody
		case !isASCII(line) && header && !smtputf8:
			return err8BitHeader
		}
	}
	return nil
}

func isASCII[T string | []byte](s T) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// cutPrefixFold is strings.CutPrefix ignoring ASCII case.
func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return s, false
	}
	return s[len(prefix):], true
}
