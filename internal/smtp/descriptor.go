package smtp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/mail"
)

// Name is SMTP's value of PROVIDER, the default.
const Name = "smtp"

// Descriptor is SMTP as the binaries know it (internal/roster lists
// it): any relay, a provider's SMTP endpoint included. It sends no key
// of ours by itself (a relay that deduplicates by a header of its own,
// such as Resend's, is given it by SMTP_IDEMPOTENCY_HEADER); the reconciler asks a relay that can be
// searched (Mailpit, MailHog: MAIL_LOOKUP_URL) whether it holds a
// message. It has no webhook: a provider's SMTP endpoint reports
// through its own (SES's is in internal/ses).
var Descriptor = mail.Descriptor{
	Name:   Name,
	Sender: ReadEnv,
	Lookup: readLookupEnv,
}

// ReadEnv reads the relay's SMTP_* variables, and checks them.
func ReadEnv(env *envconfig.Reader, s mail.SenderSettings) mail.SenderConfig {
	c := Config{
		Host:              env.String("SMTP_HOST", "localhost"),
		Port:              env.Int("SMTP_PORT", 1025, 1, 65535),
		Username:          env.Secret("SMTP_USERNAME", ""),
		Password:          env.Secret("SMTP_PASSWORD", ""),
		TLS:               env.OneOf("SMTP_TLS", TLSNone, TLSNone, TLSStartTLS, TLSImplicit),
		From:              s.From,
		HeloName:          env.String("SMTP_HELO", HeloName()),
		CAFile:            env.String("SMTP_CA_FILE", ""),
		IdempotencyHeader: env.String("SMTP_IDEMPOTENCY_HEADER", ""),
		MetadataHeader:    env.String("SMTP_METADATA_HEADER", ""),
		Timeout:           env.Duration("SMTP_TIMEOUT", 15*time.Second),
		MaxIdle:           s.MaxIdle,
		IdleTimeout:       env.Duration("SMTP_IDLE_TIMEOUT", DefaultIdleTimeout),
		Connections:       env.Int("SMTP_CONNECTIONS", DefaultConnections, 1, 1000),
		DKIM: DKIM{Domain: env.String("DKIM_DOMAIN", ""), Selector: env.String("DKIM_SELECTOR", ""),
			KeyFile: env.String("DKIM_PRIVATE_KEY_FILE", "")},
	}
	env.Check("SMTP", c.Validate())
	return c
}

// Open implements mail.SenderConfig.
func (c Config) Open() (mail.Provider, func(), error) { return mail.Opened(New(c)) }

// SendTimeout implements mail.SenderConfig: SMTP_TIMEOUT bounds each
// command, the data's included.
func (c Config) SendTimeout() (time.Duration, string) { return c.Timeout, "SMTP_TIMEOUT" }

func (c Config) String() string { return fmt.Sprintf("smtp %s:%d", c.Host, c.Port) }

// readLookupEnv reads MAIL_LOOKUP_URL and MAIL_LOOKUP_API: nil when no
// look-up is configured.
func readLookupEnv(env *envconfig.Reader) mail.LookupOpener {
	raw := env.String("MAIL_LOOKUP_URL", "")
	api := env.OneOf("MAIL_LOOKUP_API", APIAuto, APIAuto, APIMailHog, APIMailpit)
	if raw == "" {
		return nil
	}
	if _, err := parseLookupURL(raw); !env.Check("MAIL_LOOKUP_URL", err) {
		return nil
	}
	return func(ctx context.Context) (mail.Lookup, error) { return newLookupWhenUp(ctx, api, raw) }
}

// newLookupWhenUp is NewLookup checked before the reconciler's first
// pass: a wrong MAIL_LOOKUP_URL or MAIL_LOOKUP_API stops it at start, not
// at the first ambiguous send. A server that does not answer at all (it
// may be starting beside the reconciler) gets a few seconds.
func newLookupWhenUp(ctx context.Context, api, lookupURL string) (mail.Lookup, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		lookup, err := NewLookup(ctx, api, lookupURL)
		var unreachable *url.Error
		if err == nil || !errors.As(err, &unreachable) || time.Now().After(deadline) || ctx.Err() != nil {
			return lookup, err
		}
		time.Sleep(500 * time.Millisecond)
	}
}
