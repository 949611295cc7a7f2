package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/textrule"
	"github.com/sekali-dev/sekali/internal/webhookout"
)

// Admin is what the operator API needs: its token and the operator
// service. With an empty Token the admin API answers 401 to everything.
type Admin struct {
	Token    string
	Ops      *notify.Operator
	Keys     *apikey.Service     // the backend's API keys, which operators create and revoke
	Webhooks *webhookout.Service // the shop's webhook endpoints
}

// adminDelivery is a delivery as operators see it: everything, including
// the recipient and the template data.
type adminDelivery struct {
	ID                uuid.UUID       `json:"id"`
	OrderID           uuid.UUID       `json:"order_id"`
	Template          string          `json:"template"`
	Recipient         string          `json:"recipient"`
	IdempotencyKey    string          `json:"idempotency_key"`
	KeyHash           string          `json:"key_hash"`
	Status            notify.Status   `json:"status"`
	Attempts          int             `json:"attempts"`
	LastError         string          `json:"last_error,omitempty"`
	ProviderMessageID string          `json:"provider_message_id,omitempty"`
	Provider          string          `json:"provider,omitempty"`
	ProviderPinned    bool            `json:"provider_pinned,omitempty"`
	MayHaveBeenSent   bool            `json:"may_have_been_sent,omitempty"`
	SettledBy         string          `json:"settled_by,omitempty"`
	SettledAt         *time.Time      `json:"settled_at,omitempty"`
	Owner             *uuid.UUID      `json:"owner,omitempty"`
	LeaseExpiresAt    *time.Time      `json:"lease_expires_at,omitempty"`
	HandedOverAt      *time.Time      `json:"handed_over_at,omitempty"`
	SendAt            *time.Time      `json:"send_at,omitempty"`
	TemplateData      json.RawMessage `json:"template_data"`
	CreatedAt         time.Time       `json:"created_at"`
	UpdatedAt         time.Time       `json:"updated_at"`
	SentAt            *time.Time      `json:"sent_at,omitempty"`
	Test              bool            `json:"test,omitempty"` // a test key's: it never reaches a provider
	// The provider's last report about the message, and when (its clock);
	// when it first reported a bounce or a complaint of it.
	ProviderEvent         mail.FeedbackKind `json:"provider_event,omitempty"`
	ProviderEventAt       *time.Time        `json:"provider_event_at,omitempty"`
	BouncedOrComplainedAt *time.Time        `json:"bounced_or_complained_at,omitempty"`
}

func toAdmin(d notify.Delivery) adminDelivery {
	a := adminDelivery{
		ID: d.ID, OrderID: d.OrderID, Template: d.Template, Recipient: d.Recipient,
		IdempotencyKey: d.IdempotencyKey, KeyHash: mail.KeyHash(d.IdempotencyKey), Status: d.Status,
		Attempts: d.Attempts, LastError: d.LastError, ProviderMessageID: d.ProviderMessageID,
		Provider: d.Provider, ProviderPinned: d.ProviderPinned, MayHaveBeenSent: d.MayHaveBeenSent(), Owner: d.Owner,
		SettledBy: d.SettledBy, SettledAt: d.SettledAt,
		LeaseExpiresAt: d.LeaseExpiresAt, HandedOverAt: d.HandedOverAt, SendAt: d.NotBefore, TemplateData: d.Data,
		CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt, SentAt: d.SentAt, Test: d.Test,
		BouncedOrComplainedAt: d.BouncedOrComplainedAt,
	}
	if r := d.ProviderEvent; r != nil {
		a.ProviderEvent, a.ProviderEventAt = r.Kind, &r.At
	}
	return a
}

// maxBlockTTL is the longest a block may last.
const maxBlockTTL = 30 * 24 * time.Hour

// adminRefusal is the one answer of the admin API to a bearer token that
// does not open it: an unknown key, a wrong secret, a revoked key, a
// live key without the admin scope and a wrong ADMIN_TOKEN alike, so
// that a refusal tells nothing about which keys exist.
const adminRefusal = "The token is not valid: not ADMIN_TOKEN, nor a live operator key (an API key of the admin scope)."

