package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
)

// maxWebhookBytes bounds a provider's event; the providers' own limits
// are below it.
const maxWebhookBytes = 1 << 20

// ErrWebhookUnauthorized: the request's signature, timestamp or
// credentials are not the provider's (or are too old: a replay).
var ErrWebhookUnauthorized = errors.New("httpapi: the webhook's signature or credentials are not valid")

// MalformedWebhook is a body that is not the provider's event. Reason
// is what the 400 tells the sender: what was wrong with the body, in its
// terms (a missing field, a value of the wrong type), never this
// service's package names or Go types; Err, the whole story, goes to the
// request's log line.
type MalformedWebhook struct {
	Reason string
	Err    error
}

func (e *MalformedWebhook) Error() string { return e.Err.Error() }
func (e *MalformedWebhook) Unwrap() error { return e.Err }

// NewMalformedWebhook wraps err, a provider's error that wraps its
// sentinel for a malformed body: the reason is what err says after the
// sentinel ("no type", "email.bounced without bounce"), or, for a body
// encoding/json could not take, which field or that it is not JSON.
func NewMalformedWebhook(err, sentinel error) *MalformedWebhook {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	reason := strings.TrimPrefix(err.Error(), sentinel.Error()+": ")
	switch {
	case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
		reason = "not valid JSON"
	case errors.As(err, &typ) && typ.Field != "":
		reason = fmt.Sprintf("%s must be a JSON %s, not %s", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value)
	case errors.As(err, &typ):
		reason = fmt.Sprintf("must be a JSON %s, not %s", jsonKind(typ.Type.Kind().String()), typ.Value)
	case reason == err.Error():
		reason = "not an event of this provider"
	}
	return &MalformedWebhook{Reason: reason, Err: err}
}

// Webhook receives one provider's events at POST /v1/webhooks/{provider}.
type Webhook struct {
	Provider string // resend, postmark, mailgun, ses
	// Challenge is the WWW-Authenticate of a 401, e.g. Basic
	// realm="sekali-webhooks" for credentials a provider sends.
	Challenge string
	// Verify checks the request the provider's way and returns its
	// events; for what the caller sent wrong, its errors wrap
	// ErrWebhookUnauthorized or are a *MalformedWebhook.
	Verify func(ctx context.Context, header http.Header, body []byte) ([]mail.Feedback, error)
}

// feedbackRecorder writes a verified event (*notify.Operator).
type feedbackRecorder interface {
	RecordFeedback(ctx context.Context, f mail.Feedback) (notify.FeedbackOutcome, error)
}

// webhookResults are the closed label set of sekali_provider_events_total.
var webhookResults = []string{"recorded", "duplicate", "unknown_message", "rejected"}

