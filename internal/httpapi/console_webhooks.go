package httpapi

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/webhookout"
)

// The console's webhooks: the shop's endpoints (webhookout.Service, as
// the admin API's), each with its newest messages and what the receiver
// answered; adding one, rotating its secret (shown this once), disabling
// and enabling it, replaying its events. The service records each
// change under the operator's name.

// webhookMessages is how many of an endpoint's newest messages its page
// shows.
const webhookMessages = 50

// webhookView is one endpoint's page: the endpoint, its messages (of the
// mode asked for), and what was just done to it.
type webhookView struct {
	Endpoint webhookout.Endpoint
	Messages []webhookout.Message
	Replayed string // "3 events", after a replay
}

func handleConsoleWebhooks(hooks *webhookout.Service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		renderWebhooks(w, r, hooks, http.StatusOK, "", "")
	})
}

// renderWebhooks shows the endpoints: secret is the one an endpoint just
// made has, shown this once; problem what was wrong with one to add.
func renderWebhooks(w http.ResponseWriter, r *http.Request, hooks *webhookout.Service, status int, secret, problem string) {
	eps, err := hooks.List(r.Context())
	if err != nil {
		setLogError(r.Context(), err)
		consoleError(w, r, http.StatusInternalServerError, "The webhook endpoints could not be read; try again.")
		return
	}
	render(w, r, status, "webhooks", page{Title: "Webhooks", Session: sessionOf(r), Endpoints: eps, EventTypes: webhookout.Types,
		NewSecret: secret, Error: problem})
}

// handleConsoleAddWebhook registers an endpoint for the checked types
// (none: every type) and shows its secret, this once.
func handleConsoleAddWebhook(hooks *webhookout.Service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rawURL, description := strings.TrimSpace(r.PostFormValue("url")), strings.TrimSpace(r.PostFormValue("description"))
		if d := textProblem(description, 200, true); d != "" {
			renderWebhooks(w, r, hooks, http.StatusUnprocessableEntity, "", "Description: "+d+".")
			return
		}
		if rawURL == "" {
			renderWebhooks(w, r, hooks, http.StatusUnprocessableEntity, "", "URL: say where the events go.")
			return
		}
		ep, secret, err := hooks.Create(r.Context(), sessionOf(r).Actor(), rawURL, r.PostForm["event_types"], description)
		switch {
		case errors.Is(err, webhookout.ErrInvalid):
			renderWebhooks(w, r, hooks, http.StatusUnprocessableEntity, "", "Not added: "+strings.TrimPrefix(err.Error(), webhookout.ErrInvalid.Error()+": ")+".")
			return
		case err != nil:
			setLogError(r.Context(), err)
			consoleError(w, r, http.StatusInternalServerError, "The endpoint could not be added: "+err.Error())
			return
		}
		addLogAttrs(r.Context(), slog.String("action", "webhook-endpoint-create"), slog.String("endpoint", ep.ID.String()))
		renderWebhooks(w, r, hooks, http.StatusCreated, secret, "")
	})
}

// handleConsoleWebhook shows one endpoint and its newest messages, live
// and test, or of one mode (?mode=).
func handleConsoleWebhook(hooks *webhookout.Service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		view, ok := consoleWebhook(w, r, hooks)
		if !ok {
			return
		}
		if n, err := strconv.Atoi(r.URL.Query().Get("replayed")); err == nil && n >= 0 {
			view.Replayed = strconv.Itoa(n) + map[bool]string{true: " event", false: " events"}[n == 1]
		}
		renderWebhook(w, r, http.StatusOK, view, "")
	})
}

// consoleWebhook reads the endpoint of the URL with its messages of the
// mode the query asks for, or answers the page.
func consoleWebhook(w http.ResponseWriter, r *http.Request, hooks *webhookout.Service) (webhookView, bool) {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		consoleError(w, r, http.StatusNotFound, "No webhook endpoint has this id.")
		return webhookView{}, false
	}
	_, test := modeOf(r.URL.Query())
	ep, msgs, err := hooks.Get(r.Context(), id, webhookMessages, test)
	switch {
	case errors.Is(err, webhookout.ErrNotFound):
		consoleError(w, r, http.StatusNotFound, "No webhook endpoint has this id.")
		return webhookView{}, false
	case err != nil:
		setLogError(r.Context(), err)
		consoleError(w, r, http.StatusInternalServerError, "The webhook endpoint could not be read; try again.")
		return webhookView{}, false
	}
	return webhookView{Endpoint: ep, Messages: msgs}, true
}

// renderWebhook shows an endpoint's page; secret is a new one, shown
// this once.
func renderWebhook(w http.ResponseWriter, r *http.Request, status int, view webhookView, secret string) {
	mode, _ := modeOf(r.URL.Query())
	render(w, r, status, "webhook", page{Title: "Webhook endpoint", Session: sessionOf(r), Webhook: view, NewSecret: secret,
		Mode: mode, ModeLinks: modeLinks("/admin/webhooks/"+view.Endpoint.ID.String(), r.URL.Query())})
}

