// Package resendtest is an HTTP server that speaks the part of Resend's
// API that package resend uses, records the e-mails it "sends", and can
// inject Resend's failure modes: error answers, connections cut after
// the request was read (with or without the e-mail sent), and requests
// held in flight. It deduplicates by Idempotency-Key as Resend
// documents (https://resend.com/docs/dashboard/emails/idempotency-keys):
// the same key with the same body within 24 hours gets the first answer
// and sends nothing; another body gets 409 invalid_idempotent_request; a
// request while the first is in flight gets 409
// concurrent_idempotent_requests.
//
// It refuses what Resend refuses: no or a wrong API key, a key over 256
// characters, a body that is not a JSON object, a missing from, to or
// subject, no html and no text, addresses that are not
// "a@b" or "Name <a@b>", more than 50 recipients, headers that are not
// strings, tags outside [A-Za-z0-9_-] or over 256 characters, a from
// domain that is not verified (when VerifiedDomains is set). Errors have
// Resend's shape: {"statusCode", "name", "message"}.
//
// It is meant for tests and test binaries (internal/chaos), so it does
// not depend on package testing; its methods are safe for concurrent use.
package resendtest

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/mail"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/httpprovider/httpprovidertest"
)

// Message is one e-mail the server sent (answered 200 to, or processed
// before cutting the connection).
type Message struct {
	ID             string // the id it answered, a UUID
	From           string
	ReplyTo        []string // reply_to: one address or several
	To             []string
	Subject        string
	HTML           string
	Text           string
	Headers        map[string]string
	Tags           map[string]string
	IdempotencyKey string // the header as received, "" without one
	MessageID      string // the Message-ID header without angle brackets
	SentAt         time.Time
}

// Fault is what the server does with one POST /emails instead of, or
// after, handling it.
type Fault struct {
	// Status, Name, Message: answer this error; with Sent, after sending
	// the e-mail and storing its key with the answer it would have had
	// (Resend took it and its answer was lost to a server error on the
	// way back: a retry under the key gets the first answer), otherwise
	// sending nothing.
	Status  int
	Name    string
	Message string
	// Cut: read the request and close the connection without an answer;
	// Sent says whether the e-mail was sent (and its key stored) first.
	Cut  bool
	Sent bool
}

// Server is a running fake Resend API.
type Server struct {
	URL            string // e.g. http://127.0.0.1:38421, for resend.Config.BaseURL
	APIKey         string // a full-access key
	SendingOnlyKey string // a key that can only send: GET /domains answers restricted_api_key

	http *http.Server
	done chan struct{}

	mu       sync.Mutex
	now      func() time.Time
	verified []string // from domains accepted; nil: all
	faults   []Fault
	outage   *Fault
	holds    []hold
	keys     map[string]*keyEntry
	msgs     []Message
	requests int
	closed   bool
}

type keyEntry struct {
	body     [32]byte
	inFlight bool
	answer   []byte
	at       time.Time
}

type hold struct {
	arrived chan struct{}
	release chan struct{}
}

// keyWindow is how long a key is kept.
const keyWindow = 24 * time.Hour

// NewServer starts a server on a loopback port; it panics if it cannot
// listen, as httptest.NewServer does.
func NewServer() *Server {
	ln, url := httpprovidertest.Listen("resendtest")
	s := &Server{
		URL:            url,
		APIKey:         "re_full_" + httpprovidertest.RandomHex(12),
		SendingOnlyKey: "re_send_" + httpprovidertest.RandomHex(12),
		done:           make(chan struct{}),
		now:            time.Now,
		keys:           map[string]*keyEntry{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/emails", s.handleEmails)
	mux.HandleFunc("/domains", s.handleDomains)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "The requested endpoint does not exist.")
	})
	s.http = httpprovidertest.Serve(ln, mux)
	return s
}

// Close stops the server; held requests are released first.
func (s *Server) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	s.mu.Unlock()
	_ = s.http.Close()
}

// SetNow replaces the clock that expires idempotency keys.
func (s *Server) SetNow(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
}

// SetVerifiedDomains limits the from domains accepted; none: all.
func (s *Server) SetVerifiedDomains(domains ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.verified = slices.Clone(domains)
}

