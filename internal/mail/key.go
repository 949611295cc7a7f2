package mail

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
)

// KeyHash names a delivery wherever its idempotency key, which holds an
// e-mail address, must not appear: Redis keys, log lines, a provider's
// metadata, the Message-ID. The first 16 bytes of the key's SHA-256, in
// hex.
func KeyHash(idempotencyKey string) string {
	sum := sha256.Sum256([]byte(idempotencyKey))
	return hex.EncodeToString(sum[:16])
}

// ProviderKey is the idempotency key given to a provider that keeps
// keys of its own (Resend, over HTTP or in its SMTP header):
// "sekali-" and the hex SHA-256 of key, 71 characters of [a-z0-9-]. Our
// keys can be longer than providers take (Resend: 256) and carry an
// address; the digest is the same on every attempt, over every channel.
func ProviderKey(idempotencyKey string) string {
	sum := sha256.Sum256([]byte(idempotencyKey))
	return "sekali-" + hex.EncodeToString(sum[:])
}

// MessageID is the Message-ID (without angle brackets) of the e-mail
// with this idempotency key, sent from domain. The first claim of a
// delivery stores it; every later attempt, and the reconciler's look-up,
// use the stored one. Derived from the idempotency key, so a provider or
// a mailbox that deduplicates by Message-ID sees one message however
// often it arrives.
func MessageID(idempotencyKey, domain string) string {
	return MessageIDOfHash(KeyHash(idempotencyKey), domain)
}

// MessageIDOfHash is MessageID for a key already hashed (KeyHash), as a
// task's payload carries it.
func MessageIDOfHash(keyHash, domain string) string {
	return keyHash + "@" + domain
}

// MessageIDDomain is the right-hand side of the Message-IDs a sender
// (MAIL_FROM) gives: its address's domain. from must be valid
// (ParseSender).
func MessageIDDomain(from string) string {
	s, _ := ParseSender(from)
	return s.Domain()
}

// addressPattern matches what looks like an e-mail address in free text.
var addressPattern = regexp.MustCompile(`[^\s<>"'(),;:\[\]]+@[^\s<>"'(),;:\[\]]+`)

// RedactAddresses replaces every e-mail address in s with "address-redacted":
// providers quote the recipient in their replies (Postfix: "550 5.1.1
// <ana@example.com>: Recipient address rejected"), and no address may
// reach a log line.
func RedactAddresses(s string) string {
	return addressPattern.ReplaceAllString(s, "address-redacted")
}
