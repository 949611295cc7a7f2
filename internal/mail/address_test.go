package mail

import (
	"errors"
	"strings"
	"testing"
)

func TestNormalizeAddress(t *testing.T) {
	t.Parallel()
	good := map[string]string{
		"ana@example.com":              "ana@example.com",
		"  Ana.Maria@Example.COM \t":   "ana.maria@example.com",
		"first+tag@mail.example.co.id": "first+tag@mail.example.co.id",
		"o'neil@example.org":           "o'neil@example.org",
	}
	for in, want := range good {
		got, err := NormalizeAddress(in)
		if err != nil || got != want {
			t.Errorf("NormalizeAddress(%q) = %q, %v; want %q", in, got, err, want)
		}
	}

	bad := []string{
		"",
		"   ",
		"ana",
		"ana@",
		"@example.com",
		"ana@localhost",
		"Ana <ana@example.com>",
		"<ana@example.com>",
		"ana@example.com (Ana)",
		"ana@example.com\r\nRCPT TO:<eve@example.com>",
		"ana@example.com\nBcc: eve@example.com",
		"ana@example.com> NOTIFY=SUCCESS,FAILURE ORCPT=rfc822;eve@example.com",
		"ana@example.com SIZE=1",
		`"ana maria"@example.com`,
		"ana..maria@example.com",
		".ana@example.com",
		"ana@exa_mple.com",
		"ana@-example.com",
		"ana@[127.0.0.1]",
		"ana@example.com,eve@example.com",
		"ana@example.com;eve@example.com",
		"añа@example.com",
		"ana\x00@example.com",
		strings.Repeat("a", 65) + "@example.com",
		"ana@" + strings.Repeat("a", 250) + ".com",
	}
	for _, in := range bad {
		got, err := NormalizeAddress(in)
		if !errors.Is(err, ErrInvalidAddress) {
			t.Errorf("NormalizeAddress(%q) = %q, %v; want ErrInvalidAddress", in, got, err)
		}
	}
}

// MAIL_FROM may carry a display name; the address is held to the same
// rules as a recipient's, the name to one line of visible text; a
// non-ASCII name is encoded as RFC 2047 says.
// The spellings of one mailbox are one key: a sub-address, Gmail's dots
// and googlemail.com fold; what a server would tell apart is kept apart,
// if it is not only ever folding too much.
func TestMailbox(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"victim@example.net", "victim@example.net"},
		{"victim+1@example.net", "victim@example.net"},
		{"victim+a+b@example.net", "victim@example.net"},
		{"vic.tim@example.net", "vic.tim@example.net"},         // dots matter at most servers
		{"victim-shop@example.net", "victim-shop@example.net"}, // and hyphens
		{"+tag@example.net", "+tag@example.net"},               // nothing before the tag: kept whole
		{"victim2@gmail.com", "victim2@gmail.com"},
		{"v.ictim2@gmail.com", "victim2@gmail.com"},
		{"v.i.c.t.i.m.2@gmail.com", "victim2@gmail.com"},
		{"vi.ctim2+shop@gmail.com", "victim2@gmail.com"},
		{"victim2@googlemail.com", "victim2@gmail.com"},
		{"v.ictim2+x@googlemail.com", "victim2@gmail.com"},
		{"ana-shop@yahoo.com", "ana@yahoo.com"},
		{"ana-shop@yahoo.co.id", "ana@yahoo.co.id"},
		{"ana+shop@ymail.com", "ana@ymail.com"},
		{"ana.maria@yahoo.com", "ana.maria@yahoo.com"},
	} {
		if got := Mailbox(tt.in); got != tt.want {
			t.Errorf("Mailbox(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestParseSender(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Sender{
		"orders@shop.example":                         {Address: "orders@shop.example"},
		"Toko Ana <Orders@Shop.Example>":              {Name: "Toko Ana", Address: "orders@shop.example"},
		`"Toko Ana, Jakarta" <a@shop.example>`:        {Name: "Toko Ana, Jakarta", Address: "a@shop.example"},
		"=?utf-8?q?Toko_B=C3=BCdi?= <a@shop.example>": {Name: "Toko Büdi", Address: "a@shop.example"},
	} {
		got, err := ParseSender(in)
		if err != nil || got != want {
			t.Errorf("ParseSender(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "Toko <not an address>", "Toko Ana <a@shop.example", "Toko\u202eAna <a@shop.example>",
		"<a@shop.example>, <b@shop.example>", strings.Repeat("n", 101) + " <a@shop.example>"} {
		if _, err := ParseSender(bad); err == nil {
			t.Errorf("ParseSender(%q) accepted", bad)
		}
	}
	s := Sender{Name: "Toko Büdi", Address: "a@shop.example"}
	if got := s.String(); got != "=?utf-8?q?Toko_B=C3=BCdi?= <a@shop.example>" {
		t.Errorf("String() = %q", got)
	}
	if got := s.WithName("").String(); got != s.String() {
		t.Errorf("WithName(\"\") changed the sender: %q", got)
	}
	if got := (Sender{Address: "a@shop.example"}).WithName("Ana").String(); got != `"Ana" <a@shop.example>` {
		t.Errorf("WithName = %q", got)
	}
	if d := MessageIDDomain("Toko Ana <orders@Shop.Example>"); d != "shop.example" {
		t.Errorf("MessageIDDomain = %q", d)
	}
}

// A bare MAIL_FROM takes the shop's name; one with a name of its own
// keeps it; either way the sender parses back to the name and address.
func TestNamedSender(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ from, name, want string }{
		{"orders@shop.example", "Toko Ana", "Toko Ana"},
		{"orders@shop.example", "Toko Büdi & Co", "Toko Büdi & Co"},
		{"orders@shop.example", "Ana \"the\" Shop, Bandung", "Ana \"the\" Shop, Bandung"},
		{"Toko Ana Orders <orders@shop.example>", "Toko Ana", "Toko Ana Orders"},
		{"orders@shop.example", "", ""},
	} {
		got, err := NamedSender(tt.from, tt.name)
		if err != nil {
			t.Fatalf("NamedSender(%q, %q): %v", tt.from, tt.name, err)
		}
		s, err := ParseSender(got)
		if err != nil || s.Name != tt.want || s.Address != "orders@shop.example" {
			t.Errorf("NamedSender(%q, %q) = %q, which parses to %+v, %v; want the name %q", tt.from, tt.name, got, s, err, tt.want)
		}
	}
	if _, err := NamedSender("orders@shop.example", strings.Repeat("n", 101)); err == nil {
		t.Error("a name too long for a sender was taken")
	}
	if got, err := NamedSender("not an address", "Toko Ana"); got != "not an address" || err != nil {
		t.Errorf("a MAIL_FROM that does not parse: %q, %v; want it back as it is, for the provider to report", got, err)
	}
}

// The form HTTP providers' APIs take: UTF-8, quoted only when needed.
func TestSenderDisplay(t *testing.T) {
	t.Parallel()
	for s, want := range map[Sender]string{
		{Address: "a@shop.example"}:                         "a@shop.example",
		{Name: "Toko Büdi", Address: "a@shop.example"}:      "Toko Büdi <a@shop.example>",
		{Name: "Toko Ana, Jakarta", Address: "a@s.example"}: `"Toko Ana, Jakarta" <a@s.example>`,
		{Name: `Ana "the" Shop`, Address: "a@s.example"}:    `"Ana \"the\" Shop" <a@s.example>`,
	} {
		if got := s.Display(); got != want {
			t.Errorf("Display(%+v) = %q, want %q", s, got, want)
		}
	}
}
