package smtp_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-msgauth/dkim"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/smtp"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// keyFile writes a PEM private key for DKIM and returns its path and the
// public key as a DNS record's p= holds it.
func keyFile(t *testing.T, key any, pub any) (string, string) {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dkim.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	var p []byte
	switch pub := pub.(type) {
	case ed25519.PublicKey:
		p = pub
	default:
		if p, err = x509.MarshalPKIXPublicKey(pub); err != nil {
			t.Fatal(err)
		}
	}
	return path, base64.StdEncoding.EncodeToString(p)
}

// What a real server (Mailpit) receives from a template with a sender of
// its own: the From name in RFC 2047, the Reply-To, Auto-Submitted and a
// Date; and, with DKIM set, a signature that a verifier we did not write
// (go-msgauth, its DNS look-up answered with the test's public key)
// accepts over the bytes Mailpit stored, for an RSA and an Ed25519 key.
func TestSenderIdentityAndDKIMAtMailpit(t *testing.T) {
	t.Parallel()
	mp := testenv.StartMailpit(t, testenv.MailpitOptions{})
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	edPub, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for name, keys := range map[string][2]any{"rsa-sha256": {rsaKey, &rsaKey.PublicKey}, "ed25519-sha256": {edKey, edPub}} {
		path, record := keyFile(t, keys[0], keys[1])
		algo := "rsa"
		if name == "ed25519-sha256" {
			algo = "ed25519"
		}
		p, err := smtp.New(smtp.Config{
			Host: mp.Host, Port: mp.Port, TLS: smtp.TLSNone, HeloName: "worker-7.shop.example",
			From: "Toko Ana <orders@" + mailDomain + ">", IdempotencyHeader: "Idempotency-Key", Timeout: 5 * time.Second,
			DKIM: smtp.DKIM{Domain: mailDomain, Selector: "s2026", KeyFile: path},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		to := name + "@example.com"
		key := "order-confirmation:0193a5b2-7c1e-7d4a-9f00-3c2b1a0e9d87:" + to
		if _, err := p.Send(context.Background(), mail.Message{To: to, Subject: "Pesanan Anda", Text: "Terima kasih", HTML: "<p>Terima kasih</p>",
			MessageID: mail.MessageID(key, mailDomain), IdempotencyKey: key, FromName: "Toko Büdi", ReplyTo: "cs@" + mailDomain},
			func() error { return nil }); err != nil {
			t.Fatal(err)
		}
		msgs := mp.ByRecipient(t, to)
		if len(msgs) != 1 {
			t.Fatalf("%s: %d messages at Mailpit", name, len(msgs))
		}
		h := mp.Headers(t, msgs[0].ID)
		from, err := h.AddressList("From")
		if err != nil || len(from) != 1 || from[0].Name != "Toko Büdi" || from[0].Address != "orders@"+mailDomain {
			t.Errorf("%s: From %q (%v), want Toko Büdi <orders@%s>", name, h.Get("From"), err, mailDomain)
		}
		if raw := h.Get("From"); !strings.HasPrefix(raw, "=?") {
			t.Errorf("%s: From %q is not RFC 2047 encoded", name, raw)
		}
		if h.Get("Reply-To") != "<cs@"+mailDomain+">" && h.Get("Reply-To") != "cs@"+mailDomain {
			t.Errorf("%s: Reply-To %q", name, h.Get("Reply-To"))
		}
		if h.Get("Auto-Submitted") != "auto-generated" || h.Get("Date") == "" {
			t.Errorf("%s: Auto-Submitted %q, Date %q", name, h.Get("Auto-Submitted"), h.Get("Date"))
		}

		raw := mp.Raw(t, msgs[0].ID)
		verifications, err := dkim.VerifyWithOptions(bytes.NewReader(raw), &dkim.VerifyOptions{
			LookupTXT: func(domain string) ([]string, error) {
				if domain != "s2026._domainkey."+mailDomain {
					t.Errorf("%s: looked up %s", name, domain)
				}
				return []string{"v=DKIM1; k=" + algo + "; p=" + record}, nil
			},
		})
		if err != nil || len(verifications) != 1 || verifications[0].Err != nil || verifications[0].Domain != mailDomain {
			t.Errorf("%s: verification %v %+v", name, err, verifications)
		}
		// One byte changed in the body: the same verifier refuses it.
		tampered := bytes.Replace(raw, []byte("Terima kasih"), []byte("Terima kasiH"), 1)
		if v, _ := dkim.VerifyWithOptions(bytes.NewReader(tampered), &dkim.VerifyOptions{
			LookupTXT: func(string) ([]string, error) { return []string{"v=DKIM1; k=" + algo + "; p=" + record}, nil },
		}); len(v) != 1 || v[0].Err == nil {
			t.Errorf("%s: a tampered body still verifies", name)
		}
	}
}

// The relay refuses to start on a DKIM setting it cannot sign with: a
// key that does not parse, an RSA key under 2048 bits, a domain the From
// address is not in, or a setting without the others.
func TestDKIMSettingsAreChecked(t *testing.T) {
	t.Parallel()
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	smallPath, _ := keyFile(t, small, &small.PublicKey)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	edPath, _ := keyFile(t, ed, ed.Public())
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := smtp.Config{Host: "localhost", Port: 1025, TLS: smtp.TLSNone, From: "orders@mail.shop.example", IdempotencyHeader: "Idempotency-Key", Timeout: time.Second}
	for name, c := range map[string]struct {
		dkim smtp.DKIM
		want string
	}{
		"garbage":       {smtp.DKIM{Domain: "shop.example", Selector: "s1", KeyFile: garbage}, "DKIM_PRIVATE_KEY_FILE"},
		"missing file":  {smtp.DKIM{Domain: "shop.example", Selector: "s1", KeyFile: "/nonexistent.pem"}, "DKIM_PRIVATE_KEY_FILE"},
		"1024 bits":     {smtp.DKIM{Domain: "shop.example", Selector: "s1", KeyFile: smallPath}, "1024 bits"},
		"not aligned":   {smtp.DKIM{Domain: "other.example", Selector: "s1", KeyFile: edPath}, "does not align"},
		"no selector":   {smtp.DKIM{Domain: "shop.example", KeyFile: edPath}, "go together"},
		"bad selector":  {smtp.DKIM{Domain: "shop.example", Selector: "s 1", KeyFile: edPath}, "DKIM_SELECTOR"},
		"subdomain key": {smtp.DKIM{Domain: "mail.shop.example.evil", Selector: "s1", KeyFile: edPath}, "does not align"},
	} {
		cfg := base
		cfg.DKIM = c.dkim
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate() = %v, want it to say %q", name, err, c.want)
		}
	}
	ok := base
	ok.DKIM = smtp.DKIM{Domain: "shop.example", Selector: "s1", KeyFile: edPath} // the From domain is below it: aligned
	if err := ok.Validate(); err != nil {
		t.Errorf("an aligned Ed25519 key: %v", err)
	}
}