// requireAdmin lets a request through with the admin token, compared in
// constant time (of equal-length digests, so not even the token's length
// leaks), or with an operator's key (an API key of the admin scope),
// whose name its actions are then recorded under (actorOf). With no
// token set, operator keys alone open the admin API.
func requireAdmin(token string, keys keyChecker) func(http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got := bearer(r)
			if got == "" {
				deny(w, r, "sekali-admin", "Send Authorization: Bearer <ADMIN_TOKEN>, or an operator key (an API key of the admin scope).")
				return
			}
			if keys != nil && strings.HasPrefix(got, apikey.Prefix) {
				k, err := keys.Authenticate(r.Context(), got)
				switch {
				case errors.Is(err, apikey.ErrInvalid) || err == nil && !k.Has(apikey.ScopeAdmin):
					// A live key without the scope is refused as a
					// wrong one is: the admin API tells a caller
					// without its credentials nothing, not even that a
					// key is live.
					deny(w, r, "sekali-admin", adminRefusal)
					return
				case err != nil:
					writeError(w, r, err)
					return
				}
				actor := apikey.Session{Operator: k}.Actor()
				addLogAttrs(r.Context(), slog.Bool("admin", true), slog.String("operator", actor))
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), actorKey{}, actor)))
				return
			}
			have := sha256.Sum256([]byte(got))
			if token == "" || subtle.ConstantTimeCompare(have[:], want[:]) != 1 {
				deny(w, r, "sekali-admin", adminRefusal)
				return
			}
			addLogAttrs(r.Context(), slog.Bool("admin", true))
			next.ServeHTTP(w, r)
		})
	}
}

type actorKey struct{}

// textProblem says what is wrong with an operator's text, "" if nothing
// (and for "": whether a field may be empty is the caller's business).
// It is textrule.Problem. One-line fields (a block's value, a
// provider's message id, a filter) are held to the rule the checkout's
// are, as a key's name is (apikey.CheckName): no control characters, no
// line or paragraph separators, no bidirectional controls, something
// visible. Notes and reasons may run over lines, as a provider's reply
// quoted into one does; they take no control character but tab and line
// breaks (and PostgreSQL no NUL), no bidirectional controls either (which
// make a note read as something else to the next operator), and
// something visible.
func textProblem(s string, maxRunes int, oneLine bool) string {
	if s == "" {
		return ""
	}
	return textrule.Problem(s, maxRunes, oneLine)
}

// requiredText is textProblem for a field that must not be blank:
// missing when it is.
func requiredText(s, missing string, maxRunes int, oneLine bool) string {
	if strings.TrimSpace(s) == "" {
		return missing
	}
	return textProblem(s, maxRunes, oneLine)
}

// badRequest answers 400 for the query parameter pointer.
func badRequest(w http.ResponseWriter, r *http.Request, pointer, detail string) {
	writeProblem(w, r, problem{Type: typeInvalidQuery, Status: http.StatusBadRequest, Detail: detail,
		Errors: []fieldError{{Pointer: pointer, Detail: detail}}})
}

// validationFailed answers 422 with what is wrong with each field.
func validationFailed(w http.ResponseWriter, r *http.Request, fields ...fieldError) {
	writeProblem(w, r, problem{Type: typeValidation, Status: http.StatusUnprocessableEntity, Detail: "See errors.", Errors: fields})
}

// limitParam reads ?limit=, from 1 to 1000, def when it is absent; a bad
// one is answered with 400.
func limitParam(w http.ResponseWriter, r *http.Request, def int) (int, bool) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return def, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 1000 {
		badRequest(w, r, "limit", "limit must be from 1 to 1000")
		return 0, false
	}
	return n, true
}

