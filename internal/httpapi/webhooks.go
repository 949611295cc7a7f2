package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/metric"
	"github.com/sekali-dev/sekali/internal/notify"
)

// maxWebhookBytes bounds a provider's event; the providers' own limits
// are below it.
const maxWebhookBytes = 1 << 20

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
func handleWebhook(hooks map[string]mail.Webhook, feedback feedbackRecorder, m webhookMetrics) http.Handler {
	events := m.requests
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := chi.URLParam(r, "provider")
		hook, ok := hooks[name]
		if !ok {
			writeProblem(w, r, problem{Type: typeNotFound, Status: http.StatusNotFound,
				Detail: "No webhook is configured for this provider (docs/providers.md)."})
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxWebhookBytes))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				events.WithLabelValues(name, "rejected").Inc()
				writeProblem(w, r, problem{Type: typeBodyTooLarge, Status: http.StatusRequestEntityTooLarge,
					Detail: fmt.Sprintf("The body must be at most %d bytes.", maxWebhookBytes)})
				return
			}
			writeProblem(w, r, problem{Type: typeInvalidBody, Status: http.StatusBadRequest, Detail: "The body could not be read."})
			return
		}
		if nestsDeeper(body, maxJSONDepth) {
			events.WithLabelValues(name, "rejected").Inc()
			writeProblem(w, r, problem{Type: typeInvalidBody, Status: http.StatusBadRequest,
				Detail: fmt.Sprintf("The body nests arrays and objects more than %d levels deep; no provider's event does.", maxJSONDepth)})
			return
		}
		got, err := hook.Verify(r.Context(), r.Header, body)
		var malformed *mail.MalformedWebhook
		switch {
		case errors.Is(err, mail.ErrWebhookUnauthorized):
			events.WithLabelValues(name, "rejected").Inc()
			addLogAttrs(r.Context(), slog.String("webhook", name), slog.String("refused", err.Error()))
			w.Header().Set("WWW-Authenticate", hook.Challenge())
			writeProblem(w, r, problem{Type: typeUnauthorized, Status: http.StatusUnauthorized,
				Detail: "The request is not signed (or authenticated) as this provider's webhooks are, or it is too old."})
			return
		case errors.As(err, &malformed):
			events.WithLabelValues(name, "rejected").Inc()
			addLogAttrs(r.Context(), slog.String("webhook", name), slog.String("refused", err.Error()))
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
				events.WithLabelValues(name, "unknown_message").Inc()
				writeProblem(w, r, problem{Type: typeUnknownMessage, Status: http.StatusUnprocessableEntity,
					Detail: "The event names no message this service sent."})
				return
			case err != nil:
				writeError(w, r, err)
				return
			case out.Duplicate:
				duplicates++
				events.WithLabelValues(name, "duplicate").Inc()
			default:
				recorded++
				events.WithLabelValues(name, "recorded").Inc()
				m.kinds.WithLabelValues(name, string(f.Kind)).Inc()
				addLogAttrs(r.Context(), slog.String("delivery_id", out.DeliveryID.String()), slog.String("event", string(f.Kind)),
					slog.Bool("suppressed", out.Suppressed))
			}
		}
		addLogAttrs(r.Context(), slog.String("webhook", name))
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
func newWebhookMetrics(reg prometheus.Registerer, hooks map[string]mail.Webhook) webhookMetrics {
	providers := slices.Sorted(maps.Keys(hooks))
	kinds := []string{string(mail.FeedbackDelivered), string(mail.FeedbackDeferred), string(mail.FeedbackBounced), string(mail.FeedbackComplained)}
	return webhookMetrics{
		requests: metric.CounterVec(reg, "sekali_provider_events_total",
			"Providers' webhook events, by provider and result: recorded, duplicate (the same event again), unknown_message, rejected (signature, credentials, age, body).",
			[]string{"provider", "result"}, providers, webhookResults),
		kinds: metric.CounterVec(reg, "sekali_delivery_feedback_total",
			"What providers reported about accepted messages, by provider and kind: delivered, deferred, bounced (permanent), complained.",
			[]string{"provider", "kind"}, providers, kinds),
	}
}
