// Package sestest is an HTTP server that speaks the part of Amazon SES's
// v2 API that package ses sends with: SendEmail with raw content (POST
// /v2/email/outbound-emails) and GetAccount (GET /v2/email/account). It
// checks every request's AWS Signature Version 4 with the AWS SDK's own
// signer (the reference implementation, not ours) against its access
// key, records the e-mails it "sends", and can inject SES's failure
// modes: error answers in SES's REST-JSON shape (X-Amzn-ErrorType and a
// message), and connections cut after the request was read, with or
// without the e-mail sent.
//
// It refuses what SES refuses (https://docs.aws.amazon.com/ses/latest/APIReference-V2/API_SendEmail.html):
// a request not signed with its key for its region and service (403,
// InvalidSignatureException / UnrecognizedClientException), a From
// identity that is not verified and, in the sandbox, a recipient that is
// not (400 MessageRejected, "Email address is not verified"), a
// configuration set it does not have (404 NotFoundException), content
// other than raw, a raw message without From or with a Message-ID of
// ours that it does not keep: like SES, it replaces the Message-ID with
// its own.
//
// Its sending quota is SES's (https://docs.aws.amazon.com/ses/latest/dg/manage-sending-quotas-errors.html),
// enforced once a test sets it (SetSendQuota): beyond the maximum send
// rate (messages per second, over a sliding window) SendEmail is
// answered 429 TooManyRequestsException "Maximum sending rate exceeded.",
// beyond the maximum of a rolling 24 hours 429 TooManyRequestsException
// "Daily message quota exceeded." (SES v2 names the throttling
// exception so; its guide calls both throttling errors). GetAccount
// answers the quota in SendQuota (Max24HourSend, MaxSendRate,
// SentLast24Hours): SES's 50,000 and 14 per second until a test sets
// another, which it then enforces.
//
// It is meant for tests and test binaries, so it does not depend on
// package testing; its methods are safe for concurrent use.
package sestest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/mail"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/sekali-dev/sekali/internal/httpprovider/httpprovidertest"
)

// Message is one e-mail the server holds.
type Message struct {
	MessageID        string // SES's id, which SendEmail answered
	From             string // FromEmailAddress
	To               []string
	Raw              []byte // as received; its Message-ID is the caller's
	Header           mail.Header
	Tags             map[string]string
	ConfigurationSet string
	ReceivedAt       time.Time
}

// Fault is what the server does with one request instead of, or after,
// handling it.
type Fault struct {
	Status  int    // answer this status …
	Type    string // … with X-Amzn-ErrorType: Type …
	Message string // … and {"message": Message}
	Cut     bool   // read the request and close the connection without an answer
	Sent    bool   // with Cut on SendEmail: send the e-mail first
}

// Server is a running fake SES v2 API for one region.
type Server struct {
	URL       string // for ses.Config.Endpoint
	Region    string
	AccessKey string // AWS_ACCESS_KEY_ID the server takes
	SecretKey string // AWS_SECRET_ACCESS_KEY

	http   *http.Server
	faults httpprovidertest.Faults[Fault] // by "send", "account"
	rate   httpprovidertest.RateLimit

	mu        sync.Mutex
	verified  []string // addresses or domains; nil: all
	sandbox   bool
	sets      []string
	paused    bool
	maxRate   float64 // MaxSendRate, as GetAccount reports it
	max24h    int     // Max24HourSend, as GetAccount reports it; -1: unlimited
	enforced  bool    // SetSendQuota was called: the quota is enforced
	throttled int     // refused for the rate
	quotaFull int     // refused for the daily quota
	msgs      []Message
}

// NewServer starts a server on a loopback port; it panics if it cannot
// listen, as httptest.NewServer does.
func NewServer(region string) *Server {
	ln, url := httpprovidertest.Listen("sestest")
	s := &Server{URL: url, Region: region, AccessKey: "AKIA" + strings.ToUpper(httpprovidertest.RandomHex(8)),
		SecretKey: httpprovidertest.RandomHex(20), maxRate: 14, max24h: 50000}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v2/email/outbound-emails", s.handleSend)
	mux.HandleFunc("GET /v2/email/account", s.handleAccount)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, "NotFoundException", "no such resource")
	})
	s.http = httpprovidertest.Serve(ln, mux)
	return s
}

// Close stops the server.
func (s *Server) Close() { _ = s.http.Close() }

// Verify limits the identities mail may come from (and, in the sandbox,
// go to) to these addresses or domains; none: all.
func (s *Server) Verify(identities ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.verified = slices.Clone(identities)
}

// SetSandbox puts the account in the sandbox: recipients must be
// verified identities too.
func (s *Server) SetSandbox(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sandbox = on
}

// AddConfigurationSet makes a configuration set exist.
func (s *Server) AddConfigurationSet(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sets = append(s.sets, name)
}

// PauseSending makes GetAccount say that the account may not send.
func (s *Server) PauseSending(paused bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paused = paused
}