func handleAdminListDeliveries(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		for _, name := range []string{"template", "key"} {
			if p := textProblem(q.Get(name), 500, true); p != "" {
				badRequest(w, r, name, name+" "+p)
				return
			}
		}
		f := notify.Filter{Template: q.Get("template"), Key: q.Get("key")}
		if s := q.Get("status"); s != "" {
			if !slices.Contains(notify.Statuses, notify.Status(s)) {
				badRequest(w, r, "status", "status must be one of "+strings.Trim(fmt.Sprint(notify.Statuses), "[]"))
				return
			}
			f.Status = notify.Status(s)
		}
		if s := q.Get("order_id"); s != "" {
			id, err := uuid.Parse(s)
			if err != nil {
				badRequest(w, r, "order_id", "order_id must be a UUID")
				return
			}
			f.OrderID = &id
		}
		if s := q.Get("older_than"); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				badRequest(w, r, "older_than", "older_than must be a positive duration such as 10m")
				return
			}
			f.OlderThan = d
		}
		switch q.Get("bounced_or_complained") {
		case "", "false":
		case "true":
			f.BouncedOrComplained = true
		default:
			badRequest(w, r, "bounced_or_complained", "bounced_or_complained must be true or false")
			return
		}
		limit, ok := limitParam(w, r, 100)
		if !ok {
			return
		}
		f.Limit = limit
		ds, err := a.Ops.List(r.Context(), f)
		if err != nil {
			writeError(w, r, err)
			return
		}
		out := make([]adminDelivery, len(ds))
		for i, d := range ds {
			out[i] = toAdmin(d)
		}
		writeJSON(w, http.StatusOK, map[string]any{"deliveries": out})
	})
}

// deliveryIDOf parses {id}; writes a 404 when it is not a UUID.
func deliveryIDOf(w http.ResponseWriter, r *http.Request) (uuid.UUID, bool) {
	return uuidParam(w, r, "No delivery has this id: delivery ids are UUIDs.")
}

func handleAdminGetDelivery(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := deliveryIDOf(w, r)
		if !ok {
			return
		}
		d, events, err := a.Ops.Get(r.Context(), id)
		if err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"delivery": toAdmin(d), "events": events})
	})
}

// adminActionRequest is what the body of cancel ({"note"}), retry
// ({"note", "unpin"}) or mark-sent ({"note", "provider_message_id"})
// said.
type adminActionRequest struct {
	Note              string
	ProviderMessageID string
	Unpin             bool
	NotAtProvider     bool // cancel: the operator checked the pinned provider's log
}

// The fields an action takes besides its note: each action's body is
// decoded into its own type, so that a field of another is refused.
type (
	noteRequest struct {
		Note string `json:"note"`
	}
	retryRequest struct {
		Note  string `json:"note"`
		Unpin bool   `json:"unpin"`
	}
	adminCancelRequest struct {
		Note          string `json:"note"`
		NotAtProvider bool   `json:"not_at_provider"`
	}
)

// adminAction names the action whose body decodeAdminAction reads.
type adminAction int

const (
	actionCancel adminAction = iota
	actionRetry
	actionMarkSent
)

// decodeAdminAction reads a delivery action's delivery id, from the
// path, and its optional JSON body.
func decodeAdminAction(w http.ResponseWriter, r *http.Request, action adminAction) (uuid.UUID, adminActionRequest, bool) {
	var req adminActionRequest
	id, ok := deliveryIDOf(w, r)
	if !ok || r.ContentLength == 0 {
		return id, req, ok
	}
	switch action {
	case actionMarkSent:
		var mr struct {
			Note              string `json:"note"`
			ProviderMessageID string `json:"provider_message_id"`
		}
		if !decodeJSON(w, r, &mr) {
			return id, req, false
		}
		req.Note, req.ProviderMessageID = mr.Note, mr.ProviderMessageID
	case actionRetry:
		var rr retryRequest
		if !decodeJSON(w, r, &rr) {
			return id, req, false
		}
		req.Note, req.Unpin = rr.Note, rr.Unpin
	case actionCancel:
		var cr adminCancelRequest
		if !decodeJSON(w, r, &cr) {
			return id, req, false
		}
		req.Note, req.NotAtProvider = cr.Note, cr.NotAtProvider
	default:
		var nr noteRequest
		if !decodeJSON(w, r, &nr) {
			return id, req, false
		}
		req.Note = nr.Note
	}
	var fields []fieldError
	if d := textProblem(req.Note, 1000, false); d != "" {
		fields = append(fields, fieldError{Pointer: "/note", Detail: d})
	}
	if d := textProblem(req.ProviderMessageID, 500, true); d != "" {
		fields = append(fields, fieldError{Pointer: "/provider_message_id", Detail: d})
	}
	if len(fields) > 0 {
		validationFailed(w, r, fields...)
		return id, req, false
	}
	return id, req, true
}

