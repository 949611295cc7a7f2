// Package postmarktest is an HTTP server that speaks the part of
// Postmark's API that package postmark uses: POST /email, POST
// /email/batch, GET /server and the outbound message search, GET
// /messages/outbound. It records the e-mails it "sends", answers
// searches from them, and can inject Postmark's failure modes: error
// answers, connections cut after the request was read (with or without
// the e-mails sent), a delay before a sent message can be found, and a
// rate limit (SetRateLimit, off until a test sets it) beyond which it
// answers 429, as Postmark documents, with no header saying how long to
// wait: Postmark documents none.
//
// A batch (https://postmarkapp.com/developer/user-guide/send-email-with-api/batch-emails)
// is an array of up to 500 messages, each checked as POST /email checks
// one; it is answered 200 with one result per message, in order: {"To",
// "SubmittedAt", "MessageID", "ErrorCode": 0, "Message": "OK"} for a
// message sent, {"ErrorCode", "Message"} for one refused (an inactive
// recipient, 406), the others sent all the same. More than 500 is
// refused whole (422, ErrorCode 410).
//
// It refuses what Postmark refuses (https://postmarkapp.com/developer/api/overview):
// a missing or wrong X-Postmark-Server-Token (401, ErrorCode 10), no
// Accept or Content-Type application/json (ErrorCode 409), a body that is
// not JSON (402), a From without a sender signature (400), a bad To
// (300), no TextBody and no HtmlBody (300), a message stream that does
// not exist, an inactive recipient (406), headers that are not
// [{Name, Value}], metadata that is not an object of strings, and a
// search without count and offset, with count over 500 or count+offset
// over 10,000, or with more than one metadata filter. Its metadata
// filter matches substrings, which Postmark does not promise not to do:
// a client must check what it finds.
//
// It is meant for tests and test binaries, so it does not depend on
// package testing; its methods are safe for concurrent use.
package postmarktest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/mail"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/httpprovider/httpprovidertest"
)

// Message is one e-mail the server holds.
type Message struct {
	MessageID     string // Postmark's id, a UUID
	From          string
	ReplyTo       string
	To            string
	Subject       string
	HTMLBody      string
	TextBody      string
	Headers       map[string]string
	Metadata      map[string]string
	MessageStream string
	Status        string // "Sent"
	ReceivedAt    time.Time
}

// Fault is what the server does with one request to a path instead of,
// or after, handling it.
type Fault struct {
	Status    int    // answer this status …
	ErrorCode int    // … with {"ErrorCode", "Message"} …
	Message   string //
	Body      string // … or with this body instead (an HTML error page, say)
	Cut       bool   // read the request and close the connection without an answer
	Sent      bool   // with Cut on /email: send the e-mail first
}

// Server is a running fake Postmark API.
type Server struct {
	URL   string // for postmark.Config.BaseURL
	Token string // the server token

	http   *http.Server
	faults httpprovidertest.Faults[Fault] // by path
	rate   httpprovidertest.RateLimit

	mu          sync.Mutex
	senders     []string // From addresses or domains with a signature; nil: all
	streams     []string
	inactive    map[string]bool
	searchDelay time.Duration
	msgs        []Message
}

// NewServer starts a server on a loopback port; it panics if it cannot
// listen, as httptest.NewServer does.
func NewServer() *Server {
	ln, url := httpprovidertest.Listen("postmarktest")
	s := &Server{
		URL:      url,
		Token:    httpprovidertest.RandomHex(16),
		streams:  []string{"outbound"},
		inactive: map[string]bool{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /email", s.handleEmail)
	mux.HandleFunc("POST /email/batch", s.handleBatch)
	mux.HandleFunc("GET /server", s.handleServer)
	mux.HandleFunc("GET /messages/outbound", s.handleSearch)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		httpprovidertest.WriteJSON(w, http.StatusNotFound, map[string]any{"ErrorCode": 0, "Message": "Entity doesn't exist"})
	})
	s.http = httpprovidertest.Serve(ln, mux)
	return s
}

// Close stops the server.
func (s *Server) Close() { _ = s.http.Close() }

