// Package ses takes Amazon SES's feedback (bounces, complaints,
// deliveries, delays) from Amazon SNS: it verifies SNS's signed HTTP
// messages and turns SES's event records into mail.Feedback. It does
// not send: SES's SendEmail needs SigV4 signing, which is the AWS SDK's
// work, and the SDK is not a dependency of this module (yet).
//
// SNS signs each message with SignatureVersion 1 (SHA1withRSA) or 2
// (SHA256withRSA) over a canonical string of some of its fields
// (https://docs.aws.amazon.com/sns/latest/dg/sns-verify-signature-of-message.html),
// with a key whose certificate SigningCertURL names. That URL must be
// https on an SNS host (sns.<region>.amazonaws.com, or .com.cn), the
// pattern AWS's own sns-validator uses; the certificate is fetched over
// TLS from there and cached.
package ses

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sekali-dev/sekali/internal/mail"
)

// MaxWebhookBody is the largest body Verify reads.
const MaxWebhookBody = 1 << 20

// DefaultTolerance is how old an SNS message may be. SNS keeps a
// message's Timestamp when it retries a delivery, so this is wider than
// the retries of a delivery policy, not a few minutes.
const DefaultTolerance = time.Hour

// snsHost is the host rule of AWS's sns-validator.
var snsHost = regexp.MustCompile(`^sns\.[a-zA-Z0-9\-]{3,}\.amazonaws\.com(\.cn)?$`)

// snsHostPort accepts an SNS host on the default https port.
func snsHostPort(hostport string) bool {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, ""
	}
	return (port == "" || port == "443") && snsHost.MatchString(host)
}

// WebhookVerifier checks SNS messages for the topics it is given.
type WebhookVerifier struct {
	topics    []string
	Tolerance time.Duration // DefaultTolerance when zero

	client *http.Client
	hostOK func(hostport string) bool // snsHostPort; tests replace it

	mu    sync.Mutex
	certs map[string]*x509.Certificate
}

// NewWebhookVerifier returns a verifier that takes messages from these
// topics only (SES_SNS_TOPIC_ARNS): a message from another topic,
// signed by SNS for someone else, is refused.
func NewWebhookVerifier(topicARNs ...string) (*WebhookVerifier, error) {
	if len(topicARNs) == 0 {
		return nil, errors.New("SES_SNS_TOPIC_ARNS must name at least one topic")
	}
	for _, arn := range topicARNs {
		parts := strings.Split(arn, ":")
		if len(parts) != 6 || parts[0] != "arn" || !strings.HasPrefix(parts[1], "aws") || parts[2] != "sns" || parts[5] == "" {
			return nil, fmt.Errorf("SES_SNS_TOPIC_ARNS: %q is not a topic ARN (arn:aws:sns:<region>:<account>:<topic>)", arn)
		}
	}
	return &WebhookVerifier{
		topics: slices.Clone(topicARNs),
		client: &http.Client{Timeout: 10 * time.Second},
		hostOK: snsHostPort,
		certs:  map[string]*x509.Certificate{},
	}, nil
}

// Result is what one SNS message carries: feedback from SES, or a
// subscription (or unsubscription) to confirm.
type Result struct {
	Feedback     []mail.Feedback
	Confirmation *Confirmation
}

// Confirmation is a verified SubscriptionConfirmation or
// UnsubscribeConfirmation. The subscription takes effect once
// SubscribeURL is fetched: Confirm does that.
type Confirmation struct {
	Type         string // SubscriptionConfirmation or UnsubscribeConfirmation
	TopicARN     string
	SubscribeURL string
	Token        string
}

// message is an SNS HTTP message.
type message struct {
	Type             string
	MessageID        string `json:"MessageId"`
	Token            string
	TopicARN         string `json:"TopicArn"`
	Subject          *string
	Message          string
	Timestamp        string
	SignatureVersion string
	Signature        string
	SigningCertURL   string `json:"SigningCertURL"`
	SubscribeURL     string `json:"SubscribeURL"`
}

