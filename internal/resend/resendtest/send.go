package resendtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/httpprovider/httpprovidertest"
)

// endpoint is a sending endpoint: its path, which scopes its
// idempotency keys as Resend's ("used with this HTTP method and
// endpoint").
type endpoint string

const (
	emailEndpoint endpoint = "/emails"
	batchEndpoint endpoint = "/emails/batch"
)

// refusal is an error answer.
type refusal struct {
	status        int
	name, message string
}

// itemError is a batch e-mail refused in permissive validation: the
// entry of the answer's errors, as Resend documents it
// (https://resend.com/docs/dashboard/emails/batch-validation-modes).
type itemError struct {
	Index   int    `json:"index"`
	Message string `json:"message"`
}

// handleSend serves POST /emails and POST /emails/batch: the key's
// syntax, the body's shape, the idempotency key, the e-mails'
// validation, the daily quota, then the e-mails sent or the fault
// queued for the request.
func (s *Server) handleSend(w http.ResponseWriter, r *http.Request, ep endpoint) {
	if r.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "Method is not allowed for the requested path.")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 41<<20))
	s.mu.Lock()
	if ep == batchEndpoint {
		s.counts.Batches++
	} else {
		s.counts.Emails++
	}
	s.mu.Unlock()
	if err != nil {
		return // the client went away mid-body: nothing to answer
	}
	if _, ok := s.auth(w, r, true); !ok || !s.admit(w) {
		return
	}
	key, hasKey := r.Header.Get("Idempotency-Key"), len(r.Header.Values("Idempotency-Key")) > 0
	if hasKey && (len(key) < 1 || len(key) > 256) {
		writeError(w, http.StatusBadRequest, "invalid_idempotency_key", "Idempotency keys, if present, must have between 1 and 256 characters.")
		return
	}
	permissive := false
	if ep == batchEndpoint {
		switch r.Header.Get("X-Batch-Validation") {
		case "", "strict":
		case "permissive":
			permissive = true
		default:
			writeError(w, http.StatusUnprocessableEntity, "validation_error", "Invalid `x-batch-validation` header: want strict or permissive.")
			return
		}
	}
	items, ref := shape(ep, body, permissive)
	if ref != nil {
		writeError(w, ref.status, ref.name, ref.message)
		return
	}

	// Idempotency: answer from the stored key, or claim it.
	var entry *keyEntry
	if hasKey {
		var claimed bool
		if entry, claimed = s.claim(w, string(ep)+" "+key, canonical(body)); !claimed {
			return
		}
	}
	// settle ends the claim on the key: kept if the e-mails were sent,
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
			delete(s.keys, entry.id)
		}
	}
	defer settle()

	msgs, errs, ref := s.validateAll(ep, items, permissive)
	if ref != nil {
		writeError(w, ref.status, ref.name, ref.message)
		return
	}
	for i := range msgs {
		msgs[i].IdempotencyKey, msgs[i].Batched = key, ep == batchEndpoint
	}
	if hasKey && !s.wait() {
		return
	}
	fault := s.takeFault(ep)
	switch {
	case fault != nil && fault.Cut && !fault.Sent:
		settle()
		httpprovidertest.HangUp(w)
		return
	case fault != nil && !fault.Sent:
		writeError(w, fault.Status, fault.Name, fault.Message)
		return
	}
	answer, ref := s.send(ep, msgs, errs, entry)
	if ref != nil {
		writeError(w, ref.status, ref.name, ref.message)
		return
	}
	sent = true
	switch {
	case fault == nil:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	case fault.Cut:
		settle()
		httpprovidertest.HangUp(w)
	default:
		writeError(w, fault.Status, fault.Name, fault.Message)
	}
}