// SetSenderSignatures limits the From addresses accepted to these
// addresses or domains; none: all.
func (s *Server) SetSenderSignatures(senders ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.senders = slices.Clone(senders)
}

// AddStream adds a message stream besides "outbound".
func (s *Server) AddStream(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streams = append(s.streams, id)
}

// Deactivate marks a recipient inactive (a hard bounce or complaint).
func (s *Server) Deactivate(email string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inactive[strings.ToLower(email)] = true
}

// SetSearchDelay hides sent messages from searches for d after they
// were received.
func (s *Server) SetSearchDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.searchDelay = d
}

// FailNext queues faults for the next requests to path ("/email",
// "/email/batch", "/messages/outbound", "/server"), in order; Sent on
// "/email/batch" sends the whole batch.
func (s *Server) FailNext(path string, faults ...Fault) { s.faults.Add(path, faults...) }

// Add stores a message as if it had been sent at m.ReceivedAt (now when
// zero); it returns the message's id.
func (s *Server) Add(m Message) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.MessageID == "" {
		m.MessageID = uuid.NewString()
	}
	if m.ReceivedAt.IsZero() {
		m.ReceivedAt = time.Now()
	}
	if m.MessageStream == "" {
		m.MessageStream = "outbound"
	}
	if m.Status == "" {
		m.Status = "Sent"
	}
	s.msgs = append(s.msgs, m)
	return m.MessageID
}

// Messages returns a copy of the e-mails held, in the order received.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Message, len(s.msgs))
	for i, m := range s.msgs {
		m.Headers, m.Metadata = maps.Clone(m.Headers), maps.Clone(m.Metadata)
		out[i] = m
	}
	return out
}

// CountByMetadata counts the e-mails whose metadata key has value.
func (s *Server) CountByMetadata(key, value string) int {
	n := 0
	for _, m := range s.Messages() {
		if m.Metadata[key] == value {
			n++
		}
	}
	return n
}

// Requests counts the requests received on a path, answered or not.
func (s *Server) Requests(path string) int { return s.faults.Requests(path) }

// SetRateLimit limits the server's token to n requests per second,
// every request counted (a batch is one), over a sliding window
// (httpprovidertest.RateLimit); 0 lifts it.
func (s *Server) SetRateLimit(n int) { s.rate.Set(n, time.Second) }

// RateLimited counts the requests answered 429.
func (s *Server) RateLimited() int { return s.rate.Refused() }

// answerFault answers f; it reports false for a Cut that sends first.
func answerFault(w http.ResponseWriter, f *Fault) bool {
	switch {
	case f.Cut && f.Sent:
		return false
	case f.Cut:
		httpprovidertest.HangUp(w)
	case f.Body != "":
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(f.Status)
		_, _ = io.WriteString(w, f.Body)
	default:
		writeError(w, f.Status, f.ErrorCode, f.Message)
	}
	return true
}

// authorized checks the token and the Accept header, then counts the
// request against the rate limit.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	if r.Header.Get("X-Postmark-Server-Token") != s.Token {
		writeError(w, http.StatusUnauthorized, 10, "The Server Token you provided in the X-Postmark-Server-Token request header was invalid. Please verify that you are using a valid token.")
		return false
	}
	if !strings.HasPrefix(r.Header.Get("Accept"), "application/json") {
		writeError(w, http.StatusUnprocessableEntity, 409, "JSON required: set the Accept and Content-Type headers to application/json.")
		return false
	}
	if !s.rate.Take(time.Now()).OK {
		writeError(w, http.StatusTooManyRequests, 429, "Rate limit exceeded: you have made too many requests, slow down.")
		return false
	}
	return true
}

func (s *Server) handleServer(w http.ResponseWriter, r *http.Request) {
	if f := s.faults.Begin("/server"); f != nil {
		answerFault(w, f)
		return
	}
	if !s.authorized(w, r) {
		return
	}
	httpprovidertest.WriteJSON(w, http.StatusOK, map[string]any{"ID": 1, "Name": "sekali test server", "DeliveryType": "Live"})
}

