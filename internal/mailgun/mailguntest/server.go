// Package mailguntest is an HTTP server that speaks the part of
// Mailgun's API that package mailgun uses: POST /v3/<domain>/messages,
// GET /v4/domains/<domain>, and the Events API, GET /v3/<domain>/events
// with its paging links. It records the e-mails it "sends" with an
// accepted event each, and can inject Mailgun's failure modes: error
// answers, connections cut after the request was read (with or without
// the e-mail sent), and events that reach storage late.
//
// It refuses what Mailgun refuses: Basic credentials other than
// api:<key> (401 "Forbidden"), an unknown domain (404), a missing or bad
// from or to (400 with {"message"}), no text and no html, an events
// limit over 300, and a paging link it did not hand out. Mailgun uses a
// custom h:Message-Id as the message's id; so does this server. A rate
// limit (SetRateLimit, off until a test sets it) counts every request
// of the key and answers beyond it 429 with {"message"}; a domain's
// recipient limit (SetRecipientLimit), the one Mailgun puts on new and
// warming domains, answers a message beyond it 420 "Domain <domain> is
// not allowed to send: recipient limit exceeded, try again after
// <RFC 1123 date, UTC>", the time the window lets one more through (as
// its maintainers show it, mailgun/mailgun-java#50). Mailgun has no
// batch endpoint of the kind Resend and Postmark have (one request
// carrying distinct messages): it sends one by one.
//
// It is meant for tests and test binaries, so it does not depend on
// package testing; its methods are safe for concurrent use.
package mailguntest

import (
	"encoding/base64"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/mail"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sekali-dev/sekali/internal/httpprovider/httpprovidertest"
)

// Message is one e-mail the server sent.
type Message struct {
	ID            string // its Message-Id, without angle brackets
	From, To      string
	Subject       string
	Text, HTML    string
	Headers       map[string]string // h: parameters
	UserVariables map[string]string // v: parameters
	SentAt        time.Time
}

// Event is one entry of the Events API.
type Event struct {
	ID        string
	Event     string // accepted, delivered, failed, rejected, …
	MessageID string // message.headers.message-id, without angle brackets
	Recipient string
	Timestamp time.Time
}

// Fault is what the server does with one request instead of, or after,
// handling it.
type Fault struct {
	Status  int    // answer this status …
	Message string // … with {"message"}, or this text when Raw
	Raw     bool
	Cut     bool // read the request and close the connection without an answer
	Sent    bool // with Cut on messages: send first
}

// Server is a running fake Mailgun API.
type Server struct {
	URL    string // for mailgun.Config.BaseURL
	APIKey string
	Domain string

	http   *http.Server
	faults httpprovidertest.Faults[Fault] // by "messages", "events", "domains"
	rate   httpprovidertest.RateLimit
	// recipients is the domain's recipient limit, answered 420.
	recipients httpprovidertest.RateLimit

	mu         sync.Mutex
	eventDelay time.Duration
	msgs       []Message
	events     []Event
	pages      map[string]pageState
}

type pageState struct {
	messageID string
	begin     time.Time
	offset    int
	limit     int
}

// NewServer starts a server for one domain on a loopback port; it panics
// if it cannot listen, as httptest.NewServer does.
func NewServer(domain string) *Server {
	ln, url := httpprovidertest.Listen("mailguntest")
	s := &Server{
		URL:    url,
		APIKey: "key-" + httpprovidertest.RandomHex(16),
		Domain: domain,
		pages:  map[string]pageState{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v3/{domain}/messages", s.handleMessages)
	mux.HandleFunc("GET /v3/{domain}/events", s.handleEvents)
	mux.HandleFunc("GET /v3/{domain}/events/{page}", s.handleEvents)
	mux.HandleFunc("GET /v4/domains/{domain}", s.handleDomain)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { http.NotFound(w, nil) })
	s.http = httpprovidertest.Serve(ln, mux)
	return s
}

// Close stops the server.
func (s *Server) Close() { _ = s.http.Close() }

// FailNext queues faults for the next requests of a kind: "messages",
// "events" or "domains".
func (s *Server) FailNext(kind string, faults ...Fault) { s.faults.Add(kind, faults...) }

// SetEventDelay hides events from the Events API for d after they
// happened.
func (s *Server) SetEventDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.eventDelay = d
}