// FailNext queues faults for the next POST /emails requests, in order.
func (s *Server) FailNext(faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, faults...)
}

// SetOutage makes every POST /emails meet f (after its key is checked,
// as FailNext's faults do), and GET /domains answer f's error, until
// SetOutage(nil): Resend down, or throttling, for as long as a test
// needs.
func (s *Server) SetOutage(f *Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outage = f
}

// HoldNext makes the next POST /emails that claims an idempotency key
// wait, in flight, until release is called (or the server closes).
// arrived is closed once it waits.
func (s *Server) HoldNext() (arrived <-chan struct{}, release func()) {
	h := hold{arrived: make(chan struct{}), release: make(chan struct{})}
	s.mu.Lock()
	s.holds = append(s.holds, h)
	s.mu.Unlock()
	var once sync.Once
	return h.arrived, func() { once.Do(func() { close(h.release) }) }
}

// Messages returns a copy of the e-mails sent, in order.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Message, len(s.msgs))
	for i, m := range s.msgs {
		out[i] = m.clone()
	}
	return out
}

// CountByIdempotencyKey counts the e-mails sent under an
// Idempotency-Key header value.
func (s *Server) CountByIdempotencyKey(key string) int {
	return s.count(func(m Message) bool { return m.IdempotencyKey == key })
}

// CountByMessageID counts the e-mails sent with a Message-ID (with or
// without angle brackets).
func (s *Server) CountByMessageID(id string) int {
	id = strings.Trim(id, "<>")
	return s.count(func(m Message) bool { return m.MessageID == id })
}

// Requests counts the POST /emails requests received, answered or not.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

func (s *Server) count(match func(Message) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.msgs {
		if match(m) {
			n++
		}
	}
	return n
}

func (m Message) clone() Message {
	m.To = slices.Clone(m.To)
	h := make(map[string]string, len(m.Headers))
	for k, v := range m.Headers {
		h[k] = v
	}
	m.Headers = h
	t := make(map[string]string, len(m.Tags))
	for k, v := range m.Tags {
		t[k] = v
	}
	m.Tags = t
	return m
}

// auth checks the bearer key; sending tells whether the endpoint sends.
func (s *Server) auth(w http.ResponseWriter, r *http.Request, sending bool) (sendingOnly, ok bool) {
	h := r.Header.Get("Authorization")
	key, found := strings.CutPrefix(h, "Bearer ")
	switch {
	case h == "" || !found || key == "":
		writeError(w, http.StatusUnauthorized, "missing_api_key", "Missing API key in the authorization header.")
		return false, false
	case key == s.APIKey:
		return false, true
	case key == s.SendingOnlyKey:
		return true, true
	case sending:
		writeError(w, http.StatusUnauthorized, "validation_error", "API key is invalid")
	default:
		writeError(w, http.StatusBadRequest, "validation_error", "API key is invalid")
	}
	return false, false
}