func actorOf(r *http.Request) string {
	if a, ok := r.Context().Value(actorKey{}).(string); ok {
		return a
	}
	return "admin:" + requestIDFrom(r.Context())
}

// handleAdminRetry moves a failed or held delivery back to pending (same
// key) and queues it. A sent delivery is refused with 409.
func handleAdminRetry(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, req, ok := decodeAdminAction(w, r, actionRetry)
		if !ok {
			return
		}
		d, queued, enqueueErr, err := a.Ops.Retry(r.Context(), id, actorOf(r), req.Note, req.Unpin)
		if err != nil {
			writeError(w, r, err)
			return
		}
		addLogAttrs(r.Context(), slog.String("action", "retry"), slog.String("delivery_id", id.String()))
		// The row is pending now; if the enqueue failed the reconciler
		// queues it after PENDING_REENQUEUE_AFTER.
		if enqueueErr != nil {
			addLogAttrs(r.Context(), slog.String("enqueue_error", enqueueErr.Error()))
		}
		writeJSON(w, http.StatusOK, map[string]any{"delivery": toAdmin(d), "queued": queued})
	})
}

// handleAdminCancel calls a pending delivery off, with the operator's
// note; one a worker has claimed (or that is settled) is refused with 409.
func handleAdminCancel(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, req, ok := decodeAdminAction(w, r, actionCancel)
		if !ok {
			return
		}
		d, err := a.Ops.Cancel(r.Context(), id, actorOf(r), req.Note, req.NotAtProvider)
		if err != nil {
			writeError(w, r, err)
			return
		}
		addLogAttrs(r.Context(), slog.String("action", "cancel"), slog.String("delivery_id", id.String()))
		writeJSON(w, http.StatusOK, map[string]any{"delivery": toAdmin(d)})
	})
}

// handleAdminMarkSent records that a held delivery was accepted, as the
// operator found at the provider.
func handleAdminMarkSent(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, req, ok := decodeAdminAction(w, r, actionMarkSent)
		if !ok {
			return
		}
		if strings.TrimSpace(req.ProviderMessageID) == "" {
			writeProblem(w, r, problem{Type: typeValidation, Status: http.StatusUnprocessableEntity,
				Detail: "Say which message at the provider this is.", Errors: []fieldError{{Pointer: "/provider_message_id", Detail: "is required"}}})
			return
		}
		d, err := a.Ops.MarkSent(r.Context(), id, strings.TrimSpace(req.ProviderMessageID), actorOf(r), req.Note)
		if err != nil {
			writeError(w, r, err)
			return
		}
		addLogAttrs(r.Context(), slog.String("action", "mark_sent"), slog.String("delivery_id", id.String()))
		writeJSON(w, http.StatusOK, map[string]any{"delivery": toAdmin(d)})
	})
}

func handleAdminQueue(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, err := a.Ops.Queue(r.Context())
		if err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"queue": q.Queue, "concurrency_per_worker": q.ConcurrencyPerWorker, "paused": q.Paused, "later_paused": q.LaterPaused, "size": q.Size,
			"pending": q.Pending, "active": q.Active, "scheduled": q.Scheduled, "retry": q.Retry,
			"archived": q.Archived, "completed": q.Completed, "processed_today": q.ProcessedToday, "latency_seconds": q.Latency.Seconds(),
			"later": q.Later, "later_latency_seconds": q.LaterLatency.Seconds(),
			"provider": q.Provider,
		})
	})
}