// AddEvent stores an event (an id and time are made up when empty).
func (s *Server) AddEvent(e Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addEvent(e)
}

func (s *Server) addEvent(e Event) {
	if e.ID == "" {
		e.ID = httpprovidertest.RandomHex(11)
	}
	if e.Timestamp.IsZero() {
		e.Timestamp = time.Now()
	}
	s.events = append(s.events, e)
	slices.SortStableFunc(s.events, func(a, b Event) int { return a.Timestamp.Compare(b.Timestamp) })
}

// Messages returns a copy of the e-mails sent, in order.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Message, len(s.msgs))
	for i, m := range s.msgs {
		m.Headers, m.UserVariables = maps.Clone(m.Headers), maps.Clone(m.UserVariables)
		out[i] = m
	}
	return out
}

// CountByMessageID counts the e-mails sent with a Message-Id.
func (s *Server) CountByMessageID(id string) int {
	n := 0
	for _, m := range s.Messages() {
		if m.ID == strings.Trim(id, "<>") {
			n++
		}
	}
	return n
}

// Requests counts the requests of a kind: "messages", "events", "domains".
func (s *Server) Requests(kind string) int { return s.faults.Requests(kind) }

// SetRateLimit limits the key to n requests per second, every request
// counted, over a sliding window (httpprovidertest.RateLimit); 0 lifts
// it.
func (s *Server) SetRateLimit(n int) { s.rate.Set(n, time.Second) }

// RateLimited counts the requests answered 429.
func (s *Server) RateLimited() int { return s.rate.Refused() }

// SetRecipientLimit limits the domain to n recipients (one a message)
// per window per, over a sliding window; 0 lifts the limit.
func (s *Server) SetRecipientLimit(n int, per time.Duration) { s.recipients.Set(n, per) }

// RecipientLimited counts the messages answered 420.
func (s *Server) RecipientLimited() int { return s.recipients.Refused() }

func answerFault(w http.ResponseWriter, f *Fault) {
	switch {
	case f.Cut:
		httpprovidertest.HangUp(w)
	case f.Raw:
		w.WriteHeader(f.Status)
		_, _ = io.WriteString(w, f.Message)
	default:
		writeError(w, f.Status, f.Message)
	}
}

// authorized checks Basic api:<key>, counts the request against the
// rate limit, and checks the domain.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	user, key, ok := r.BasicAuth()
	if !ok || user != "api" || key != s.APIKey {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, "Forbidden")
		return false
	}
	if !s.rate.Take(time.Now()).OK {
		writeError(w, http.StatusTooManyRequests, "Too many requests")
		return false
	}
	if r.PathValue("domain") != s.Domain {
		writeError(w, http.StatusNotFound, "Domain not found: "+r.PathValue("domain"))
		return false
	}
	return true
}

func (s *Server) handleDomain(w http.ResponseWriter, r *http.Request) {
	if f := s.faults.Begin("domains"); f != nil {
		answerFault(w, f)
		return
	}
	if !s.authorized(w, r) {
		return
	}
	httpprovidertest.WriteJSON(w, http.StatusOK, map[string]any{"domain": map[string]string{"name": s.Domain, "state": "active"}})
}