// SetSendQuota sets the account's sending quota, which GetAccount then
// reports and SendEmail enforces: maxSendRate messages per second (at
// least one per 1/maxSendRate seconds when below one), max24HourSend in
// any 24 hours (-1: unlimited, as SES says it).
func (s *Server) SetSendQuota(maxSendRate float64, max24HourSend int) {
	s.mu.Lock()
	s.maxRate, s.max24h, s.enforced = maxSendRate, max24HourSend, true
	s.mu.Unlock()
	switch {
	case maxSendRate >= 1:
		s.rate.Set(int(maxSendRate), time.Second)
	case maxSendRate > 0:
		s.rate.Set(1, time.Duration(float64(time.Second)/maxSendRate))
	default:
		s.rate.Set(0, 0)
	}
}

// Throttled counts the SendEmail requests refused for the send rate.
func (s *Server) Throttled() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.throttled
}

// QuotaExceeded counts the SendEmail requests refused for the daily
// quota.
func (s *Server) QuotaExceeded() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.quotaFull
}

// sentSince counts the messages received since t; s.mu held.
func (s *Server) sentSince(t time.Time) int {
	n := 0
	for _, m := range s.msgs {
		if !m.ReceivedAt.Before(t) {
			n++
		}
	}
	return n
}

// FailNext queues faults for the next requests of a kind: "send"
// (SendEmail) or "account" (GetAccount), in order.
func (s *Server) FailNext(kind string, faults ...Fault) { s.faults.Add(kind, faults...) }

// Requests counts the requests of a kind received, answered or not.
func (s *Server) Requests(kind string) int { return s.faults.Requests(kind) }

// Messages returns a copy of the e-mails held, in the order received.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.msgs)
}

// CountByTag counts the e-mails whose tag name has value.
func (s *Server) CountByTag(name, value string) int {
	n := 0
	for _, m := range s.Messages() {
		if m.Tags[name] == value {
			n++
		}
	}
	return n
}

// writeError answers SES's REST-JSON error shape.
func writeError(w http.ResponseWriter, status int, typ, message string) {
	w.Header().Set("X-Amzn-ErrorType", typ)
	httpprovidertest.WriteJSON(w, status, map[string]string{"message": message})
}

// answerFault answers f; it reports false for a Cut that sends first.
func answerFault(w http.ResponseWriter, f *Fault) bool {
	switch {
	case f.Cut && f.Sent:
		return false
	case f.Cut:
		httpprovidertest.HangUp(w)
	default:
		writeError(w, f.Status, f.Type, f.Message)
	}
	return true
}

// checkSignature verifies the request's SigV4 signature by signing the
// same request again with the SDK's signer and the server's key.
func (s *Server) checkSignature(r *http.Request, body []byte) error {
	auth := r.Header.Get("Authorization")
	fields := map[string]string{}
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		return fmt.Errorf("no AWS4-HMAC-SHA256 Authorization")
	}
	for _, f := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 || scope[0] != s.AccessKey || scope[2] != s.Region || scope[3] != "ses" || scope[4] != "aws4_request" {
		return fmt.Errorf("credential scope %q is not %s/…/%s/ses/aws4_request", fields["Credential"], s.AccessKey, s.Region)
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return fmt.Errorf("X-Amz-Date: %w", err)
	}
	if d := time.Since(at); d > 5*time.Minute || d < -5*time.Minute {
		return fmt.Errorf("signed %v ago", d)
	}
	again, err := http.NewRequestWithContext(context.Background(), r.Method, "http://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	for _, h := range strings.Split(fields["SignedHeaders"], ";") {
		if h != "host" && h != "content-length" {
			again.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	if !strings.Contains(";"+fields["SignedHeaders"]+";", ";content-length;") {
		again.ContentLength = 0
	}
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: s.AccessKey, SecretAccessKey: s.SecretKey, SessionToken: r.Header.Get("X-Amz-Security-Token")}
	if err := v4.NewSigner().SignHTTP(r.Context(), creds, again, hex.EncodeToString(sum[:]), "ses", s.Region, at); err != nil {
		return err
	}
	if got := again.Header.Get("Authorization"); got != auth {
		return fmt.Errorf("signature does not match (want %s)", got)
	}
	return nil
}

// authorized checks the signature, answering 403 if it fails.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request, body []byte) bool {
	if err := s.checkSignature(r, body); err != nil {
		writeError(w, http.StatusForbidden, "InvalidSignatureException", "The request signature we calculated does not match the signature you provided: "+err.Error())
		return false
	}
	return true
}

// sendRequest is SendEmail's body, as far as raw sending goes.
type sendRequest struct {
	FromEmailAddress string
	Destination      struct{ ToAddresses []string }
	Content          struct {
		Simple   json.RawMessage
		Template json.RawMessage
		Raw      *struct{ Data []byte } // base64 in JSON
	}
	EmailTags            []struct{ Name, Value string }
	ConfigurationSetName string
}

