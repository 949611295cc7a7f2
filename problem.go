package sekali

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/apiclient"
)

// Problem is an answer of the API that is not what was asked for: its
// application/problem+json (RFC 9457) with the answer's Retry-After. Every
// call returns one for such an answer, after its retries:
//
//	var p *sekali.Problem
//	if errors.As(err, &p) && p.Type == sekali.ProblemValidation {
//		for _, e := range p.Errors { … e.Pointer, e.Detail … }
//	}
//
// or, by type alone, errors.Is(err, sekali.ProblemNotFound).
type Problem struct {
	// Type is what went wrong, one of the Problem… constants; empty when
	// the answer was not a problem document (a proxy's page, say), whose
	// Status and the start of whose body Title and Detail then carry.
	Type ProblemType
	// Status is the answer's HTTP status.
	Status int
	Title  string
	Detail string
	// Errors names each invalid field by its JSON pointer into the
	// request (ProblemValidation).
	Errors []FieldError
	// RequestID is the answer's X-Request-Id, also in the API's log line.
	RequestID string
	// Notification is where the notification stands when that is why the
	// call could not be done (a cancel that came too late); else nil.
	Notification *Notification
	// RetryAfter is the answer's Retry-After (ProblemRateLimited,
	// ProblemOverloaded, ProblemQuotaUnavailable); 0 without one.
	RetryAfter time.Duration
}

func (p *Problem) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sekali: %d", p.Status)
	if p.Type != "" {
		fmt.Fprintf(&b, " %s", strings.TrimPrefix(string(p.Type), "urn:sekali:problem:"))
	}
	if p.Title != "" {
		fmt.Fprintf(&b, ": %s", p.Title)
	}
	if p.Detail != "" {
		fmt.Fprintf(&b, ": %s", p.Detail)
	}
	for i, e := range p.Errors {
		sep := "; "
		if i == 0 {
			sep = " ("
		}
		fmt.Fprintf(&b, "%s%s: %s", sep, e.Pointer, e.Detail)
		if i == len(p.Errors)-1 {
			b.WriteString(")")
		}
	}
	if p.RequestID != "" {
		fmt.Fprintf(&b, " [request %s]", p.RequestID)
	}
	return b.String()
}

// Is reports whether target is p's ProblemType, so that
// errors.Is(err, sekali.ProblemWrongState) tests the type of the problem
// err carries.
func (p *Problem) Is(target error) bool {
	t, ok := target.(ProblemType)
	return ok && t == p.Type
}

// ProblemType is a Problem's type, a URN: the values of the document's
// Problem.type, explained in the README's HTTP API section. It is an
// error only so that errors.Is can compare a *Problem with it.
type ProblemType string

// Error is the type itself; see Problem.Is.
func (t ProblemType) Error() string { return "sekali: problem " + string(t) }

// The problem types (Problem.type in api/openapi.yaml). Those a shop's
// backend branches on: ProblemValidation (Errors names each field),
// ProblemNotFound, ProblemUnauthorized and ProblemForbidden (the key, or
// its scopes), ProblemRateLimited (RetryAfter), ProblemWrongState and
// ProblemMayHaveBeenSent (a cancel too late; Notification),
// ProblemNotificationConflict (a trigger of an event that has a
// notification with other data; Notification is that one),
// ProblemIdempotencyKeyReused (the key of another checkout) and
// ProblemOrderReferenceTaken (the order number is another order's).
const (
	ProblemInvalidBody            ProblemType = "urn:sekali:problem:invalid-body"
	ProblemInvalidIdempotencyKey  ProblemType = "urn:sekali:problem:invalid-idempotency-key"
	ProblemBodyTooLarge           ProblemType = "urn:sekali:problem:body-too-large"
	ProblemBodyTimeout            ProblemType = "urn:sekali:problem:body-timeout"
	ProblemUnsupportedMediaType   ProblemType = "urn:sekali:problem:unsupported-media-type"
	ProblemValidation             ProblemType = "urn:sekali:problem:validation"
	ProblemIdempotencyKeyReused   ProblemType = "urn:sekali:problem:idempotency-key-reused"
	ProblemIdempotencyKeyInFlight ProblemType = "urn:sekali:problem:idempotency-key-in-flight"
	ProblemOrderReferenceTaken    ProblemType = "urn:sekali:problem:order-reference-taken"
	ProblemNotFound               ProblemType = "urn:sekali:problem:not-found"
	ProblemInvalidQuery           ProblemType = "urn:sekali:problem:invalid-query"
	ProblemMethodNotAllowed       ProblemType = "urn:sekali:problem:method-not-allowed"
	ProblemInternal               ProblemType = "urn:sekali:problem:internal"
	ProblemUnauthorized           ProblemType = "urn:sekali:problem:unauthorized"
	ProblemForbidden              ProblemType = "urn:sekali:problem:forbidden"
	ProblemRateLimited            ProblemType = "urn:sekali:problem:rate-limited"
	ProblemWrongState             ProblemType = "urn:sekali:problem:wrong-state"
	ProblemMayHaveBeenSent        ProblemType = "urn:sekali:problem:may-have-been-sent"
	ProblemNotificationConflict   ProblemType = "urn:sekali:problem:notification-conflict"
	ProblemUnknownMessage         ProblemType = "urn:sekali:problem:unknown-message"
	ProblemOverloaded             ProblemType = "urn:sekali:problem:overloaded"
	ProblemQuotaUnavailable       ProblemType = "urn:sekali:problem:quota-unavailable"
)

// problemOf is the Problem of an answer that was not asked for.
func problemOf(res *http.Response, body []byte) *Problem {
	p := &Problem{Status: res.StatusCode, RequestID: res.Header.Get("X-Request-Id"), RetryAfter: retryAfter(res.Header.Get("Retry-After"))}
	var doc apiclient.Problem
	mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
	if mt != "application/problem+json" || json.Unmarshal(body, &doc) != nil {
		p.Title = http.StatusText(res.StatusCode)
		p.Detail = strings.ToValidUTF8(string(body[:min(len(body), 200)]), "")
		return p
	}
	p.Type, p.Title, p.Detail, p.Errors = ProblemType(doc.Type), doc.Title, doc.Detail, doc.Errors
	if doc.RequestID != "" {
		p.RequestID = doc.RequestID
	}
	if doc.Notification.ID != uuid.Nil {
		p.Notification = &doc.Notification
	}
	return p
}

// retryAfter reads Retry-After: seconds, or an HTTP date (RFC 9110
// §10.2.3); 0 without one.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}
