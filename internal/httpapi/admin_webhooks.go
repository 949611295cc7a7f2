package httpapi

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/webhookout"
)

// The webhook endpoints of the shop (webhookout): where it hears what
// happened to its notifications.

// endpointOf reads the {id} of a webhook endpoint, or answers 404.
func endpointOf(w http.ResponseWriter, r *http.Request) (uuid.UUID, bool) {
	return uuidParam(w, r, "No webhook endpoint has this id.")
}

// webhookError answers an error of webhookout.
func webhookError(w http.ResponseWriter, r *http.Request, pointer string, err error) {
	switch {
	case errors.Is(err, webhookout.ErrNotFound):
		writeProblem(w, r, problem{Type: typeNotFound, Status: http.StatusNotFound, Detail: "No webhook endpoint has this id."})
	case errors.Is(err, webhookout.ErrInvalid):
		validationFailed(w, r, fieldError{Pointer: pointer, Detail: strings.TrimPrefix(err.Error(), webhookout.ErrInvalid.Error()+": ")})
	default:
		writeError(w, r, err)
	}
}

func handleAdminListWebhookEndpoints(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		eps, err := a.Webhooks.List(r.Context())
		if err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"webhook_endpoints": eps})
	})
}

func handleAdminCreateWebhookEndpoint(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			URL         string   `json:"url"`
			EventTypes  []string `json:"event_types"`
			Description string   `json:"description"`
		}
		if !decodeJSON(w, r, &req) {
			return
		}
		if d := textProblem(req.Description, 200, true); d != "" {
			validationFailed(w, r, fieldError{Pointer: "/description", Detail: d})
			return
		}
		ep, secret, err := a.Webhooks.Create(r.Context(), actorOf(r), strings.TrimSpace(req.URL), req.EventTypes, strings.TrimSpace(req.Description))
		if err != nil {
			pointer := "/url"
			if strings.Contains(err.Error(), "event type") {
				pointer = "/event_types"
			}
			webhookError(w, r, pointer, err)
			return
		}
		addLogAttrs(r.Context(), slog.String("action", "webhook-endpoint-create"), slog.String("endpoint", ep.ID.String()))
		writeJSON(w, http.StatusCreated, map[string]any{"webhook_endpoint": ep, "secret": secret})
	})
}

func handleAdminGetWebhookEndpoint(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := endpointOf(w, r)
		if !ok {
			return
		}
		ep, msgs, err := a.Webhooks.Get(r.Context(), id, 100, nil)
		if err != nil {
			webhookError(w, r, "", err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"webhook_endpoint": ep, "messages": msgs})
	})
}

func handleAdminDeleteWebhookEndpoint(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := endpointOf(w, r)
		if !ok {
			return
		}
		if err := a.Webhooks.Delete(r.Context(), actorOf(r), id); err != nil {
			webhookError(w, r, "", err)
			return
		}
		addLogAttrs(r.Context(), slog.String("action", "webhook-endpoint-delete"), slog.String("endpoint", id.String()))
		w.WriteHeader(http.StatusNoContent)
	})
}

func handleAdminRotateWebhookSecret(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := endpointOf(w, r)
		if !ok {
			return
		}
		ep, secret, err := a.Webhooks.Rotate(r.Context(), actorOf(r), id)
		if err != nil {
			webhookError(w, r, "", err)
			return
		}
		addLogAttrs(r.Context(), slog.String("action", "webhook-secret-rotate"), slog.String("endpoint", id.String()))
		writeJSON(w, http.StatusOK, map[string]any{"webhook_endpoint": ep, "secret": secret})
	})
}

// handleAdminSetWebhookEndpoint disables (with a reason) or enables an
// endpoint.
func handleAdminSetWebhookEndpoint(a Admin, enabled bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := endpointOf(w, r)
		if !ok {
			return
		}
		var req struct {
			Reason string `json:"reason"`
		}
		if r.ContentLength != 0 && !decodeJSON(w, r, &req) {
			return
		}
		if d := textProblem(req.Reason, 500, false); d != "" {
			validationFailed(w, r, fieldError{Pointer: "/reason", Detail: d})
			return
		}
		reason := strings.TrimSpace(req.Reason)
		if reason == "" {
			reason = "disabled by " + actorOf(r)
		}
		ep, err := a.Webhooks.SetEnabled(r.Context(), actorOf(r), id, enabled, reason)
		if err != nil {
			webhookError(w, r, "", err)
			return
		}
		addLogAttrs(r.Context(), slog.String("endpoint", id.String()), slog.Bool("enabled", enabled))
		writeJSON(w, http.StatusOK, map[string]any{"webhook_endpoint": ep})
	})
}

// handleAdminReplayWebhooks sends again one message (webhook_id) or those
// of a time range, under their own webhook-ids.
func handleAdminReplayWebhooks(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := endpointOf(w, r)
		if !ok {
			return
		}
		var req struct {
			WebhookID string     `json:"webhook_id"`
			Since     *time.Time `json:"since"`
			Until     *time.Time `json:"until"`
		}
		if !decodeJSON(w, r, &req) {
			return
		}
		if req.WebhookID == "" && req.Since == nil {
			validationFailed(w, r, fieldError{Pointer: "", Detail: "name a webhook_id, or a time range from since (and until, default now)"})
			return
		}
		var since, until time.Time
		if req.Since != nil {
			since = *req.Since
		}
		if req.Until != nil {
			until = *req.Until
		}
		n, err := a.Webhooks.Replay(r.Context(), actorOf(r), id, req.WebhookID, since, until)
		if err != nil {
			webhookError(w, r, "", err)
			return
		}
		addLogAttrs(r.Context(), slog.String("action", "webhook-replay"), slog.String("endpoint", id.String()), slog.Int("replayed", n))
		writeJSON(w, http.StatusOK, map[string]any{"replayed": n})
	})
}
