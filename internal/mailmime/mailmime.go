// Package mailmime builds the raw MIME message of a mail.Message, for
// the providers that take the message whole rather than as fields: an
// SMTP relay, and Amazon SES's raw content. go-mail writes it (RFC 2047
// for non-ASCII names and subjects, quoted-printable bodies) and, when
// given a signer, signs it with DKIM.
package mailmime

import (
	"bytes"

	gomail "github.com/wneessen/go-mail"

	"github.com/sekali-dev/sekali/internal/mail"
)

// Header is one header a provider adds to the message: our idempotency
// key under the name its relay honours, the key's hash as metadata.
type Header struct{ Name, Value string }

// Options are what the provider adds to every message it composes.
type Options struct {
	From    mail.Sender // MAIL_FROM; a message's FromName replaces its name
	Headers []Header
	DKIM    *gomail.DKIMSigner // nil: unsigned
}

// Compose builds m as text and HTML alternatives with the From (under
// the template's name), Reply-To, Auto-Submitted, List-Unsubscribe(-Post)
// for a subscription message, the deterministic Message-ID, a Date and
// o's headers.
func Compose(m mail.Message, o Options) ([]byte, error) {
	msg := gomail.NewMsg(gomail.WithNoDefaultUserAgent())
	from := o.From.WithName(m.FromName)
	if err := msg.FromFormat(from.Name, from.Address); err != nil {
		return nil, err
	}
	if m.ReplyTo != "" {
		if err := msg.ReplyTo(m.ReplyTo); err != nil {
			return nil, err
		}
	}
	msg.SetGenHeader("Auto-Submitted", mail.AutoSubmitted)
	if m.ListUnsubscribe != "" {
		msg.SetGenHeader("List-Unsubscribe", m.ListUnsubscribe)
		msg.SetGenHeader("List-Unsubscribe-Post", mail.ListUnsubscribePost)
	}
	if err := msg.To(m.To); err != nil {
		return nil, err
	}
	msg.Subject(m.Subject)
	msg.SetMessageIDWithValue(m.MessageID)
	for _, h := range o.Headers {
		msg.SetGenHeader(gomail.Header(h.Name), h.Value)
	}
	msg.SetDate()
	msg.SetBodyString(gomail.TypeTextPlain, m.Text)
	if m.HTML != "" {
		msg.AddAlternativeString(gomail.TypeTextHTML, m.HTML)
	}
	if o.DKIM != nil {
		msg.SetDKIM(o.DKIM)
	}
	var buf bytes.Buffer
	if _, err := msg.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