// handleWebhook verifies a provider's request and records its events.
// Bad input — a wrong signature or credentials, an old timestamp, a body
// that is not an event, one that names no delivery, one too large — gets
// a 4xx and changes nothing; the same event twice changes nothing the
// second time.
func handleWebhook(hooks []Webhook, feedback feedbackRecorder, m webhookMetrics) http.Handler {
	events := m.requests
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := chi.URLParam(r, "provider")
		i := slices.IndexFunc(hooks, func(h Webhook) bool { return h.Provider == name })
		if i < 0 {
			writeProblem(w, r, problem{Type: typeNotFound, Status: http.StatusNotFound,
				Detail: "No webhook is configured for this provider (docs/providers.md)."})
			return
		}
		hook := hooks[i]
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxWebhookBytes))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				events.WithLabelValues(hook.Provider, "rejected").Inc()
				writeProblem(w, r, problem{Type: typeBodyTooLarge, Status: http.StatusRequestEntityTooLarge,
					Detail: fmt.Sprintf("The body must be at most %d bytes.", maxWebhookBytes)})
				return
			}
			writeProblem(w, r, problem{Type: typeInvalidBody, Status: http.StatusBadRequest, Detail: "The body could not be read."})
			return
		}
		if nestsDeeper(body, maxJSONDepth) {
			events.WithLabelValues(hook.Provider, "rejected").Inc()
			writeProblem(w, r, problem{Type: typeInvalidBody, Status: http.StatusBadRequest,
				Detail: fmt.Sprintf("The body nests arrays and objects more than %d levels deep; no provider's event does.", maxJSONDepth)})
			return
		}
		got, err := hook.Verify(r.Context(), r.Header, body)
		var malformed *MalformedWebhook
		switch {
		case errors.Is(err, ErrWebhookUnauthorized):
			events.WithLabelValues(hook.Provider, "rejected").Inc()
			addLogAttrs(r.Context(), slog.String("webhook", hook.Provider), slog.String("refused", err.Error()))
			w.Header().Set("WWW-Authenticate", hook.Challenge)
			writeProblem(w, r, problem{Type: typeUnauthorized, Status: http.StatusUnauthorized,
				Detail: "The request is not signed (or authenticated) as this provider's webhooks are, or it is too old."})
			return
		case errors.As(err, &malformed):
			events.WithLabelValues(hook.Provider, "rejected").Inc()
			addLogAttrs(r.Context(), slog.String("webhook", hook.Provider), slog.String("refused", err.Error()))
			writeProblem(w, r, problem{Type: typeInvalidBody, Status: http.StatusBadRequest, Detail: "The body is not an event of this provider: " + malformed.Reason + "."})
			return
		case err != nil:
			writeError(w, r, err)
			return
		}
		recorded, duplicates := 0, 0
		for _, f := range got {
			out, err := feedback.RecordFeedback(r.Context(), f)
			switch {
			case errors.Is(err, notify.ErrUnknownMessage):
				events.WithLabelValues(hook.Provider, "unknown_message").Inc()
				writeProblem(w, r, problem{Type: typeUnknownMessage, Status: http.StatusUnprocessableEntity,
					Detail: "The event names no message this service sent."})
				return
			case err != nil:
				writeError(w, r, err)
				return
			case out.Duplicate:
				duplicates++
				events.WithLabelValues(hook.Provider, "duplicate").Inc()
			default:
				recorded++
				events.WithLabelValues(hook.Provider, "recorded").Inc()
				m.kinds.WithLabelValues(hook.Provider, string(f.Kind)).Inc()
				addLogAttrs(r.Context(), slog.String("delivery_id", out.DeliveryID.String()), slog.String("event", string(f.Kind)),
					slog.Bool("suppressed", out.Suppressed))
			}
		}
		addLogAttrs(r.Context(), slog.String("webhook", hook.Provider))
		writeJSON(w, http.StatusOK, map[string]int{"recorded": recorded, "duplicates": duplicates})
	})
}

// webhookMetrics count the providers' webhook requests and the events
// they reported.
type webhookMetrics struct {
	requests, kinds *prometheus.CounterVec
}

// newWebhookMetrics makes the webhook metrics with every configured
// provider and every known label value at zero.
func newWebhookMetrics(reg prometheus.Registerer, hooks []Webhook) webhookMetrics {
	m := webhookMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sekali_provider_events_total",
			Help: "Providers' webhook events, by provider and result: recorded, duplicate (the same event again), unknown_message, rejected (signature, credentials, age, body).",
		}, []string{"provider", "result"}),
		kinds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sekali_delivery_feedback_total",
			Help: "What providers reported about accepted messages, by provider and kind: delivered, deferred, bounced (permanent), complained.",
		}, []string{"provider", "kind"}),
	}
	for _, h := range hooks {
		for _, r := range webhookResults {
			m.requests.WithLabelValues(h.Provider, r)
		}
		for _, k := range []mail.FeedbackKind{mail.FeedbackDelivered, mail.FeedbackDeferred, mail.FeedbackBounced, mail.FeedbackComplained} {
			m.kinds.WithLabelValues(h.Provider, string(k))
		}
	}
	reg.MustRegister(m.requests, m.kinds)
	return m
}
