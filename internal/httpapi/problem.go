package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
)

// problem is an RFC 9457 problem details object.
type problem struct {
	Type      string       `json:"type"`
	Title     string       `json:"title"`
	Status    int          `json:"status"`
	Detail    string       `json:"detail,omitempty"`
	Errors    []fieldError `json:"errors,omitempty"`
	RequestID string       `json:"request_id,omitempty"`
	// Notification is where a notification stands, when that is why
	// the request could not be done (a cancel after the claim).
	Notification *order.Notification `json:"notification,omitempty"`
}

// fieldError names one invalid part of a request by its JSON pointer
// (RFC 6901), e.g. {"pointer": "/items/0/quantity", "detail": "..."}.
type fieldError struct {
	Pointer string `json:"pointer"`
	Detail  string `json:"detail"`
}

// fieldErrors converts the order package's validation errors.
func fieldErrors(fs []order.FieldError) []fieldError {
	out := make([]fieldError, len(fs))
	for i, f := range fs {
		out[i] = fieldError{Pointer: f.Pointer, Detail: f.Detail}
	}
	return out
}

// Problem types. They are URNs, not links: the README's API section
// explains each one.
const (
	typeInvalidBody     = "urn:sekali:problem:invalid-body"
	typeValidation      = "urn:sekali:problem:validation"
	typeBodyTooLarge    = "urn:sekali:problem:body-too-large"
	typeBodyTimeout     = "urn:sekali:problem:body-timeout"
	typeUnsupportedType = "urn:sekali:problem:unsupported-media-type"
	typeNotFound        = "urn:sekali:problem:not-found"
	typeMethod          = "urn:sekali:problem:method-not-allowed"
	typeKeyInFlight     = "urn:sekali:problem:idempotency-key-in-flight"
	typeKeyReused       = "urn:sekali:problem:idempotency-key-reused"
	typeInvalidKey      = "urn:sekali:problem:invalid-idempotency-key"
	typeInvalidQuery    = "urn:sekali:problem:invalid-query"
	typeInternal        = "urn:sekali:problem:internal"
	typeUnauthorized    = "urn:sekali:problem:unauthorized"
	typeForbidden       = "urn:sekali:problem:forbidden"
	typeRateLimited     = "urn:sekali:problem:rate-limited"
	typeOverloaded      = "urn:sekali:problem:overloaded"
	typeQuotaDown       = "urn:sekali:problem:quota-unavailable"
	typeUnknownMessage  = "urn:sekali:problem:unknown-message"
	typeConflict        = "urn:sekali:problem:wrong-state"
	typeMayHaveBeenSent = "urn:sekali:problem:may-have-been-sent"
	// typeNotificationConflict: a trigger of a business event that has a
	// notification with other data; never the other's as if it were its own.
	typeNotificationConflict = "urn:sekali:problem:notification-conflict"
	typeReferenceTaken       = "urn:sekali:problem:order-reference-taken"
)

// mayHaveBeenSent is the answer to a cancel of a notification a provider
// may already have: not cancelled, since cancelled would say nothing was
// sent.
func mayHaveBeenSent(err error, n *order.Notification) problem {
	why := strings.TrimPrefix(err.Error(), notify.ErrWrongState.Error()+": ")
	return problem{Type: typeMayHaveBeenSent, Status: http.StatusConflict, Title: "The e-mail may already have been sent",
		Detail: strings.ToUpper(why[:1]) + why[1:] + ". It was not cancelled: the provider may have it, and it may yet be recorded sent. " +
			"Only a notification no attempt of which may have reached a provider can be cancelled.", Notification: n}
}

// writeProblem sends p as application/problem+json.
func writeProblem(w http.ResponseWriter, r *http.Request, p problem) {
	p.RequestID = requestIDFrom(r.Context())
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p) // the status is out; a broken connection has nobody to tell
}

// notFounds are the domain's errors that say there is no such thing,
// each with what its 404 tells the caller.
var notFounds = []struct {
	err    error
	detail string
}{
	{order.ErrNotFound, "No order has this id."},
	{order.ErrNotificationNotFound, "No notification has this id."},
	{notify.ErrNotFound, "No delivery has this id."},
	{apikey.ErrNotFound, "No API key has this id."},
	{notify.ErrSuppressionNotFound, "This address is not on the suppression list."},
	{notify.ErrBlockNotFound, "No block has this id."},
}

// notFoundDetail is what err's 404 says when err is one of notFounds, or
// "".
func notFoundDetail(err error) string {
	for _, nf := range notFounds {
		if errors.Is(err, nf.err) {
			return nf.detail
		}
	}
	return ""
}