func (s *Server) handleEmail(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 10<<20+1))
	fault := s.faults.Begin("/email")
	if err != nil {
		return
	}
	if fault != nil && answerFault(w, fault) {
		return
	}
	if !s.authorized(w, r) {
		return
	}
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		writeError(w, http.StatusUnprocessableEntity, 409, "JSON required: set the Accept and Content-Type headers to application/json.")
		return
	}
	if len(body) > 10<<20 {
		httpprovidertest.WriteJSON(w, http.StatusRequestEntityTooLarge, map[string]any{"ErrorCode": 0, "Message": "Payload Too Large"})
		return
	}
	m, code, text := s.validate(body)
	if code != 0 {
		writeError(w, http.StatusUnprocessableEntity, code, text)
		return
	}
	id := s.Add(m)
	if fault != nil { // Cut after sending
		httpprovidertest.HangUp(w)
		return
	}
	httpprovidertest.WriteJSON(w, http.StatusOK, sentAnswer(m, id))
}

// sentAnswer is Postmark's answer for a message it took.
func sentAnswer(m Message, id string) map[string]any {
	return map[string]any{"To": m.To, "SubmittedAt": time.Now().Format(time.RFC3339Nano), "MessageID": id, "ErrorCode": 0, "Message": "OK"}
}

// MaxBatch is the most messages POST /email/batch takes.
const MaxBatch = 500

func (s *Server) handleBatch(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 50<<20+1))
	fault := s.faults.Begin("/email/batch")
	if err != nil {
		return
	}
	if fault != nil && answerFault(w, fault) {
		return
	}
	if !s.authorized(w, r) {
		return
	}
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		writeError(w, http.StatusUnprocessableEntity, 409, "JSON required: set the Accept and Content-Type headers to application/json.")
		return
	}
	if len(body) > 50<<20 {
		httpprovidertest.WriteJSON(w, http.StatusRequestEntityTooLarge, map[string]any{"ErrorCode": 0, "Message": "Payload Too Large"})
		return
	}
	var items []json.RawMessage
	if err := json.Unmarshal(body, &items); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			writeError(w, http.StatusUnprocessableEntity, 403, "Incompatible JSON: a batch is an array of messages.")
			return
		}
		writeError(w, http.StatusUnprocessableEntity, 402, "Invalid JSON: "+err.Error())
		return
	}
	if len(items) > MaxBatch {
		writeError(w, http.StatusUnprocessableEntity, 410, fmt.Sprintf("Too many batch messages: %d, at most %d are allowed.", len(items), MaxBatch))
		return
	}
	results := make([]map[string]any, len(items))
	for i, raw := range items {
		m, code, text := s.validate(raw)
		if code != 0 {
			results[i] = map[string]any{"ErrorCode": code, "Message": text}
			continue
		}
		results[i] = sentAnswer(m, s.Add(m))
	}
	if fault != nil { // Cut after sending
		httpprovidertest.HangUp(w)
		return
	}
	httpprovidertest.WriteJSON(w, http.StatusOK, results)
}

