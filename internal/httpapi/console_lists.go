package httpapi

import (
	"cmp"
	"errors"
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
)

// The console's lists: suppressions, blocks and API keys.

func handleConsoleSuppressions(ops *notify.Operator) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := page{Title: "Suppressions", Session: sessionOf(r), Query: deliveryQuery{Recipient: strings.TrimSpace(r.URL.Query().Get("recipient"))}}
		if p.Query.Recipient != "" {
			s, events, err := ops.Suppression(r.Context(), p.Query.Recipient)
			switch {
			case errors.Is(err, notify.ErrSuppressionNotFound):
				p.Error = p.Query.Recipient + " is not on the list."
				if p.SuppressionEvents, err = ops.SuppressionHistory(r.Context(), p.Query.Recipient); err != nil {
					setLogError(r.Context(), err)
				}
			case err != nil:
				p.Error = err.Error()
			default:
				p.Suppression, p.SuppressionEvents = &s, events
			}
		}
		var test *bool
		p.Mode, test = modeOf(r.URL.Query())
		p.ModeLinks = modeLinks("/admin/suppressions", url.Values{"mode": {p.Mode}})
		var err error
		if p.Suppressions, err = ops.SuppressionsOf(r.Context(), 100, test); err != nil {
			setLogError(r.Context(), err)
			consoleError(w, r, http.StatusInternalServerError, "The suppression list could not be read; try again.")
			return
		}
		render(w, r, http.StatusOK, "suppressions", p)
	})
}

// handleConsoleSuppress puts a recipient on the list (remove false) or
// takes one off, with the operator's note; then shows the entry.
func handleConsoleSuppress(ops *notify.Operator, remove bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		recipient, note := strings.TrimSpace(r.PostFormValue("recipient")), strings.TrimSpace(r.PostFormValue("note"))
		if note == "" {
			consoleError(w, r, http.StatusUnprocessableEntity, "Say why in the note: the list's history keeps it.")
			return
		}
		var err error
		if remove {
			err = ops.Unsuppress(r.Context(), recipient, note, sessionOf(r).Actor())
		} else {
			_, _, err = ops.Suppress(r.Context(), recipient, note, sessionOf(r).Actor())
		}
		switch {
		case errors.Is(err, mail.ErrInvalidAddress):
			consoleError(w, r, http.StatusUnprocessableEntity, "Recipient: "+err.Error())
			return
		case errors.Is(err, notify.ErrSuppressionNotFound):
			consoleError(w, r, http.StatusNotFound, "This address is not on the list.")
			return
		case err != nil:
			setLogError(r.Context(), err)
			consoleError(w, r, http.StatusInternalServerError, "The list could not be changed: "+err.Error())
			return
		}
		http.Redirect(w, r, "/admin/suppressions?"+url.Values{"recipient": {recipient}}.Encode(), http.StatusSeeOther)
	})
}

func handleConsoleBlocks(ops *notify.Operator) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bs, err := ops.Blocks(r.Context())
		if err != nil {
			setLogError(r.Context(), err)
			consoleError(w, r, http.StatusInternalServerError, "The blocks could not be read; try again.")
			return
		}
		render(w, r, http.StatusOK, "blocks", page{Title: "Blocks", Session: sessionOf(r), Blocks: bs})
	})
}

func handleConsoleAddBlock(ops *notify.Operator) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind, value := r.PostFormValue("kind"), strings.TrimSpace(r.PostFormValue("value"))
		reason := strings.TrimSpace(r.PostFormValue("reason"))
		ttl, err := time.ParseDuration(strings.TrimSpace(r.PostFormValue("ttl")))
		switch {
		case kind != "recipient" && kind != "key":
			consoleError(w, r, http.StatusUnprocessableEntity, "Kind: recipient or key.")
			return
		case value == "" || reason == "":
			consoleError(w, r, http.StatusUnprocessableEntity, "Say what to block and why.")
			return
		case err != nil || ttl <= 0 || ttl > maxBlockTTL:
			consoleError(w, r, http.StatusUnprocessableEntity, "For: a duration such as 30m or 6h, at most "+maxBlockTTL.String()+".")
			return
		}
		addLogAttrs(r.Context(), slog.String("action", "block"), slog.String("kind", kind))
		if _, err := ops.AddBlock(r.Context(), sessionOf(r).Actor(), kind, value, reason, ttl); err != nil {
			if errors.Is(err, mail.ErrInvalidAddress) {
				consoleError(w, r, http.StatusUnprocessableEntity, "Recipient: "+err.Error())
				return
			}
			setLogError(r.Context(), err)
			consoleError(w, r, http.StatusInternalServerError, "The block could not be added: "+err.Error())
			return
		}
		http.Redirect(w, r, "/admin/blocks", http.StatusSeeOther)
	})
}