func (s *Server) handleDomains(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "Method is not allowed for the requested path.")
		return
	}
	sendingOnly, ok := s.auth(w, r, false)
	if !ok {
		return
	}
	s.mu.Lock()
	outage := s.outage
	domains := slices.Clone(s.verified)
	s.mu.Unlock()
	if outage != nil && !outage.Cut {
		writeError(w, outage.Status, outage.Name, outage.Message)
		return
	}
	if sendingOnly {
		writeError(w, http.StatusUnauthorized, "restricted_api_key", "This API key is restricted to only send emails.")
		return
	}
	data := []map[string]string{}
	for _, d := range domains {
		data = append(data, map[string]string{"name": d, "status": "verified"})
	}
	httpprovidertest.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (s *Server) handleEmails(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "Method is not allowed for the requested path.")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 41<<20))
	s.mu.Lock()
	s.requests++
	s.mu.Unlock()
	if err != nil {
		return // the client went away mid-body: nothing to answer
	}
	if _, ok := s.auth(w, r, true); !ok {
		return
	}
	key, hasKey := r.Header.Get("Idempotency-Key"), len(r.Header.Values("Idempotency-Key")) > 0
	if hasKey && (len(key) < 1 || len(key) > 256) {
		writeError(w, http.StatusBadRequest, "invalid_idempotency_key", "Idempotency keys, if present, must have between 1 and 256 characters.")
		return
	}
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil || req == nil {
		writeError(w, http.StatusBadRequest, "validation_error", "The request body is not a JSON object.")
		return
	}
	canon := canonical(req)

	// Idempotency: answer from the stored key, or claim it.
	var entry *keyEntry
	if hasKey {
		s.mu.Lock()
		now := s.now()
		e := s.keys[key]
		if e != nil && now.Sub(e.at) >= keyWindow && !e.inFlight {
			delete(s.keys, key)
			e = nil
		}
		switch {
		case e != nil && e.inFlight:
			s.mu.Unlock()
			writeError(w, http.StatusConflict, "concurrent_idempotent_requests", "There is another request in progress with the same idempotency key.")
			return
		case e != nil && e.body != canon:
			s.mu.Unlock()
			writeError(w, http.StatusConflict, "invalid_idempotent_request", "This idempotency key has been used with this HTTP method and endpoint within the last 24 hours, but the request body was modified and doesn't match the original request.")
			return
		case e != nil:
			answer := e.answer
			s.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(answer)
			return
		}
		entry = &keyEntry{body: canon, inFlight: true, at: now}
		s.keys[key] = entry
		s.mu.Unlock()
	}
	// settle ends the claim on the key: kept if the e-mail was sent,
	// dropped if not. A written answer leaves when the handler returns,
	// after the deferred settle; a hang-up is at once, so settle runs
	// before it: a resend right after must find the key settled, not in
	// flight.
	sent, settled := false, false
	settle := func() {
		if entry == nil || settled {
			return
		}
		settled = true
		s.mu.Lock()
		defer s.mu.Unlock()
		if sent {
			entry.inFlight = false
		} else {
			delete(s.keys, key)
		}
	}
	defer settle()

	msg, status, name, text := s.validate(req)
	if status != 0 {
		writeError(w, status, name, text)
		return
	}
	msg.IdempotencyKey = key
	if hasKey && !s.wait() {
		return
	}

	s.mu.Lock()
	var fault *Fault
	switch {
	case s.outage != nil:
		f := *s.outage
		fault = &f
	case len(s.faults) > 0:
		f := s.faults[0]
		s.faults = s.faults[1:]
		fault = &f
	}
	s.mu.Unlock()
	if fault != nil && !fault.Cut {
		if fault.Sent {
			s.send(msg, entry)
			sent = true
		}
		writeError(w, fault.Status, fault.Name, fault.Message)
		return
	}
	if fault == nil || fault.Sent {
		answer := s.send(msg, entry)
		sent = true
		if fault == nil {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(answer)
			return
		}
	}
	settle()
	httpprovidertest.HangUp(w)
}

// wait holds a request claimed under a key when HoldNext asked for it.
// It reports false when the server closed meanwhile.
func (s *Server) wait() bool {
	s.mu.Lock()
	if len(s.holds) == 0 {
		s.mu.Unlock()
		return true
	}
	h := s.holds[0]
	s.holds = s.holds[1:]
	s.mu.Unlock()
	close(h.arrived)
	select {
	case <-h.release:
		return true
	case <-s.done:
		return false
	}
}

// send records msg as sent and stores the answer under its key.
func (s *Server) send(msg Message, entry *keyEntry) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	msg.ID = uuid.NewString()
	msg.SentAt = s.now()
	s.msgs = append(s.msgs, msg)
	answer, _ := json.Marshal(map[string]string{"id": msg.ID})
	if entry != nil {
		entry.answer = answer
	}
	return answer
}