func (s *Server) validate(body []byte) (Message, int, string) {
	var req struct {
		From, ReplyTo, To, Subject, HtmlBody, TextBody, MessageStream *string
		Headers                                                       []struct{ Name, Value *string }
		Metadata                                                      map[string]string
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return Message{}, 403, "Incompatible JSON: " + err.Error()
		}
		return Message{}, 402, "Invalid JSON: " + err.Error()
	}
	var m Message
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	m.From, m.To, m.Subject, m.HTMLBody, m.TextBody = str(req.From), str(req.To), str(req.Subject), str(req.HtmlBody), str(req.TextBody)
	m.MessageStream = str(req.MessageStream)
	m.ReplyTo = str(req.ReplyTo)
	if m.ReplyTo != "" {
		if _, err := mail.ParseAddress(m.ReplyTo); err != nil {
			return m, 300, fmt.Sprintf("Error parsing 'ReplyTo': Illegal email address '%s'.", m.ReplyTo)
		}
	}
	if m.MessageStream == "" {
		m.MessageStream = "outbound"
	}
	from, err := mail.ParseAddress(m.From)
	if err != nil {
		return m, 300, fmt.Sprintf("Error parsing 'From': Illegal email address '%s'.", m.From)
	}
	to, err := mail.ParseAddress(m.To)
	if err != nil || !strings.Contains(to.Address, "@") {
		return m, 300, fmt.Sprintf("Error parsing 'To': Illegal email address '%s'. It must contain the '@' symbol.", m.To)
	}
	if m.HTMLBody == "" && m.TextBody == "" {
		return m, 300, "Provide either email TextBody or HtmlBody or both."
	}
	m.Headers = map[string]string{}
	for _, h := range req.Headers {
		if h.Name == nil || h.Value == nil || *h.Name == "" {
			return m, 300, "Invalid 'Headers': each header needs a Name and a Value."
		}
		m.Headers[*h.Name] = *h.Value
	}
	m.Metadata = req.Metadata
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Contains(s.streams, m.MessageStream) {
		return m, 1235, fmt.Sprintf("The message stream for the provided 'MessageStream' (%s) was not found.", m.MessageStream)
	}
	if s.senders != nil {
		addr := strings.ToLower(from.Address)
		if !slices.Contains(s.senders, addr) && !slices.Contains(s.senders, addr[strings.LastIndexByte(addr, '@')+1:]) {
			return m, 400, fmt.Sprintf("The 'From' address you supplied (%s) is not a Sender Signature on your account.", m.From)
		}
	}
	if s.inactive[strings.ToLower(to.Address)] {
		return m, 406, "You tried to send to recipient(s) that have been marked as inactive. Found inactive addresses: " + to.Address + "."
	}
	return m, 0, ""
}

func (s *Server) handleSearch(w http.ResponseWriter, r *http.Request) {
	if f := s.faults.Begin("/messages/outbound"); f != nil {
		answerFault(w, f)
		return
	}
	if !s.authorized(w, r) {
		return
	}
	q := r.URL.Query()
	count, err1 := strconv.Atoi(q.Get("count"))
	offset, err2 := strconv.Atoi(q.Get("offset"))
	if err1 != nil || err2 != nil || count < 1 || count > 500 || offset < 0 || count+offset > 10000 {
		writeError(w, http.StatusUnprocessableEntity, 0, "count (1 to 500) and offset are required, and count + offset cannot exceed 10,000.")
		return
	}
	stream := q.Get("messagestream")
	if stream == "" {
		stream = "outbound"
	}
	var metaKey, metaValue string
	for k, v := range q {
		if name, ok := strings.CutPrefix(k, "metadata_"); ok {
			if metaKey != "" {
				writeError(w, http.StatusUnprocessableEntity, 0, "Only one metadata field can be searched at a time.")
				return
			}
			metaKey, metaValue = name, v[0]
		}
	}
	recipient := strings.ToLower(q.Get("recipient"))
	now := time.Now()
	var matched []Message
	for _, m := range slices.Backward(s.Messages()) { // newest first
		switch {
		case m.MessageStream != stream,
			now.Sub(m.ReceivedAt) < s.delay(),
			metaKey != "" && !strings.Contains(strings.ToLower(m.Metadata[metaKey]), strings.ToLower(metaValue)),
			recipient != "" && !strings.EqualFold(m.To, recipient):
			continue
		}
		matched = append(matched, m)
	}
	page := []map[string]any{}
	for i := offset; i < len(matched) && i < offset+count; i++ {
		m := matched[i]
		page = append(page, map[string]any{
			"MessageID": m.MessageID, "MessageStream": m.MessageStream, "Status": m.Status, "Metadata": m.Metadata,
			"Recipients": []string{m.To}, "To": []map[string]string{{"Email": m.To, "Name": ""}}, "From": m.From,
			"Subject": m.Subject, "ReceivedAt": m.ReceivedAt.Format(time.RFC3339Nano), "Tag": "", "Cc": []any{}, "Bcc": []any{},
		})
	}
	httpprovidertest.WriteJSON(w, http.StatusOK, map[string]any{"TotalCount": len(matched), "Messages": page})
}

func (s *Server) delay() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.searchDelay
}

func writeError(w http.ResponseWriter, status, code int, message string) {
	httpprovidertest.WriteJSON(w, status, map[string]any{"ErrorCode": code, "Message": message})
}