// Verify checks an SNS message's signature, certificate URL, topic and
// age, and returns its SES feedback or the confirmation it asks for.
// header is unused: SNS signs inside the body.
func (v *WebhookVerifier) Verify(ctx context.Context, _ http.Header, body []byte, now time.Time) (Result, error) {
	if len(body) > MaxWebhookBody {
		return Result{}, fmt.Errorf("%w: %d bytes, at most %d", mail.ErrMalformed, len(body), MaxWebhookBody)
	}
	var m message
	if err := json.Unmarshal(body, &m); err != nil {
		return Result{}, fmt.Errorf("%w: %w", mail.ErrMalformed, err)
	}
	canonical, err := m.canonical()
	if err != nil {
		return Result{}, err
	}
	var hash crypto.Hash
	switch m.SignatureVersion {
	case "1":
		hash = crypto.SHA1
	case "2":
		hash = crypto.SHA256
	default:
		return Result{}, fmt.Errorf("%w: SignatureVersion %q", mail.ErrBadSignature, m.SignatureVersion)
	}
	sig, err := base64.StdEncoding.DecodeString(m.Signature)
	if err != nil || len(sig) == 0 {
		return Result{}, fmt.Errorf("%w: Signature is not base64", mail.ErrBadSignature)
	}
	if err := v.checkURL(m.SigningCertURL); err != nil {
		return Result{}, fmt.Errorf("%w: SigningCertURL %w", mail.ErrBadSignature, err)
	}
	cert, err := v.cert(ctx, m.SigningCertURL)
	if err != nil {
		return Result{}, err // not the sender's fault: the HTTP layer answers 5xx, SNS retries
	}
	key, ok := cert.PublicKey.(*rsa.PublicKey)
	if !ok {
		return Result{}, fmt.Errorf("%w: the signing certificate has no RSA key", mail.ErrBadSignature)
	}
	if err := rsa.VerifyPKCS1v15(key, hash, digest(hash, canonical), sig); err != nil {
		return Result{}, mail.ErrBadSignature
	}
	if !slices.Contains(v.topics, m.TopicARN) {
		return Result{}, fmt.Errorf("%w: topic %s is not one of ours", mail.ErrBadSignature, m.TopicARN)
	}
	at, err := time.Parse(time.RFC3339Nano, m.Timestamp)
	if err != nil {
		return Result{}, fmt.Errorf("%w: Timestamp %q", mail.ErrMalformed, m.Timestamp)
	}
	tolerance := v.Tolerance
	if tolerance == 0 {
		tolerance = DefaultTolerance
	}
	if d := now.Sub(at); d > tolerance || d < -5*time.Minute {
		return Result{}, fmt.Errorf("%w: sent %s, %s from now", mail.ErrStale, at.UTC().Format(time.RFC3339), d.Round(time.Second))
	}
	switch m.Type {
	case "Notification":
		fs, err := feedback(m.MessageID, m.Message)
		return Result{Feedback: fs}, err
	default: // SubscriptionConfirmation, UnsubscribeConfirmation: canonical checked the type
		if err := v.checkURL(m.SubscribeURL); err != nil {
			return Result{}, fmt.Errorf("%w: SubscribeURL %w", mail.ErrBadSignature, err)
		}
		return Result{Confirmation: &Confirmation{Type: m.Type, TopicARN: m.TopicARN, SubscribeURL: m.SubscribeURL, Token: m.Token}}, nil
	}
}

// Confirm confirms a subscription by fetching its SubscribeURL, which
// must pass the same host rule as the certificate URL.
func (v *WebhookVerifier) Confirm(ctx context.Context, c *Confirmation) error {
	if err := v.checkURL(c.SubscribeURL); err != nil {
		return fmt.Errorf("ses: SubscribeURL %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.SubscribeURL, nil)
	if err != nil {
		return err
	}
	res, err := v.client.Do(req)
	if err != nil {
		return fmt.Errorf("ses: confirm subscription to %s: %w", c.TopicARN, err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 1<<16))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("ses: confirm subscription to %s: answered %s", c.TopicARN, res.Status)
	}
	return nil
}

// canonical is the string SNS signs: for each field of the message's
// type, in this order, its name, a newline, its value, a newline;
// Subject only when present.
func (m message) canonical() ([]byte, error) {
	var fields []string
	switch m.Type {
	case "Notification":
		fields = []string{"Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"}
	case "SubscriptionConfirmation", "UnsubscribeConfirmation":
		fields = []string{"Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"}
	default:
		return nil, fmt.Errorf("%w: Type %q", mail.ErrMalformed, m.Type)
	}
	value := map[string]*string{
		"Message": &m.Message, "MessageId": &m.MessageID, "Subject": m.Subject, "SubscribeURL": &m.SubscribeURL,
		"Timestamp": &m.Timestamp, "Token": &m.Token, "TopicArn": &m.TopicARN, "Type": &m.Type,
	}
	var b strings.Builder
	for _, f := range fields {
		v := value[f]
		if v == nil {
			continue // Subject, when absent
		}
		if *v == "" && f != "Message" {
			return nil, fmt.Errorf("%w: no %s", mail.ErrMalformed, f)
		}
		b.WriteString(f + "\n" + *v + "\n")
	}
	return []byte(b.String()), nil
}

func digest(h crypto.Hash, b []byte) []byte {
	if h == crypto.SHA1 {
		sum := sha1.Sum(b) // SignatureVersion 1
		return sum[:]
	}
	sum := sha256.Sum256(b)
	return sum[:]
}

// checkURL applies the host rule: https, no credentials, an SNS host on
// the default port.
func (v *WebhookVerifier) checkURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil || raw == "":
		return fmt.Errorf("%q is not a URL", raw)
	case u.Scheme != "https":
		return fmt.Errorf("%q is not https", raw)
	case u.User != nil:
		return fmt.Errorf("%q carries credentials", raw)
	case !v.hostOK(u.Host):
		return fmt.Errorf("%q is not on an Amazon SNS host", raw)
	}
	return nil
}

// cert returns the certificate at raw, fetched once.
func (v *WebhookVerifier) cert(ctx context.Context, raw string) (*x509.Certificate, error) {
	v.mu.Lock()
	c := v.certs[raw]
	v.mu.Unlock()
	if c != nil {
		return c, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return nil, err
	}
	res, err := v.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ses: fetch the signing certificate: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("ses: fetch the signing certificate %s: answered %s", raw, res.Status)
	}
	b, err := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("ses: fetch the signing certificate %s: %w", raw, err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%w: %s holds no PEM certificate", mail.ErrBadSignature, raw)
	}
	c, err = x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", mail.ErrBadSignature, raw, err)
	}
	v.mu.Lock()
	if len(v.certs) > 100 {
		clear(v.certs) // SNS rotates its certificate rarely; a flood of URLs only costs fetches
	}
	v.certs[raw] = c
	v.mu.Unlock()
	return c, nil
}
