package smtp

import (
	"crypto"
	"crypto/rsa"
	"errors"
	"fmt"
	"os"
	"strings"

	gomail "github.com/wneessen/go-mail"

	"github.com/sekali-dev/sekali/internal/mail"
)

// DKIM is the signature the relay's messages carry: the shop's own, so
// that a relay that does not sign (its own server, a plain SMTP
// service) still sends mail that Gmail, Yahoo and Outlook take from a
// bulk sender. go-mail signs; the key is RSA of 2048 bits or more, or
// Ed25519, in PEM.
type DKIM struct {
	Domain   string // DKIM_DOMAIN: d=, aligned with MAIL_FROM's domain
	Selector string // DKIM_SELECTOR: s=, the DNS name <selector>._domainkey.<domain>
	KeyFile  string // DKIM_PRIVATE_KEY_FILE
}

// minRSABits is the least RSA key size the service signs with: the major
// inboxes ignore, or refuse, signatures of shorter keys.
const minRSABits = 2048

// enabled reports whether any DKIM setting is given.
func (d DKIM) enabled() bool { return d.Domain != "" || d.Selector != "" || d.KeyFile != "" }

// signer checks the settings against the sender and returns go-mail's
// signer; nil when DKIM is off.
func (d DKIM) signer(from string) (*gomail.DKIMSigner, error) {
	if !d.enabled() {
		return nil, nil
	}
	var errs []error
	if d.Domain == "" || d.Selector == "" || d.KeyFile == "" {
		errs = append(errs, errors.New("DKIM_DOMAIN, DKIM_SELECTOR and DKIM_PRIVATE_KEY_FILE go together"))
	}
	domain := strings.ToLower(strings.TrimSuffix(d.Domain, "."))
	if sender, err := mail.ParseSender(from); err == nil && domain != "" && !aligned(sender.Domain(), domain) {
		errs = append(errs, fmt.Errorf("DKIM_DOMAIN %s does not align with MAIL_FROM's domain %s: DMARC needs the From domain to be it or below it", domain, sender.Domain()))
	}
	if d.Selector != "" && !validDNSLabel(d.Selector) {
		errs = append(errs, fmt.Errorf("DKIM_SELECTOR %q: want a DNS label such as sekali2026", d.Selector))
	}
	var key crypto.Signer
	if d.KeyFile != "" {
		pem, err := os.ReadFile(d.KeyFile)
		if err == nil {
			key, err = gomail.PrivKeyFromPEM(pem)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("DKIM_PRIVATE_KEY_FILE %s: %w", d.KeyFile, err))
		} else if k, ok := key.(*rsa.PrivateKey); ok && k.N.BitLen() < minRSABits {
			errs = append(errs, fmt.Errorf("DKIM_PRIVATE_KEY_FILE %s: an RSA key of %d bits; use %d or more, or Ed25519", d.KeyFile, k.N.BitLen(), minRSABits))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return gomail.NewDKIMSigner(domain, d.Selector, key), nil
}

// aligned reports DMARC's relaxed alignment as far as it can be told
// without the public suffix list: the From domain is the signing domain
// or below it.
func aligned(fromDomain, dkimDomain string) bool {
	return fromDomain == dkimDomain || strings.HasSuffix(fromDomain, "."+dkimDomain)
}

func validDNSLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
