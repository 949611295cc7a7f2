package mail

import (
	"fmt"
	netmail "net/mail"
	"strings"

	"github.com/sekali-dev/sekali/internal/textrule"
)

// Sender is who a message is from: MAIL_FROM, "orders@shop.example" or
// "Toko Ana <orders@shop.example>", whose display name a template may
// replace.
type Sender struct {
	Name    string // the display name; "" for none
	Address string // a bare address (NormalizeAddress)
}

// maxSenderName bounds a display name, in characters.
const maxSenderName = 100

// ParseSender reads a sender: a bare address, or a display name and an
// address in angle brackets. The address is held to NormalizeAddress;
// the name to CheckSenderName.
func ParseSender(s string) (Sender, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "<") {
		addr, err := NormalizeAddress(s)
		return Sender{Address: addr}, err
	}
	a, err := netmail.ParseAddress(s)
	if err != nil {
		return Sender{}, fmt.Errorf("%w: want name@example.com or Name <name@example.com>", ErrInvalidAddress)
	}
	addr, err := NormalizeAddress(a.Address)
	if err != nil {
		return Sender{}, err
	}
	if a.Name != "" {
		if err := CheckSenderName(a.Name); err != nil {
			return Sender{}, err
		}
	}
	return Sender{Name: a.Name, Address: addr}, nil
}

// CheckSenderName refuses a display name that is not one line of visible
// text of at most 100 characters (textrule.OneLine: no control
// characters, no line or paragraph separators, no bidirectional controls
// that could make it read as something else in an inbox).
func CheckSenderName(name string) error {
	if p := textrule.OneLine(name, maxSenderName); p != "" {
		return fmt.Errorf("the display name %q %s", name, p)
	}
	return nil
}

// NamedSender is MAIL_FROM as every provider takes it: from itself, or,
// when it is a bare address and the shop has a name (BRAND_NAME), that
// address under the name, so that the shop's mail arrives from "Toko
// Ana" rather than from a bare address, the built-in templates' too (a
// template's meta.json still names its own). A from that does not parse
// comes back as it is, for the provider's check to report; err is the
// name's problem as a display name (CheckSenderName).
func NamedSender(from, name string) (string, error) {
	if s, perr := ParseSender(from); perr == nil && s.Name == "" && name != "" {
		if err := CheckSenderName(name); err != nil {
			return from, err
		}
		return s.WithName(name).String(), nil
	}
	return from, nil
}

// WithName is s under another display name; "" keeps s's own.
func (s Sender) WithName(name string) Sender {
	if name != "" {
		s.Name = name
	}
	return s
}

// String is the sender as a From header holds it: the address alone, or
// the name (quoted, or encoded as RFC 2047 says when it is not ASCII) and
// the address in angle brackets.
func (s Sender) String() string {
	if s.Name == "" {
		return s.Address
	}
	return (&netmail.Address{Name: s.Name, Address: s.Address}).String()
}

// Display is the sender as an HTTP provider's API takes it ("Toko Büdi
// <orders@shop.example>"): the name in UTF-8, quoted when it holds a
// character with a meaning in an address, not RFC 2047 encoded, since
// the provider writes the header itself.
func (s Sender) Display() string {
	if s.Name == "" {
		return s.Address
	}
	name := s.Name
	if strings.ContainsAny(name, `()<>[]:;@\,."`) {
		name = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(name) + `"`
	}
	return name + " <" + s.Address + ">"
}

// Domain is the part of the address after the @.
func (s Sender) Domain() string { return s.Address[strings.LastIndexByte(s.Address, '@')+1:] }
