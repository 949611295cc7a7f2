package mail

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
)

// One-click unsubscribe (RFC 8058): a subscription template's message
// carries List-Unsubscribe, a link whose token names the recipient and
// the category, signed with UNSUBSCRIBE_SECRET, so that the API can honour
// it without a database look-up and nobody can unsubscribe someone else.

// ListUnsubscribePost is the List-Unsubscribe-Post header's value that
// says the link takes a one-click POST.
const ListUnsubscribePost = "List-Unsubscribe=One-Click"

// ErrBadUnsubscribeToken: the token is not one this service signed.
var ErrBadUnsubscribeToken = errors.New("mail: not an unsubscribe token of this service")

// UnsubscribeToken is the signed token of recipient leaving category.
func UnsubscribeToken(secret, recipient, category string) string {
	payload := base64.RawURLEncoding.EncodeToString([]byte(category + "\n" + recipient))
	return payload + "." + base64.RawURLEncoding.EncodeToString(unsubscribeMAC(secret, payload))
}

// ParseUnsubscribeToken checks token's signature and returns its
// recipient and category.
func ParseUnsubscribeToken(secret, token string) (recipient, category string, err error) {
	payload, sig, ok := strings.Cut(token, ".")
	mac, err := base64.RawURLEncoding.DecodeString(sig)
	if !ok || err != nil || !hmac.Equal(mac, unsubscribeMAC(secret, payload)) {
		return "", "", ErrBadUnsubscribeToken
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return "", "", ErrBadUnsubscribeToken
	}
	category, recipient, ok = strings.Cut(string(raw), "\n")
	if !ok {
		return "", "", ErrBadUnsubscribeToken
	}
	return recipient, category, nil
}

func unsubscribeMAC(secret, payload string) []byte {
	m := hmac.New(sha256.New, []byte("sekali unsubscribe\x00"+secret))
	m.Write([]byte(payload))
	return m.Sum(nil)
}
