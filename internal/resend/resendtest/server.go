// Package resendtest is an HTTP server that speaks the part of Resend's
// API that package resend uses (POST /emails, POST /emails/batch, GET
// /domains), records the e-mails it "sends", and can inject Resend's
// failure modes: error answers, connections cut after the request was
// read (with or without the e-mails sent), and requests held in flight.
// It deduplicates by Idempotency-Key as Resend documents
// (https://resend.com/docs/dashboard/emails/idempotency-keys), per
// endpoint: the same key with the same body within 24 hours gets the
// first answer and sends nothing; another body gets 409
// invalid_idempotent_request; a request while the first is in flight
// gets 409 concurrent_idempotent_requests.
//
// It refuses what Resend refuses: no or a wrong API key, a key over 256
// characters, a body that is not a JSON object (an array of them for a
// batch), a missing from, to or subject, no html and no text, addresses
// that are not "a@b" or "Name <a@b>", more than 50 recipients, headers
// that are not strings, tags outside [A-Za-z0-9_-] or over 256
// characters, a from domain that is not verified (when VerifiedDomains
// is set), recipients a test names (RefuseRecipients: Resend's checks of
// an address are its own, not ours), and in a batch more than 100 e-mails
// or an e-mail with attachments or scheduled_at, which the batch
// endpoint does not take. Errors have Resend's shape: {"statusCode",
// "name", "message"}.
//
// Its limits are Resend's, each off until a test sets it: a rate limit
// shared by every request of the team (SetRateLimit), beyond which it
// answers 429 rate_limit_exceeded with retry-after, and a daily quota of
// e-mails (SetDailyQuota), beyond which it answers 429
// daily_quota_exceeded. While a rate limit is set, every answer to a
// request it counted carries ratelimit-limit, ratelimit-remaining and
// ratelimit-reset (https://resend.com/docs/api-reference/rate-limit).
//
// It is meant for tests and test binaries (internal/chaos), so it does
// not depend on package testing; its methods are safe for concurrent use.
package resendtest

import (
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

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
	IdempotencyKey string // the request's header as received, "" without one: a batch's for its e-mails
	MessageID      string // the Message-ID header without angle brackets
	Batched        bool   // sent by POST /emails/batch
	SentAt         time.Time
}

// Fault is what the server does with one sending request (POST /emails,
// or POST /emails/batch for BatchFailNext's) instead of, or after,
// handling it.
type Fault struct {
	// Status, Name, Message: answer this error; with Sent, after sending
	// the e-mails and storing the key with the answer it would have had
	// (Resend took them and its answer was lost to a server error on
	// the way back: a retry under the key gets the first answer),
	// otherwise sending nothing.
	Status  int
	Name    string
	Message string
	// Cut: read the request and close the connection without an answer;
	// Sent says whether the e-mails were sent (and the key stored) first.
	Cut  bool
	Sent bool
}

// Counts are the requests the server received.
type Counts struct {
	Emails        int // POST /emails, answered or not
	Batches       int // POST /emails/batch, answered or not
	Domains       int // GET /domains (the probe)
	RateLimited   int // answered 429 rate_limit_exceeded
	QuotaExceeded int // answered 429 daily_quota_exceeded
}

// Arrival is one request the rate limit counted (SetRateLimit): when it
// came, and whether it was refused for rate.
type Arrival struct {
	At      time.Time
	Refused bool
}

// Server is a running fake Resend API.
type Server struct {
	URL            string // e.g. http://127.0.0.1:38421, for resend.Config.BaseURL
	APIKey         string // a full-access key
	SendingOnlyKey string // a key that can only send: GET /domains answers restricted_api_key

	http *http.Server
	done chan struct{}
	rate httpprovidertest.RateLimit

	mu          sync.Mutex
	now         func() time.Time
	verified    []string        // from domains accepted; nil: all
	refused     map[string]bool // recipients refused as an invalid to
	dailyQuota  int
	faults      []Fault
	batchFaults []Fault
	outage      *Fault
	holds       []hold
	keys        map[string]*keyEntry // by endpoint and key
	msgs        []Message
	counts      Counts
	arrivals    []Arrival
	closed      bool
}

