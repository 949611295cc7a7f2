package mail

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"
)

// One-click unsubscribe (RFC 8058): a subscription template's message
// carries List-Unsubscribe, a link whose token names the recipient, the
// category and the day it was issued, signed with UNSUBSCRIBE_SECRET, so
// that the API can honour it without a database look-up, nobody can
// unsubscribe someone else, and a link stops working once it is older
// than UNSUBSCRIBE_TOKEN_TTL.
//
// A token is base64url(category "\n" recipient "\n" day) "." base64url(HMAC),
// day being the days since 1970-01-01 (UTC). Tokens of the first format,
// base64url(category "\n" recipient) ".", carry no day; those already in
// sent mail keep working without a lifetime (docs/security.md).

// ListUnsubscribePost is the List-Unsubscribe-Post header's value that
// says the link takes a one-click POST.
const ListUnsubscribePost = "List-Unsubscribe=One-Click"

// DefaultUnsubscribeTTL is how long an unsubscribe link works by default:
// a year. Mailbox providers call the one-click link whenever the reader
// presses their button, and readers unsubscribe from mail they got
// months ago; a link that has stopped working looks to them like a
// sender that ignores unsubscribes, and they report spam instead.
const DefaultUnsubscribeTTL = 365 * 24 * time.Hour

var (
	// ErrBadUnsubscribeToken: the token is not one this service signed.
	ErrBadUnsubscribeToken = errors.New("mail: not an unsubscribe token of this service")
	// ErrExpiredUnsubscribeToken: the token is this service's, but older
	// than its lifetime.
	ErrExpiredUnsubscribeToken = errors.New("mail: the unsubscribe token has expired")
)

// day is the granularity of a token's issue time: it says when the
// message was recorded, not who read it when.
const day = 24 * time.Hour

// UnsubscribeToken is the signed token of recipient leaving category,
// issued on the day (UTC) of issued. The worker passes the delivery's
// creation, so that every attempt at one message carries the same link.
func UnsubscribeToken(secret, recipient, category string, issued time.Time) string {
	days := issued.UTC().Unix() / int64(day/time.Second)
	payload := unsubscribeEncoding.EncodeToString([]byte(category + "\n" + recipient + "\n" + strconv.FormatInt(days, 10)))
	return payload + "." + unsubscribeEncoding.EncodeToString(unsubscribeMAC(secret, payload))
}

// UnsubscribeClaim is what a valid token says.
type UnsubscribeClaim struct {
	Recipient, Category string
	// Issued is the day the token was issued (midnight UTC); zero for a
	// token of the first format, which carries none.
	Issued time.Time
}

// Legacy reports whether the token was of the first format, without an
// issue day.
func (c UnsubscribeClaim) Legacy() bool { return c.Issued.IsZero() }

// unsubscribeEncoding decodes strictly: no padding, no set trailing bits.
var unsubscribeEncoding = base64.RawURLEncoding.Strict()

// ParseUnsubscribeToken checks token's signature and age at now:
// ErrBadUnsubscribeToken unless this service signed exactly this token
// (one that does not re-encode to itself, a signature with trailing
// bits set for instance, is not) for a normalized address
// (NormalizeAddress), ErrExpiredUnsubscribeToken, with the
// claim for the log, when now is more than ttl after the end of the day
// it was issued. A token of the first format has no day, and does not
// expire.
func ParseUnsubscribeToken(secret, token string, now time.Time, ttl time.Duration) (UnsubscribeClaim, error) {
	payload, sig, ok := strings.Cut(token, ".")
	mac, err := decodeCanonical(sig)
	if !ok || err != nil || !hmac.Equal(mac, unsubscribeMAC(secret, payload)) {
		return UnsubscribeClaim{}, ErrBadUnsubscribeToken
	}
	raw, err := decodeCanonical(payload)
	if err != nil {
		return UnsubscribeClaim{}, ErrBadUnsubscribeToken
	}
	fields := strings.Split(string(raw), "\n")
	var c UnsubscribeClaim
	switch len(fields) {
	case 2: // the first format: no issue day
		c.Category, c.Recipient = fields[0], fields[1]
	case 3:
		days, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil || strconv.FormatInt(days, 10) != fields[2] || days < 0 || days > now.Unix()/int64(day/time.Second)+1 {
			return UnsubscribeClaim{}, ErrBadUnsubscribeToken // signed, so never; but a day to come is no day
		}
		c.Category, c.Recipient, c.Issued = fields[0], fields[1], time.Unix(days*int64(day/time.Second), 0).UTC()
		if now.After(c.Issued.Add(day + ttl)) { // ttl after the end of the issue day
			return c, ErrExpiredUnsubscribeToken
		}
	default:
		return UnsubscribeClaim{}, ErrBadUnsubscribeToken
	}
	if r, err := NormalizeAddress(c.Recipient); err != nil || r != c.Recipient {
		return UnsubscribeClaim{}, ErrBadUnsubscribeToken // signed, so never: the worker signs a delivery's recipient
	}
	return c, nil
}

// decodeCanonical decodes s, refusing any s that is not the one encoding
// of what it decodes to (the decoder skips line breaks, for instance).
func decodeCanonical(s string) ([]byte, error) {
	b, err := unsubscribeEncoding.DecodeString(s)
	if err == nil && unsubscribeEncoding.EncodeToString(b) != s {
		err = errors.New("not the canonical encoding")
	}
	return b, err
}

func unsubscribeMAC(secret, payload string) []byte {
	m := hmac.New(sha256.New, []byte("sekali unsubscribe\x00"+secret))
	m.Write([]byte(payload))
	return m.Sum(nil)
}