// writeError maps an error from the domain to its HTTP answer. This is
// the one place where errors become status codes. Anything unexpected is
// a 500 whose cause goes into the request's log line, not to the client.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	var verr *order.ValidationError
	var quota *order.QuotaError
	var conflict *order.ConflictError
	var taken *order.ReferenceTakenError
	notFound := notFoundDetail(err)
	switch {
	case errors.As(err, &verr):
		writeProblem(w, r, problem{Type: typeValidation, Status: http.StatusUnprocessableEntity,
			Title: "The request is not valid", Detail: "See errors for each invalid field.", Errors: fieldErrors(verr.Fields)})
	case notFound != "":
		writeProblem(w, r, problem{Type: typeNotFound, Status: http.StatusNotFound, Detail: notFound})
	case errors.Is(err, notify.ErrPinnedUnreachable):
		writeProblem(w, r, problem{Type: typeConflict, Status: http.StatusConflict, Title: "Pinned to a provider no worker sends through",
			Detail: strings.TrimPrefix(err.Error(), "notify: ") + "."})
	case errors.Is(err, notify.ErrMayHaveBeenSent):
		writeProblem(w, r, mayHaveBeenSent(err, nil))
	case errors.Is(err, notify.ErrNotRecorded):
		setLogError(r.Context(), err)
		writeProblem(w, r, problem{Type: typeInternal, Status: http.StatusInternalServerError, Title: "Done, but not recorded",
			Detail: "The action was done, but its record in the operators' actions (GET /admin/v1/actions) could not be written; its log line carries this request_id."})
	case errors.Is(err, notify.ErrWrongState):
		writeProblem(w, r, problem{Type: typeConflict, Status: http.StatusConflict, Title: "Not possible in the delivery's current state",
			Detail: err.Error() + ". Retry applies to failed and held deliveries; mark-sent to held ones; cancel to pending ones; a sent delivery is never sent again."})
	case errors.As(err, &conflict):
		writeProblem(w, r, problem{Type: typeNotificationConflict, Status: http.StatusConflict,
			Title: "This event already has a notification, with other data",
			Detail: "Its idempotency key " + conflict.Notification.IdempotencyKey + " (template, order, event_id, recipient) names a notification recorded with another " +
				strings.Join(conflict.Fields, " and ") + ", which notification is; nothing was recorded or changed. The same trigger again answers 200 with it; " +
				"another e-mail about the order needs an event_id of its own (a cancelled notification keeps its key).",
			Notification: &conflict.Notification})
	case errors.As(err, &quota):
		tooMany(w, r, quota.RetryAfter, quotaReason[quota.Limit])
	case errors.Is(err, order.ErrQuotaUnavailable):
		setLogError(r.Context(), err)
		seconds := retryAfter(w, quotaDownRetry)
		writeProblem(w, r, problem{Type: typeQuotaDown, Status: http.StatusServiceUnavailable, Title: "The public checkout cannot count its caps",
			Detail: "A checkout without an API key is taken only once it is counted against the public checkout's hourly caps, and they cannot be counted now. Nothing was recorded; retry after " + strconv.Itoa(seconds) + " s."})
	case errors.As(err, &taken):
		writeProblem(w, r, problem{Type: typeReferenceTaken, Status: http.StatusConflict, Title: "This order number is taken",
			Detail: "The order number " + strconv.Quote(taken.Reference) + " is already order " + taken.Order.String() + "'s: a new order needs a number of its own. " +
				"Nothing was recorded. A checkout retried with its Idempotency-Key gets its first answer back instead."})
	case errors.Is(err, order.ErrRequestInFlight):
		writeProblem(w, r, problem{Type: typeKeyInFlight, Status: http.StatusConflict,
			Title:  "A request with this Idempotency-Key is in progress",
			Detail: "Retry after the first request has finished; it will then return the same response."})
	case errors.Is(err, order.ErrKeyReused):
		writeProblem(w, r, problem{Type: typeKeyReused, Status: http.StatusUnprocessableEntity,
			Title:  "The Idempotency-Key was already used for a different request",
			Detail: "Use a new key for a new request; reuse a key only to retry the identical request."})
	default:
		setLogError(r.Context(), err)
		writeProblem(w, r, problem{Type: typeInternal, Status: http.StatusInternalServerError,
			Detail: "The request failed on our side; its log line carries this request_id. A checkout retried with the same Idempotency-Key never creates a second order."})
	}
}

// quotaDownRetry is the Retry-After of a checkout refused because its
// quota could not be counted: about what a Redis takes to restart or
// fail over.
const quotaDownRetry = 5 * time.Second

// quotaReason says which of the public checkout's hourly caps a
// QuotaError's Limit is.
var quotaReason = map[string]string{
	"client":    "This client address has had order confirmations sent to as many different addresses this hour as a checkout without an API key may",
	"recipient": "This address has had as many order confirmations this hour as a checkout without an API key may send it",
	"domain":    "The addresses of this domain have had as many order confirmations this hour as checkouts without an API key may send them",
	"all":       "Checkouts without an API key have sent as many order confirmations this hour as this shop allows",
	"network":   "The client addresses of this network (its /24, or its IPv6 /48) have had their share of the order confirmations a checkout without an API key may send this hour, to this domain or in all",
}

// writeJSON sends v with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