// shape checks what a body must be before its key is looked at: a JSON
// object for /emails, a JSON array of at least one for /emails/batch
// (at most MaxBatch in strict validation; in permissive, those beyond
// are refused one by one). It returns the e-mails' raw objects.
func shape(ep endpoint, body []byte, permissive bool) ([]json.RawMessage, *refusal) {
	if ep == emailEndpoint {
		var req map[string]json.RawMessage
		if err := json.Unmarshal(body, &req); err != nil || req == nil {
			return nil, &refusal{http.StatusBadRequest, "validation_error", "The request body is not a JSON object."}
		}
		return []json.RawMessage{body}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(body, &items); err != nil || items == nil {
		return nil, &refusal{http.StatusBadRequest, "validation_error", "The request body is not a JSON array of emails."}
	}
	switch {
	case len(items) == 0:
		return nil, &refusal{http.StatusUnprocessableEntity, "validation_error", "The batch must contain at least one email."}
	case len(items) > MaxBatch && !permissive:
		return nil, &refusal{http.StatusUnprocessableEntity, "validation_error", tooMany}
	}
	return items, nil
}

const tooMany = "The batch contains more than 100 emails."

// validateAll validates each e-mail of a request as the single send
// does. A batch takes neither attachments nor scheduled_at. In strict
// validation (and for /emails) the first refusal refuses the request; in
// permissive validation each refused e-mail is an entry of errs (nil
// otherwise), the others go.
func (s *Server) validateAll(ep endpoint, items []json.RawMessage, permissive bool) (msgs []Message, errs []itemError, ref *refusal) {
	if permissive {
		errs = []itemError{}
	}
	for i, raw := range items {
		m, r := s.validateItem(ep, i, raw)
		switch {
		case r == nil:
			msgs = append(msgs, m)
		case !permissive:
			return nil, nil, r
		default:
			errs = append(errs, itemError{Index: i, Message: r.message})
		}
	}
	return msgs, errs, nil
}

func (s *Server) validateItem(ep endpoint, i int, raw json.RawMessage) (Message, *refusal) {
	if i >= MaxBatch {
		return Message{}, &refusal{http.StatusUnprocessableEntity, "validation_error", tooMany}
	}
	var req map[string]json.RawMessage
	if err := json.Unmarshal(raw, &req); err != nil || req == nil {
		return Message{}, &refusal{http.StatusUnprocessableEntity, "validation_error", fmt.Sprintf("The email at index %d is not a JSON object.", i)}
	}
	if ep == batchEndpoint {
		for _, f := range []string{"attachments", "scheduled_at"} {
			if _, ok := req[f]; ok {
				return Message{}, &refusal{http.StatusUnprocessableEntity, "validation_error", fmt.Sprintf("The `%s` field is not supported in batch emails.", f)}
			}
		}
	}
	m, status, name, text := s.validate(req)
	if status != 0 {
		return m, &refusal{status, name, text}
	}
	return m, nil
}

// claim answers a request under a key (id: the endpoint and the key)
// from the key's stored answer, or refuses it while the key is in flight
// or held with another body, and reports false; else it claims the key
// for the request.
func (s *Server) claim(w http.ResponseWriter, id string, body [32]byte) (*keyEntry, bool) {
	s.mu.Lock()
	now := s.now()
	e := s.keys[id]
	if e != nil && now.Sub(e.at) >= keyWindow && !e.inFlight {
		delete(s.keys, id)
		e = nil
	}
	switch {
	case e != nil && e.inFlight:
		s.mu.Unlock()
		writeError(w, http.StatusConflict, "concurrent_idempotent_requests", "There is another request in progress with the same idempotency key.")
		return nil, false
	case e != nil && e.body != body:
		s.mu.Unlock()
		writeError(w, http.StatusConflict, "invalid_idempotent_request", "This idempotency key has been used with this HTTP method and endpoint within the last 24 hours, but the request body was modified and doesn't match the original request.")
		return nil, false
	case e != nil:
		answer := e.answer
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
		return nil, false
	}
	e = &keyEntry{id: id, body: body, inFlight: true, at: now}
	s.keys[id] = e
	s.mu.Unlock()
	return e, true
}

// takeFault takes the fault of a request: the outage's, or the next
// queued for its endpoint.
func (s *Server) takeFault(ep endpoint) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	queue := &s.faults
	if ep == batchEndpoint {
		queue = &s.batchFaults
	}
	switch {
	case s.outage != nil:
		f := *s.outage
		return &f
	case len(*queue) > 0:
		f := (*queue)[0]
		*queue = (*queue)[1:]
		return &f
	}
	return nil
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

// send records msgs as sent, unless they would go beyond the daily
// quota (then none is), and stores the answer under the request's key:
// {"id"} for /emails; {"data": [{"id"}, …]} for a batch, the ids of the
// e-mails sent in the order of the request, with "errors" in permissive
// validation (errs not nil).
func (s *Server) send(ep endpoint, msgs []Message, errs []itemError, entry *keyEntry) ([]byte, *refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.dailyQuota > 0 && s.sentOn(now)+len(msgs) > s.dailyQuota {
		s.counts.QuotaExceeded++
		return nil, &refusal{http.StatusTooManyRequests, "daily_quota_exceeded", "You have reached your daily email quota."}
	}
	data := []map[string]string{}
	for _, m := range msgs {
		m.ID, m.SentAt = uuid.NewString(), now
		s.msgs = append(s.msgs, m)
		data = append(data, map[string]string{"id": m.ID})
	}
	var answer []byte
	switch {
	case ep == emailEndpoint:
		answer, _ = json.Marshal(data[0])
	case errs == nil:
		answer, _ = json.Marshal(map[string]any{"data": data})
	default:
		answer, _ = json.Marshal(map[string]any{"data": data, "errors": errs})
	}
	if entry != nil {
		entry.answer = answer
	}
	return answer, nil
}

// sentOn counts the e-mails sent on now's UTC day; s.mu held.
func (s *Server) sentOn(now time.Time) int {
	day := now.UTC().Truncate(24 * time.Hour)
	n := 0
	for _, m := range s.msgs {
		if !m.SentAt.Before(day) {
			n++
		}
	}
	return n
}