// handleAdminPause stops all sending, or the later lane's alone: workers
// take no tasks of it; recorded deliveries wait, nothing is lost.
func handleAdminPause(a Admin) http.Handler {
	return handleQueueSwitch(a, "pause", a.Ops.Pause, a.Ops.PauseLater, true)
}

// handleAdminResume restarts sending, or the later lane's alone.
func handleAdminResume(a Admin) http.Handler {
	return handleQueueSwitch(a, "resume", a.Ops.Resume, a.Ops.ResumeLater, false)
}

// queueRequest is the optional body of a pause or resume: why, and the
// lane it is for: "all" (the default: the queue and its later lane) or
// "later" (the later lane alone).
type queueRequest struct {
	Note string `json:"note"`
	Lane string `json:"lane"`
}

// handleQueueSwitch runs the operator's pause or resume of the whole
// queue (all) or of its later lane (later), with the note and the lane of
// its optional body, and answers with the queue it changed and whether
// that is paused now.
func handleQueueSwitch(a Admin, action string, all, later func(ctx context.Context, actor, note string) error, paused bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req queueRequest
		if r.ContentLength != 0 && !decodeJSON(w, r, &req) {
			return
		}
		var fields []fieldError
		if d := textProblem(req.Note, 1000, false); d != "" {
			fields = append(fields, fieldError{Pointer: "/note", Detail: d})
		}
		op, queue := all, a.Ops.QueueName()
		switch req.Lane {
		case "", "all":
		case "later":
			op, queue = later, notify.LaterQueue(queue)
		default:
			fields = append(fields, fieldError{Pointer: "/lane", Detail: `must be "all" or "later"`})
		}
		if len(fields) > 0 {
			validationFailed(w, r, fields...)
			return
		}
		if err := op(r.Context(), actorOf(r), strings.TrimSpace(req.Note)); err != nil {
			writeError(w, r, err)
			return
		}
		addLogAttrs(r.Context(), slog.String("action", action), slog.String("queue", queue))
		writeJSON(w, http.StatusOK, map[string]any{"queue": queue, "paused": paused})
	})
}

func handleAdminConcurrency(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			PerWorker *int `json:"per_worker"`
		}
		if !decodeJSON(w, r, &req) {
			return
		}
		if req.PerWorker == nil || *req.PerWorker < 0 || *req.PerWorker > 1000 {
			writeProblem(w, r, problem{Type: typeValidation, Status: http.StatusUnprocessableEntity,
				Detail: "per_worker is the most deliveries each worker handles at once, 1 to 1000; 0 restores WORKER_CONCURRENCY.",
				Errors: []fieldError{{Pointer: "/per_worker", Detail: "must be a whole number from 0 to 1000"}}})
			return
		}
		if err := a.Ops.SetConcurrency(r.Context(), actorOf(r), *req.PerWorker); err != nil {
			writeError(w, r, err)
			return
		}
		addLogAttrs(r.Context(), slog.String("action", "set_concurrency"), slog.Int("per_worker", *req.PerWorker))
		writeJSON(w, http.StatusOK, map[string]any{"queue": a.Ops.QueueName(), "concurrency_per_worker": *req.PerWorker})
	})
}

func handleAdminListBlocks(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		blocks, err := a.Ops.Blocks(r.Context())
		if err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"blocks": blocks})
	})
}