func handleConsoleRemoveBlock(ops *notify.Operator) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
		if err == nil {
			addLogAttrs(r.Context(), slog.String("action", "lift-block"), slog.Int64("block_id", id))
			err = ops.RemoveBlock(r.Context(), sessionOf(r).Actor(), id)
		}
		switch {
		case err == nil:
			http.Redirect(w, r, "/admin/blocks", http.StatusSeeOther)
		case errors.Is(err, notify.ErrBlockNotFound), errors.Is(err, strconv.ErrSyntax), errors.Is(err, strconv.ErrRange):
			consoleError(w, r, http.StatusNotFound, "No block has this id: it may have expired.")
		default:
			setLogError(r.Context(), err)
			consoleError(w, r, http.StatusInternalServerError, "The block could not be lifted: "+err.Error())
		}
	})
}

// handleConsoleKeys lists the API keys, revoked ones too.
func handleConsoleKeys(keys *apikey.Service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		renderKeys(w, r, keys, http.StatusOK, "", "")
	})
}

// renderKeys shows the keys page, live and test or of the mode the
// query asks for: secret is a key just made, shown this once; problem
// what was wrong with a key to make.
func renderKeys(w http.ResponseWriter, r *http.Request, keys *apikey.Service, status int, secret, problem string) {
	ks, err := keys.List(r.Context())
	if err != nil {
		setLogError(r.Context(), err)
		consoleError(w, r, http.StatusInternalServerError, "The keys could not be read; try again.")
		return
	}
	mode, test := modeOf(r.URL.Query())
	if test != nil {
		ks = slices.DeleteFunc(ks, func(k apikey.Key) bool { return k.Test() != *test })
	}
	render(w, r, status, "api-keys", page{Title: "API keys", Session: sessionOf(r), Keys: ks, Scopes: apikey.Scopes,
		NewSecret: secret, Error: problem, Mode: mode, ModeLinks: modeLinks("/admin/api-keys", url.Values{"mode": {mode}})})
}

func handleConsoleCreateKey(keys *apikey.Service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, problem := apikey.CheckName(r.PostFormValue("name"))
		scopes, err := apikey.ParseScopes(r.PostForm["scopes"])
		switch {
		case name == "" || problem != "":
			renderKeys(w, r, keys, http.StatusUnprocessableEntity, "", "Name: "+cmp.Or(problem, "say whose key this is."))
			return
		case err != nil:
			renderKeys(w, r, keys, http.StatusUnprocessableEntity, "", "Scopes: choose at least one.")
			return
		}
		mode := apikey.ModeLive
		if r.PostFormValue("mode") == string(apikey.ModeTest) {
			mode = apikey.ModeTest
		}
		k, secret, err := keys.CreateReplacing(r.Context(), sessionOf(r).Actor(), name, scopes, uuid.Nil, mode)
		if errors.Is(err, apikey.ErrBadMode) {
			renderKeys(w, r, keys, http.StatusUnprocessableEntity, "", "Test key: a test key cannot have the admin scope.")
			return
		}
		if err != nil {
			setLogError(r.Context(), err)
			consoleError(w, r, http.StatusInternalServerError, "The key could not be created: "+err.Error())
			return
		}
		addLogAttrs(r.Context(), slog.String("action", "create-key"), slog.String("api_key", k.Prefix))
		renderKeys(w, r, keys, http.StatusCreated, secret, "")
	})
}

func handleConsoleRevokeKey(keys *apikey.Service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := uuid.Parse(chi.URLParam(r, "id"))
		if err != nil {
			consoleError(w, r, http.StatusNotFound, "No API key has this id.")
			return
		}
		addLogAttrs(r.Context(), slog.String("action", "revoke-key"), slog.String("api_key_id", id.String()))
		_, err = keys.Revoke(r.Context(), sessionOf(r).Actor(), id)
		switch {
		case err == nil:
			http.Redirect(w, r, "/admin/api-keys", http.StatusSeeOther)
		case errors.Is(err, apikey.ErrNotFound):
			consoleError(w, r, http.StatusNotFound, "No API key has this id.")
		default:
			setLogError(r.Context(), err)
			consoleError(w, r, http.StatusInternalServerError, "The key could not be revoked: "+err.Error())
		}
	})
}