func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	fault := s.faults.Begin("messages")
	if err := r.ParseMultipartForm(32 << 20); err != nil && !errors.Is(err, http.ErrNotMultipart) {
		writeError(w, http.StatusBadRequest, "cannot read the form: "+err.Error())
		return
	}
	if fault != nil && !(fault.Cut && fault.Sent) {
		answerFault(w, fault)
		return
	}
	if !s.authorized(w, r) {
		return
	}
	f := r.PostForm
	m := Message{From: f.Get("from"), To: f.Get("to"), Subject: f.Get("subject"), Text: f.Get("text"), HTML: f.Get("html"),
		Headers: map[string]string{}, UserVariables: map[string]string{}}
	switch {
	case m.From == "":
		writeError(w, http.StatusBadRequest, "from parameter is missing")
		return
	case !validAddress(m.From):
		writeError(w, http.StatusBadRequest, "'from' parameter is not a valid address. please check documentation")
		return
	case m.To == "":
		writeError(w, http.StatusBadRequest, "to parameter is missing")
		return
	case !validAddress(m.To):
		writeError(w, http.StatusBadRequest, "'to' parameter is not a valid address. please check documentation")
		return
	case m.Text == "" && m.HTML == "":
		writeError(w, http.StatusBadRequest, "Need at least one of 'text', 'html' or 'template' parameters specified")
		return
	}
	for k, v := range f {
		if name, ok := strings.CutPrefix(k, "h:"); ok {
			m.Headers[name] = v[0]
		}
		if name, ok := strings.CutPrefix(k, "v:"); ok {
			m.UserVariables[name] = v[0]
		}
	}
	for k, v := range m.Headers {
		if strings.EqualFold(k, "Message-Id") {
			m.ID = strings.Trim(strings.TrimSpace(v), "<>")
		}
	}
	if m.ID == "" {
		m.ID = time.Now().UTC().Format("20060102150405") + "." + httpprovidertest.RandomHex(6) + "@" + s.Domain
	}
	if v := s.recipients.Take(time.Now()); !v.OK {
		writeError(w, 420, "Domain "+s.Domain+" is not allowed to send: recipient limit exceeded, try again after "+
			time.Now().Add(v.Reset).UTC().Truncate(time.Second).Add(time.Second).Format(time.RFC1123))
		return
	}
	s.mu.Lock()
	m.SentAt = time.Now()
	s.msgs = append(s.msgs, m)
	to, _ := mail.ParseAddress(m.To)
	s.addEvent(Event{Event: "accepted", MessageID: m.ID, Recipient: to.Address, Timestamp: m.SentAt})
	s.mu.Unlock()
	if fault != nil {
		httpprovidertest.HangUp(w)
		return
	}
	httpprovidertest.WriteJSON(w, http.StatusOK, map[string]string{"id": "<" + m.ID + ">", "message": "Queued. Thank you."})
}

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	if f := s.faults.Begin("events"); f != nil {
		answerFault(w, f)
		return
	}
	if !s.authorized(w, r) {
		return
	}
	var st pageState
	if token := r.PathValue("page"); token != "" {
		s.mu.Lock()
		var ok bool
		st, ok = s.pages[token]
		s.mu.Unlock()
		if !ok {
			writeError(w, http.StatusBadRequest, "Invalid page URL")
			return
		}
	} else {
		q := r.URL.Query()
		st.limit = 100
		if l := q.Get("limit"); l != "" {
			n, err := strconv.Atoi(l)
			if err != nil || n < 1 || n > 300 {
				writeError(w, http.StatusBadRequest, "Invalid limit: it must be at most 300")
				return
			}
			st.limit = n
		}
		if q.Get("ascending") != "yes" || q.Get("begin") == "" {
			writeError(w, http.StatusBadRequest, "this server serves ascending=yes with begin only")
			return
		}
		sec, err := strconv.ParseInt(q.Get("begin"), 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, "Invalid begin")
			return
		}
		st.begin = time.Unix(sec, 0)
		st.messageID = strings.Trim(q.Get("message-id"), "<>")
	}
	s.mu.Lock()
	now := time.Now()
	var matched []Event
	for _, e := range s.events {
		if e.Timestamp.Before(st.begin) || now.Sub(e.Timestamp) < s.eventDelay || (st.messageID != "" && e.MessageID != st.messageID) {
			continue
		}
		matched = append(matched, e)
	}
	items := []map[string]any{}
	for i := st.offset; i < len(matched) && i < st.offset+st.limit; i++ {
		e := matched[i]
		items = append(items, map[string]any{
			"id": e.ID, "event": e.Event, "timestamp": float64(e.Timestamp.UnixNano()) / 1e9, "recipient": e.Recipient,
			"message": map[string]any{"headers": map[string]string{"message-id": e.MessageID}},
		})
	}
	next := st
	next.offset += len(items)
	token := httpprovidertest.RandomHex(12)
	s.pages[token] = next
	s.mu.Unlock()
	base := s.URL + "/v3/" + s.Domain + "/events/"
	httpprovidertest.WriteJSON(w, http.StatusOK, map[string]any{"items": items, "paging": map[string]string{
		"next": base + token, "previous": base + base64.RawURLEncoding.EncodeToString([]byte("previous")),
	}})
}

func validAddress(s string) bool {
	a, err := mail.ParseAddress(s)
	return err == nil && strings.Contains(a.Address, "@")
}

// writeError answers Mailgun's error shape, {"message"}.
func writeError(w http.ResponseWriter, status int, message string) {
	httpprovidertest.WriteJSON(w, status, map[string]string{"message": message})
}