func handleAdminAddBlock(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Kind      string `json:"kind"`
			Value     string `json:"value"`
			Reason    string `json:"reason"`
			ExpiresIn string `json:"expires_in"`
		}
		if !decodeJSON(w, r, &req) {
			return
		}
		var fields []fieldError
		if req.Kind != "key" && req.Kind != "recipient" {
			fields = append(fields, fieldError{Pointer: "/kind", Detail: "must be key or recipient"})
		}
		if d := requiredText(req.Value, "must not be empty", 500, true); d != "" {
			fields = append(fields, fieldError{Pointer: "/value", Detail: d})
		}
		if d := requiredText(req.Reason, "must say why, for the next person on call", 1000, false); d != "" {
			fields = append(fields, fieldError{Pointer: "/reason", Detail: d})
		}
		ttl, err := time.ParseDuration(req.ExpiresIn)
		if err != nil || ttl < time.Second || ttl > maxBlockTTL {
			fields = append(fields, fieldError{Pointer: "/expires_in", Detail: "must be a duration from 1s to 720h, such as 2h"})
		}
		if len(fields) > 0 {
			validationFailed(w, r, fields...)
			return
		}
		b, err := a.Ops.AddBlock(r.Context(), actorOf(r), req.Kind, strings.TrimSpace(req.Value), strings.TrimSpace(req.Reason), ttl)
		if errors.Is(err, mail.ErrInvalidAddress) {
			validationFailed(w, r, fieldError{Pointer: "/value", Detail: err.Error()})
			return
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		addLogAttrs(r.Context(), slog.String("action", "block"), slog.Int64("block_id", b.ID), slog.String("kind", b.Kind))
		writeJSON(w, http.StatusCreated, b)
	})
}

func handleAdminDeleteBlock(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
		if err != nil {
			writeProblem(w, r, problem{Type: typeNotFound, Status: http.StatusNotFound, Detail: "No block has this id."})
			return
		}
		if err := a.Ops.RemoveBlock(r.Context(), actorOf(r), id); err != nil {
			writeError(w, r, err)
			return
		}
		addLogAttrs(r.Context(), slog.String("action", "unblock"), slog.Int64("block_id", id))
		w.WriteHeader(http.StatusNoContent)
	})
}

func handleAdminListKeys(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys, err := a.Keys.List(r.Context())
		if err != nil {
			writeError(w, r, err)
			return
		}
		if keys == nil {
			keys = []apikey.Key{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"api_keys": keys})
	})
}

// handleAdminCreateKey makes a key for the shop's backend and answers
// with its secret, the only time it is shown. With "replaces", the key
// of a rotation: it takes over the old key's notifications (its owner).
func handleAdminCreateKey(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Name     string    `json:"name"`
			Scopes   []string  `json:"scopes"`
			Replaces uuid.UUID `json:"replaces"`
			Mode     string    `json:"mode"`
		}
		if !decodeJSON(w, r, &req) {
			return
		}
		var fields []fieldError
		mode, err := apikey.ParseMode(req.Mode)
		if err != nil {
			fields = append(fields, fieldError{Pointer: "/mode", Detail: "must be live or test"})
		}
		name, problem := apikey.CheckName(req.Name)
		if name == "" {
			problem = "must say whose key this is, e.g. shop-backend-2026-12"
		}
		if problem != "" {
			fields = append(fields, fieldError{Pointer: "/name", Detail: problem})
		}
		scopes, err := apikey.ParseScopes(req.Scopes)
		if err != nil {
			fields = append(fields, fieldError{Pointer: "/scopes", Detail: err.Error()})
		}
		if len(fields) > 0 {
			validationFailed(w, r, fields...)
			return
		}
		k, secret, err := a.Keys.CreateReplacing(r.Context(), actorOf(r), name, scopes, req.Replaces, mode)
		if errors.Is(err, apikey.ErrNotFound) {
			validationFailed(w, r, fieldError{Pointer: "/replaces", Detail: "is no API key's id (GET /admin/v1/api-keys lists them)"})
			return
		}
		if errors.Is(err, apikey.ErrBadMode) {
			validationFailed(w, r, fieldError{Pointer: "/mode", Detail: strings.TrimPrefix(err.Error(), apikey.ErrBadMode.Error()+": ")})
			return
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		addLogAttrs(r.Context(), slog.String("action", "create_api_key"), slog.String("api_key", k.Prefix))
		writeJSON(w, http.StatusCreated, map[string]any{"api_key": k, "secret": secret})
	})
}

