// Package httpprovider is what the HTTP mail providers (internal/resend,
// internal/postmark, internal/mailgun) share, so that the next one is a
// sibling package that brings only what is its own: its wire format (the
// paths, the body, the answers), the meaning of its error answers, its
// webhook's shape and its descriptor's values.
//
// It is their skeleton (API, Config): the settings every one has (a
// credential, MAIL_FROM, a base URL, PROVIDER_TIMEOUT, a look-up's
// window), reading them, checking them, making the client, and the
// descriptor's Sender, Lookup and Webhook built from them. It owns the
// base-URL rule (https, or plain http only to a loopback address), the
// connection pool, and one request to the provider's API with the two
// rules that keep a send from being handed over twice or lost: the
// request body is handed to the connection only before the request's
// deadline, which counts from before the worker's last lease check
// (Client.HandOver), and a request without an answer is classified by
// whether it was written whole (mail.OutcomeUnavailable before,
// mail.OutcomeAmbiguous after). It also holds the few rules the
// providers have in common around that: what a message must carry
// before it becomes a request (CheckMessage, ComposeError), and in their
// webhook verifiers, probes and look-ups the body cap, the signed
// timestamp's window, what a probe's refusal means (Client.Probe), what
// a search's answer must be (Client.Get), and when a search that missed
// a send can be believed.
package httpprovider

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/sekali-dev/sekali/internal/mail"
)

// BaseURL checks raw, a provider's API base URL (def when empty): https,
// or plain http to a loopback address (a test server), with a host and
// no query or fragment. It returns it without a trailing slash.
func BaseURL(raw, def string) (string, error) {
	if raw == "" {
		raw = def
	}
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q: want an URL such as %s", raw, def)
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !isLoopback(u.Hostname()) {
			return "", fmt.Errorf("%q: plain http only for loopback addresses; use https", raw)
		}
	default:
		return "", fmt.Errorf("%q: want an https URL", raw)
	}
	return u.String(), nil
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CheckMessage checks what every provider's request needs of m and
// returns its recipient, normalized: an address (an error wrapping
// mail.ErrInvalidAddress if not), our Message-ID as mail.MessageID
// makes it (id@domain, without angle brackets), and an idempotency key.
// Its errors go to ComposeError.
func CheckMessage(m mail.Message) (to string, err error) {
	to, err = mail.NormalizeAddress(m.To)
	if err != nil {
		return "", fmt.Errorf("recipient: %w", err)
	}
	if !strings.Contains(m.MessageID, "@") || strings.ContainsAny(m.MessageID, "<> \r\n") {
		return "", fmt.Errorf("message id %q: want id@domain without angle brackets", m.MessageID)
	}
	if m.IdempotencyKey == "" {
		return "", errors.New("no idempotency key")
	}
	return to, nil
}

// Header is one header of a message as an HTTP API takes it beside its
// own fields (Postmark's Headers, Resend's headers).
type Header struct {
	Name  string
	Value string
}

// Headers are the headers every message carries besides its addresses
// and subject, in this order: our Message-ID (m's, in angle brackets),
// Auto-Submitted and, when m has one, List-Unsubscribe with its one-click
// List-Unsubscribe-Post.
func Headers(m mail.Message) []Header {
	hs := []Header{{Name: "Message-ID", Value: "<" + m.MessageID + ">"}, {Name: "Auto-Submitted", Value: mail.AutoSubmitted}}
	if m.ListUnsubscribe != "" {
		hs = append(hs, Header{Name: "List-Unsubscribe", Value: m.ListUnsubscribe}, Header{Name: "List-Unsubscribe-Post", Value: mail.ListUnsubscribePost})
	}
	return hs
}

// ComposeError classifies a message that cannot be put into a request:
// a bad recipient is refused for good, anything else is our bug and
// waits (retried until DELIVERY_MAX_AGE) for a fix.
func ComposeError(err error) *mail.SendError {
	if errors.Is(err, mail.ErrInvalidAddress) {
		return &mail.SendError{Outcome: mail.OutcomePermanent, Stage: mail.StageRecipient, Err: fmt.Errorf("compose request: %w", err)}
	}
	return &mail.SendError{Outcome: mail.OutcomeTemporary, Stage: mail.StageConnect, Err: fmt.Errorf("compose request: %w", err)}
}

// MentionsField reports whether an error message names a request field
// quoted as Resend and Postmark quote it: 'to', "to" or `to`.
func MentionsField(msg, name string) bool {
	for _, q := range []string{"'", `"`, "`"} {
		if strings.Contains(msg, q+name+q) {
			return true
		}
	}
	return false
}

// Truncate returns the start of an answer's body for an error message.
func Truncate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

// ComposeBatch composes each message of a batch with compose, for a
// provider's batch request: results has one entry per message, the
// refusal of each that could not be composed (ComposeError) set, and
// items are those composed, in order, in[k] the index in msgs of
// items[k]. The same messages leave out the same ones, so that a batch
// sent again under its key is the same body.
func ComposeBatch[E any](msgs []mail.Message, compose func(mail.Message) (E, error)) (results []mail.BatchResult, items []E, in []int) {
	results = make([]mail.BatchResult, len(msgs))
	for i, m := range msgs {
		e, err := compose(m)
		if err != nil {
			results[i].Err = ComposeError(err)
			continue
		}
		items, in = append(items, e), append(in, i)
	}
	return results, items, in
}