func (s *Server) handleSend(w http.ResponseWriter, r *http.Request) {
	f := s.faults.Begin("send")
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	if f != nil && answerFault(w, f) {
		return
	}
	if !s.authorized(w, r, body) {
		return
	}
	var req sendRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestException", "body is not JSON: "+err.Error())
		return
	}
	msg, status, typ, problem := s.accept(req)
	if problem != "" {
		writeError(w, status, typ, problem)
		return
	}
	if f != nil { // Cut after sending
		httpprovidertest.HangUp(w)
		return
	}
	httpprovidertest.WriteJSON(w, http.StatusOK, map[string]string{"MessageId": msg.MessageID})
}

// accept checks a SendEmail request as SES would, then its quota, and
// records the message it sends, or returns the error answer.
func (s *Server) accept(req sendRequest) (m Message, status int, typ, problem string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case req.Content.Raw == nil || len(req.Content.Simple) > 0 || len(req.Content.Template) > 0:
		return m, 400, "BadRequestException", "Content must be Raw (sestest takes only raw messages)"
	case len(req.Destination.ToAddresses) == 0:
		return m, 400, "BadRequestException", "Destination has no addresses"
	case req.ConfigurationSetName != "" && !slices.Contains(s.sets, req.ConfigurationSetName):
		return m, 404, "NotFoundException", fmt.Sprintf("Configuration set <%s> does not exist.", req.ConfigurationSetName)
	}
	parsed, err := mail.ReadMessage(bytes.NewReader(req.Content.Raw.Data))
	if err != nil {
		return m, 400, "MessageRejected", "Raw message is not a valid e-mail: " + err.Error()
	}
	from := req.FromEmailAddress
	if from == "" {
		if a, err := mail.ParseAddress(parsed.Header.Get("From")); err == nil {
			from = a.Address
		}
	}
	if from == "" {
		return m, 400, "MessageRejected", "Missing From address"
	}
	var unverified []string
	if !s.isVerified(from) {
		unverified = append(unverified, from)
	}
	if s.sandbox {
		for _, to := range req.Destination.ToAddresses {
			if !s.isVerified(to) {
				unverified = append(unverified, to)
			}
		}
	}
	if len(unverified) > 0 {
		return m, 400, "MessageRejected", fmt.Sprintf("Email address is not verified. The following identities failed the check in region %s: %s",
			strings.ToUpper(s.Region), strings.Join(unverified, ", "))
	}
	id := fmt.Sprintf("0102%s-%s-000000", strings.ToLower(httpprovidertest.RandomHex(8)), httpprovidertest.RandomHex(12))
	m = Message{MessageID: id, From: from, To: slices.Clone(req.Destination.ToAddresses), Raw: req.Content.Raw.Data,
		Header: parsed.Header, Tags: map[string]string{}, ConfigurationSet: req.ConfigurationSetName, ReceivedAt: time.Now()}
	for _, t := range req.EmailTags {
		m.Tags[t.Name] = t.Value
	}
	m.Header["Message-Id"] = []string{"<" + id + "@" + s.Region + ".amazonses.com>"} // SES keeps no Message-ID of ours
	if s.enforced && !s.rate.Take(m.ReceivedAt).OK {
		s.throttled++
		return m, http.StatusTooManyRequests, "TooManyRequestsException", "Maximum sending rate exceeded."
	}
	if s.enforced && s.max24h >= 0 && s.sentSince(m.ReceivedAt.Add(-24*time.Hour))+len(m.To) > s.max24h {
		s.quotaFull++
		return m, http.StatusTooManyRequests, "TooManyRequestsException", "Daily message quota exceeded."
	}
	s.msgs = append(s.msgs, m)
	return m, 0, "", ""
}

// isVerified reports whether an address is, or is under, a verified
// identity; called with s.mu held.
func (s *Server) isVerified(addr string) bool {
	if s.verified == nil {
		return true
	}
	addr = strings.ToLower(addr)
	_, domain, _ := strings.Cut(addr, "@")
	for _, v := range s.verified {
		v = strings.ToLower(v)
		if v == addr || v == domain {
			return true
		}
	}
	return false
}

func (s *Server) handleAccount(w http.ResponseWriter, r *http.Request) {
	if f := s.faults.Begin("account"); f != nil && answerFault(w, f) {
		return
	}
	if !s.authorized(w, r, nil) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	status := "HEALTHY"
	if s.paused {
		status = "SHUTDOWN"
	}
	httpprovidertest.WriteJSON(w, http.StatusOK, map[string]any{
		"SendingEnabled": !s.paused, "ProductionAccessEnabled": !s.sandbox, "EnforcementStatus": status,
		"SendQuota": map[string]float64{"Max24HourSend": float64(s.max24h), "MaxSendRate": s.maxRate,
			"SentLast24Hours": float64(s.sentSince(time.Now().Add(-24 * time.Hour)))},
	})
}