// validate checks a POST /emails body as Resend does.
func (s *Server) validate(req map[string]json.RawMessage) (m Message, status int, name, text string) {
	for _, f := range []string{"from", "to", "subject"} {
		if _, ok := req[f]; !ok {
			return m, http.StatusUnprocessableEntity, "missing_required_field", fmt.Sprintf("Missing `%s` field.", f)
		}
	}
	if json.Unmarshal(req["from"], &m.From) != nil || !validAddress(m.From) {
		return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `from` field. The email address needs to follow the `email@example.com` or `Name <email@example.com>` format."
	}
	var one string
	if json.Unmarshal(req["to"], &one) == nil {
		m.To = []string{one}
	} else if json.Unmarshal(req["to"], &m.To) != nil {
		return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `to` field. The email address needs to follow the `email@example.com` or `Name <email@example.com>` format."
	}
	if len(m.To) == 0 || len(m.To) > 50 {
		return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `to` field. Between 1 and 50 recipients are allowed."
	}
	for _, to := range m.To {
		if !validAddress(to) {
			return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `to` field. The email address needs to follow the `email@example.com` or `Name <email@example.com>` format."
		}
	}
	if json.Unmarshal(req["subject"], &m.Subject) != nil {
		return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `subject` field: want a string."
	}
	_, hasHTML := req["html"]
	_, hasText := req["text"]
	if !hasHTML && !hasText {
		return m, http.StatusUnprocessableEntity, "missing_required_field", "Missing `html` or `text` field."
	}
	if hasHTML && json.Unmarshal(req["html"], &m.HTML) != nil {
		return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `html` field: want a string."
	}
	if hasText && json.Unmarshal(req["text"], &m.Text) != nil {
		return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `text` field: want a string."
	}
	if raw, ok := req["reply_to"]; ok {
		var one string
		if json.Unmarshal(raw, &one) == nil {
			m.ReplyTo = []string{one}
		} else if json.Unmarshal(raw, &m.ReplyTo) != nil {
			return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `reply_to` field: want an address or a list of addresses."
		}
		for _, a := range m.ReplyTo {
			if !validAddress(a) {
				return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `reply_to` field. The email address needs to follow the `email@example.com` or `Name <email@example.com>` format."
			}
		}
	}
	if raw, ok := req["headers"]; ok && json.Unmarshal(raw, &m.Headers) != nil {
		return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `headers` field: want an object of strings."
	}
	if raw, ok := req["tags"]; ok {
		var tags []struct {
			Name  *string `json:"name"`
			Value *string `json:"value"`
		}
		if json.Unmarshal(raw, &tags) != nil {
			return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `tags` field: want an array of {name, value}."
		}
		m.Tags = map[string]string{}
		for _, t := range tags {
			if t.Name == nil || t.Value == nil || !validTag(*t.Name) || !validTag(*t.Value) {
				return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `tags` field: names and values may only contain ASCII letters, numbers, underscores and dashes, at most 256 characters."
			}
			m.Tags[*t.Name] = *t.Value
		}
	}
	for k, v := range m.Headers {
		if strings.EqualFold(k, "Message-ID") {
			m.MessageID = strings.Trim(strings.TrimSpace(v), "<>")
		}
	}
	s.mu.Lock()
	verified := slices.Clone(s.verified)
	s.mu.Unlock()
	if verified != nil {
		a, _ := mail.ParseAddress(m.From)
		domain := a.Address[strings.LastIndexByte(a.Address, '@')+1:]
		if !slices.Contains(verified, strings.ToLower(domain)) {
			return m, http.StatusForbidden, "validation_error", fmt.Sprintf("The %s domain is not verified. Please, add and verify your domain.", domain)
		}
	}
	return m, 0, "", ""
}

// validAddress accepts "a@b" and "Name <a@b>".
func validAddress(s string) bool {
	a, err := mail.ParseAddress(s)
	return err == nil && strings.Contains(a.Address, "@")
}

func validTag(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// canonical hashes a JSON object independently of key order and
// whitespace: what "the same request body" means here.
func canonical(req map[string]json.RawMessage) [32]byte {
	var v any
	raw, _ := json.Marshal(req)
	_ = json.Unmarshal(raw, &v)
	b, _ := json.Marshal(v) // encoding/json sorts map keys
	return sha256.Sum256(b)
}

func writeError(w http.ResponseWriter, status int, name, message string) {
	httpprovidertest.WriteJSON(w, status, map[string]any{"statusCode": status, "name": name, "message": message})
}
