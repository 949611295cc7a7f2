package mail

import (
	"errors"
	"fmt"
	netmail "net/mail"
	"strings"
)

// ErrInvalidAddress is returned for a recipient the service will not send to.
var ErrInvalidAddress = errors.New("invalid e-mail address")

// NormalizeAddress checks that s is one plain mailbox address and returns
// it in the form used everywhere else: trimmed and lower-cased. It is
// stricter than RFC 5322 on purpose. The address ends up in an SMTP
// "RCPT TO:<...>" command and in the idempotency key, so display names,
// comments, quoted local parts, non-ASCII text, whitespace and control
// characters (CR/LF above all) are refused rather than interpreted.
func NormalizeAddress(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", fmt.Errorf("%w: must not be empty", ErrInvalidAddress)
	}
	if len(s) > 254 {
		return "", fmt.Errorf("%w: must be at most 254 characters", ErrInvalidAddress)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f {
			return "", fmt.Errorf("%w: must contain only printable ASCII characters without spaces", ErrInvalidAddress)
		}
	}
	addr, err := netmail.ParseAddress(s)
	if err != nil || addr.Name != "" || addr.Address != s {
		return "", fmt.Errorf("%w: must be a bare address such as name@example.com, without display name or comments", ErrInvalidAddress)
	}
	at := strings.LastIndexByte(s, '@')
	local, domain := s[:at], s[at+1:]
	if !validLocalPart(local) {
		return "", fmt.Errorf("%w: the part before @ may hold only letters, digits, dots and !#$%%&'*+-/=?^_`{|}~", ErrInvalidAddress)
	}
	if !validDomain(domain) {
		return "", fmt.Errorf("%w: the part after @ must be a domain name such as example.com", ErrInvalidAddress)
	}
	return strings.ToLower(s), nil
}

// Mailbox is the mailbox that addr, a normalized address, reaches: a
// key for counting what one person is sent, never an address to send
// to (the address typed is the one mailed). The spellings that reach
// one mailbox are folded into one: the sub-address is dropped, from the
// first '+' (the delimiter nearly every mail server takes) or, at
// Yahoo's domains, whose disposable addresses use it, from the first
// '-'; and Gmail, which ignores the dots of a local part and takes
// googlemail.com as gmail.com, has them folded too. Folding more than a
// server does only counts two people as one, which errs on the side of
// the cap.
func Mailbox(addr string) string {
	at := strings.LastIndexByte(addr, '@')
	if at < 0 {
		return addr
	}
	local, domain := addr[:at], addr[at+1:]
	delimiters := "+"
	if strings.HasPrefix(domain, "yahoo.") || domain == "ymail.com" || domain == "rocketmail.com" {
		delimiters = "+-"
	}
	if i := strings.IndexAny(local, delimiters); i > 0 {
		local = local[:i]
	}
	if domain == "gmail.com" || domain == "googlemail.com" {
		domain = "gmail.com"
		if l := strings.ReplaceAll(local, ".", ""); l != "" {
			local = l
		}
	}
	return local + "@" + domain
}

// validLocalPart accepts an RFC 5322 dot-atom of at most 64 characters.
func validLocalPart(s string) bool {
	if s == "" || len(s) > 64 || s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, "..") {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isAlnum(c) || c == '.' || strings.IndexByte("!#$%&'*+-/=?^_`{|}~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// validDomain accepts a DNS host name of two or more labels whose last
// label is not numeric; address literals such as [127.0.0.1] and dotted
// IP addresses are refused.
func validDomain(s string) bool {
	tld := s[strings.LastIndexByte(s, '.')+1:]
	// A top-level label is never all digits: a@1.2.3.4 is an IP address
	// in disguise, and a@example.123 names no host.
	return strings.Count(s, ".") >= 1 && IsHostName(s) && strings.ContainsFunc(tld, func(r rune) bool { return r < '0' || r > '9' })
}

// IsHostName accepts a DNS host name of one or more labels: letters,
// digits and inner hyphens, at most 63 characters each.
func IsHostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			if !isAlnum(l[i]) && l[i] != '-' {
				return false
			}
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