type keyEntry struct {
	id       string // the endpoint and the key
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

// MaxBatch is the most e-mails POST /emails/batch takes.
const MaxBatch = 100

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
		refused:        map[string]bool{},
		keys:           map[string]*keyEntry{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/emails", func(w http.ResponseWriter, r *http.Request) { s.handleSend(w, r, emailEndpoint) })
	mux.HandleFunc("/emails/batch", func(w http.ResponseWriter, r *http.Request) { s.handleSend(w, r, batchEndpoint) })
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

// SetNow replaces the clock that expires idempotency keys, counts the
// rate limit's window and the daily quota's day.
func (s *Server) SetNow(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
}

func (s *Server) clock() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now()
}

// SetVerifiedDomains limits the from domains accepted; none: all.
func (s *Server) SetVerifiedDomains(domains ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.verified = slices.Clone(domains)
}

// RefuseRecipients makes the server refuse these addresses as Resend
// refuses an invalid to: 422 validation_error for a single send, the
// e-mail's entry in a batch's errors (or the whole batch, in strict
// validation).
func (s *Server) RefuseRecipients(addresses ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range addresses {
		s.refused[strings.ToLower(a)] = true
	}
}

// SetRateLimit limits the team to n requests per second, every request
// counted (a batch is one, the probe one), over a sliding window
// (httpprovidertest.RateLimit); 0 lifts it. Resend's default was 2 per
// second when sekali's pace was set to it; its documentation has since
// said 5.
func (s *Server) SetRateLimit(n int) { s.rate.Set(n, time.Second) }

// SetDailyQuota limits the e-mails sent per UTC day to n (the free
// plan's 100); 0 lifts it. A request whose e-mails would go beyond it
// sends none of them.
func (s *Server) SetDailyQuota(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dailyQuota = n
}

// FailNext queues faults for the next POST /emails requests, in order.
func (s *Server) FailNext(faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, faults...)
}

// BatchFailNext queues faults for the next POST /emails/batch requests,
// in order; Sent sends the whole batch.
func (s *Server) BatchFailNext(faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batchFaults = append(s.batchFaults, faults...)
}

// SetOutage makes every sending request meet f (after its key is
// checked, as FailNext's faults do), and GET /domains answer f's error,
// until SetOutage(nil): Resend down, or throttling, for as long as a
// test needs.
func (s *Server) SetOutage(f *Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outage = f
}

// HoldNext makes the next sending request that claims an idempotency
// key wait, in flight, until release is called (or the server closes).
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
func (s *Server) Requests() int { return s.Counts().Emails }

// Arrivals are the requests the rate limit counted while one was set,
// in the order they came: what a test measures the pace by.
func (s *Server) Arrivals() []Arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.arrivals)
}

// Counts returns the requests received so far.
func (s *Server) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts
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
	m.ReplyTo = slices.Clone(m.ReplyTo)
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

// admit counts an authenticated request against the rate limit. While
// a limit is set it puts ratelimit-* on the answer, whatever follows;
// beyond the limit it answers 429 rate_limit_exceeded with retry-after
// and reports false.
func (s *Server) admit(w http.ResponseWriter) bool {
	now := s.clock()
	v := s.rate.Take(now)
	if !v.Limited {
		return true
	}
	s.mu.Lock()
	s.arrivals = append(s.arrivals, Arrival{At: now, Refused: !v.OK})
	if !v.OK {
		s.counts.RateLimited++
	}
	s.mu.Unlock()
	h := w.Header()
	h.Set("Ratelimit-Limit", strconv.Itoa(v.Limit))
	h.Set("Ratelimit-Remaining", strconv.Itoa(v.Remaining))
	h.Set("Ratelimit-Reset", strconv.Itoa(httpprovidertest.Seconds(v.Reset)))
	if v.OK {
		return true
	}
	h.Set("Retry-After", strconv.Itoa(max(httpprovidertest.Seconds(v.Reset), 1)))
	writeError(w, http.StatusTooManyRequests, "rate_limit_exceeded", "Too many requests. Please limit the number of requests per second.")
	return false
}

func (s *Server) handleDomains(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "Method is not allowed for the requested path.")
		return
	}
	s.mu.Lock()
	s.counts.Domains++
	s.mu.Unlock()
	sendingOnly, ok := s.auth(w, r, false)
	if !ok || !s.admit(w) {
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

// canonical hashes JSON independently of key order and whitespace: what
// "the same request body" means here.
func canonical(raw []byte) [32]byte {
	var v any
	_ = json.Unmarshal(raw, &v)
	b, _ := json.Marshal(v) // encoding/json sorts map keys
	return sha256.Sum256(b)
}

func writeError(w http.ResponseWriter, status int, name, message string) {
	httpprovidertest.WriteJSON(w, status, map[string]any{"statusCode": status, "name": name, "message": message})
}