// consoleWebhookAction does act to the endpoint of the URL, by the
// operator, and answers with what act says: the endpoint's page again,
// usually.
func consoleWebhookAction(hooks *webhookout.Service, name string, act func(w http.ResponseWriter, r *http.Request, id uuid.UUID, actor string) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := uuid.Parse(chi.URLParam(r, "id"))
		if err != nil {
			consoleError(w, r, http.StatusNotFound, "No webhook endpoint has this id.")
			return
		}
		addLogAttrs(r.Context(), slog.String("action", name), slog.String("endpoint", id.String()))
		switch err := act(w, r, id, sessionOf(r).Actor()); {
		case err == nil:
		case errors.Is(err, webhookout.ErrNotFound):
			consoleError(w, r, http.StatusNotFound, "No webhook endpoint has this id.")
		case errors.Is(err, errConsoleInput):
			msg := strings.TrimPrefix(err.Error(), errConsoleInput.Error()+": ")
			consoleError(w, r, http.StatusUnprocessableEntity, strings.ToUpper(msg[:1])+msg[1:]+".")
		default:
			setLogError(r.Context(), err)
			consoleError(w, r, http.StatusInternalServerError, name+" failed: "+err.Error())
		}
	})
}

// errConsoleInput: what the operator typed is refused; the error says why.
var errConsoleInput = errors.New("refused")

// handleConsoleRotateWebhook gives the endpoint a new secret and shows
// it, this once; the previous one signs too for a day.
func handleConsoleRotateWebhook(hooks *webhookout.Service) http.Handler {
	return consoleWebhookAction(hooks, "webhook-secret-rotate", func(w http.ResponseWriter, r *http.Request, id uuid.UUID, actor string) error {
		_, secret, err := hooks.Rotate(r.Context(), actor, id)
		if err != nil {
			return err
		}
		if view, ok := consoleWebhook(w, r, hooks); ok {
			renderWebhook(w, r, http.StatusOK, view, secret)
		}
		return nil
	})
}

// handleConsoleSetWebhook disables the endpoint, with the operator's
// reason, or enables it again.
func handleConsoleSetWebhook(hooks *webhookout.Service, enabled bool) http.Handler {
	name := map[bool]string{true: "webhook-endpoint-enable", false: "webhook-endpoint-disable"}[enabled]
	return consoleWebhookAction(hooks, name, func(w http.ResponseWriter, r *http.Request, id uuid.UUID, actor string) error {
		reason := strings.TrimSpace(r.PostFormValue("reason"))
		if problem := textProblem(reason, 500, false); problem != "" {
			return fmt.Errorf("%w: reason: %s", errConsoleInput, problem)
		}
		if !enabled && reason == "" {
			return fmt.Errorf("%w: say why in the reason: the endpoint and the activity keep it", errConsoleInput)
		}
		if _, err := hooks.SetEnabled(r.Context(), actor, id, enabled, reason); err != nil {
			return err
		}
		http.Redirect(w, r, "/admin/webhooks/"+id.String(), http.StatusSeeOther)
		return nil
	})
}

// handleConsoleReplayWebhook sends again one message (webhook_id), or
// those created since a time (the form's UTC), under their own ids.
func handleConsoleReplayWebhook(hooks *webhookout.Service) http.Handler {
	return consoleWebhookAction(hooks, "webhook-replay", func(w http.ResponseWriter, r *http.Request, id uuid.UUID, actor string) error {
		msgID, rawSince := strings.TrimSpace(r.PostFormValue("webhook_id")), strings.TrimSpace(r.PostFormValue("since"))
		var since time.Time
		switch {
		case msgID == "" && rawSince == "":
			return fmt.Errorf("%w: say which event to send again, or since when", errConsoleInput)
		case rawSince != "":
			t, err := time.Parse(consoleTime, rawSince)
			if err != nil {
				return fmt.Errorf("%w: since: a time such as 2026-12-01T14:30 (UTC)", errConsoleInput)
			}
			since = t
		}
		n, err := hooks.Replay(r.Context(), actor, id, msgID, since, time.Time{})
		if err != nil {
			return err
		}
		addLogAttrs(r.Context(), slog.Int("replayed", n))
		http.Redirect(w, r, "/admin/webhooks/"+id.String()+"?"+url.Values{"replayed": {strconv.Itoa(n)}}.Encode(), http.StatusSeeOther)
		return nil
	})
}

// modeOf reads a list's live/test filter, ?mode=live or ?mode=test; any
// other value, or none, is both: "" and nil.
func modeOf(v url.Values) (string, *bool) {
	switch v.Get("mode") {
	case "live":
		return "live", new(false)
	case "test":
		return "test", new(true)
	}
	return "", nil
}

// modeLink is one choice of a list's live/test filter.
type modeLink struct {
	Label, Href string
	Current     bool
}

// modeLinks are the three choices of the live/test filter of the list at
// path, each keeping the query's other parameters (a page's one-time
// notes, such as replayed, aside).
func modeLinks(path string, q url.Values) []modeLink {
	current, _ := modeOf(q)
	var out []modeLink
	for _, m := range []struct{ mode, label string }{{"", "live and test"}, {"live", "live only"}, {"test", "test only"}} {
		v := url.Values{}
		for k, vs := range q {
			if k != "mode" && k != "replayed" {
				v[k] = vs
			}
		}
		if m.mode != "" {
			v.Set("mode", m.mode)
		}
		href := path
		if len(v) > 0 {
			href += "?" + v.Encode()
		}
		out = append(out, modeLink{Label: m.label, Href: href, Current: m.mode == current})
	}
	return out
}