func handleAdminRevokeKey(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := uuidParam(w, r, "No API key has this id.")
		if !ok {
			return
		}
		k, err := a.Keys.Revoke(r.Context(), actorOf(r), id)
		if err != nil {
			writeError(w, r, err)
			return
		}
		addLogAttrs(r.Context(), slog.String("action", "revoke_api_key"), slog.String("api_key", k.Prefix))
		writeJSON(w, http.StatusOK, map[string]any{"api_key": k})
	})
}

// handleAdminListActions lists what operators did, newest first:
// ?limit= of them (100 by default), older than the action ?before= (the
// last id of the previous page) when it is set.
func handleAdminListActions(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit, ok := limitParam(w, r, 100)
		if !ok {
			return
		}
		before, ok := beforeParam(w, r)
		if !ok {
			return
		}
		actions, err := a.Ops.Actions(r.Context(), before, limit)
		if err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"actions": actions})
	})
}

// beforeParam reads ?before=, the id of an action (0 when absent); a bad
// one is answered with 400.
func beforeParam(w http.ResponseWriter, r *http.Request) (int64, bool) {
	s := r.URL.Query().Get("before")
	if s == "" {
		return 0, true
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 {
		badRequest(w, r, "before", "before must be the id of an action, a positive whole number")
		return 0, false
	}
	return n, true
}

func handleAdminListSuppressions(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit, ok := limitParam(w, r, 100)
		if !ok {
			return
		}
		list, err := a.Ops.Suppressions(r.Context(), limit)
		if err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"suppressions": list})
	})
}

func handleAdminGetSuppression(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, events, err := a.Ops.Suppression(r.Context(), recipientParam(r))
		if errors.Is(err, mail.ErrInvalidAddress) {
			err = notify.ErrSuppressionNotFound // an address that is not one is on no list
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"suppression": s, "events": events})
	})
}

// handleAdminAddSuppression puts an address on the list by an operator's
// decision: 201, or 200 when it was there already.
func handleAdminAddSuppression(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Recipient string `json:"recipient"`
			Note      string `json:"note"`
		}
		if !decodeJSON(w, r, &req) {
			return
		}
		var fields []fieldError
		if _, err := mail.NormalizeAddress(req.Recipient); err != nil {
			fields = append(fields, fieldError{Pointer: "/recipient", Detail: err.Error()})
		}
		if d := requiredText(req.Note, "must say why, for the record", 1000, false); d != "" {
			fields = append(fields, fieldError{Pointer: "/note", Detail: d})
		}
		if len(fields) > 0 {
			validationFailed(w, r, fields...)
			return
		}
		s, added, err := a.Ops.Suppress(r.Context(), req.Recipient, strings.TrimSpace(req.Note), actorOf(r))
		if err != nil {
			writeError(w, r, err)
			return
		}
		addLogAttrs(r.Context(), slog.String("action", "suppress"), slog.String("recipient_hash", mail.KeyHash(s.Recipient)))
		status := http.StatusOK
		if added {
			status = http.StatusCreated
		}
		writeJSON(w, status, map[string]any{"suppression": s})
	})
}

// handleAdminRemoveSuppression takes an address off the list; ?note= says
// why, for the record.
func handleAdminRemoveSuppression(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		note := strings.TrimSpace(r.URL.Query().Get("note"))
		if d := requiredText(note, "must say why the address may be written to again", 1000, false); d != "" {
			badRequest(w, r, "note", "note "+d)
			return
		}
		err := a.Ops.Unsuppress(r.Context(), recipientParam(r), note, actorOf(r))
		if errors.Is(err, mail.ErrInvalidAddress) {
			err = notify.ErrSuppressionNotFound
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		addLogAttrs(r.Context(), slog.String("action", "unsuppress"))
		w.WriteHeader(http.StatusNoContent)
	})
}

// recipientParam is the address in the path, as sent or percent-encoded
// (gone%40example.com); one that does not decode is no address.
func recipientParam(r *http.Request) string {
	v, err := url.PathUnescape(chi.URLParam(r, "recipient"))
	if err != nil {
		return ""
	}
	return v
}
