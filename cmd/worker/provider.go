package main

import (
	"fmt"
	"time"

	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailgun"
	"github.com/sekali-dev/sekali/internal/postmark"
	"github.com/sekali-dev/sekali/internal/resend"
	"github.com/sekali-dev/sekali/internal/smtp"
)

// providerConfig is PROVIDER and the settings of the provider it names
// (docs/providers.md).
type providerConfig struct {
	Name     string        // smtp (any relay, a provider's SMTP endpoint included), resend, postmark, mailgun
	Timeout  time.Duration // PROVIDER_TIMEOUT: an HTTP provider's bound on one request, from before the hand-over
	SMTP     smtp.Config
	Resend   resend.Config
	Postmark postmark.Config
	Mailgun  mailgun.Config
}

// readProvider reads PROVIDER's settings; smtpCfg is the SMTP relay's.
func readProvider(env *envconfig.Reader, smtpCfg smtp.Config) providerConfig {
	c := providerConfig{
		Name:    env.OneOf("PROVIDER", "smtp", "smtp", "resend", "postmark", "mailgun"),
		Timeout: env.Duration("PROVIDER_TIMEOUT", 15*time.Second),
		SMTP:    smtpCfg,
	}
	from := smtpCfg.From
	switch c.Name {
	case "resend":
		c.Resend = resend.Config{APIKey: env.Secret("RESEND_API_KEY", ""), From: from, BaseURL: env.String("RESEND_BASE_URL", ""), Timeout: c.Timeout}
		env.Check("PROVIDER=resend", c.Resend.Validate())
	case "postmark":
		c.Postmark = postmark.ReadEnv(env)
		c.Postmark.From, c.Postmark.Timeout = from, c.Timeout
		env.Check("PROVIDER=postmark", c.Postmark.Validate())
	case "mailgun":
		c.Mailgun = mailgun.ReadEnv(env)
		c.Mailgun.From, c.Mailgun.Timeout = from, c.Timeout
		env.Check("PROVIDER=mailgun", c.Mailgun.Validate())
	default:
		env.Check("SMTP", smtpCfg.Validate())
	}
	return c
}

// timeout is what bounds the data of one send after the last lease check.
func (c providerConfig) timeout() time.Duration {
	if c.Name == "smtp" {
		return c.SMTP.Timeout
	}
	return c.Timeout
}

// open returns the provider, and what closes its kept connections.
func (c providerConfig) open() (mail.Provider, func(), error) {
	switch c.Name {
	case "resend":
		p, err := resend.New(c.Resend)
		if err != nil {
			return nil, nil, err
		}
		return p, p.Close, nil
	case "postmark":
		p, err := postmark.New(c.Postmark)
		if err != nil {
			return nil, nil, err
		}
		return p, p.Close, nil
	case "mailgun":
		p, err := mailgun.New(c.Mailgun)
		if err != nil {
			return nil, nil, err
		}
		return p, p.Close, nil
	default:
		p, err := smtp.New(c.SMTP)
		if err != nil {
			return nil, nil, err
		}
		return p, p.Close, nil
	}
}

// describe names the provider in the start-up log line.
func (c providerConfig) describe() string {
	if c.Name == "smtp" {
		return fmt.Sprintf("smtp %s:%d", c.SMTP.Host, c.SMTP.Port)
	}
	return c.Name
}
