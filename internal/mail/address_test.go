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
