package httpapi

import (
	"context"
	"crypto/subtle"
	"embed"
	"errors"
	htmltemplate "html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/webhookout"
)

// The operator console: server-rendered pages under /admin/ over
// notify.Operator, with no logic of their own and no script. Operators
// sign in with an API key of the admin scope; every action is recorded
// under the key's name (apikey.Session.Actor).

//go:embed console/console.html
var consoleFiles embed.FS

//go:embed console/console.css
var consoleCSS []byte

// consolePages are the console's templates; details lays out an
// action's or a history row's JSON detail as labelled fields.
var consolePages = htmltemplate.Must(htmltemplate.New("console.html").Funcs(htmltemplate.FuncMap{"details": details}).
	ParseFS(consoleFiles, "console/console.html"))

// consolePolicy: the console's own style sheet and frames (the e-mail),
// nothing else; no script at all.
const consolePolicy = "default-src 'none'; style-src 'self'; frame-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// sessionCookie carries the console session; only its SHA-256 is stored.
const sessionCookie = "sekali_console"

// consolePageSize is how many deliveries a search page shows.
const consolePageSize = 50

// errNoProviderID: mark-sent without the provider's message id.
var errNoProviderID = errors.New("say which message at the provider this is")

// page is what a console page shows; each page fills its part.
type page struct {
	Title   string
	Error   string
	Session *apikey.Session

	Data         notify.QueueState // overview
	Held, Failed count
	LastHour     *lastHour // nil when the history could not be read
	// LastHourNarrow is the same hour laid out for a phone's width.
	LastHourNarrow *lastHour
	TestLastHour   int       // test notifications recorded in the last hour, not in LastHour
	QueueNow       *queueNow // nil when the queue could not be read
	Paces          []paceRow // the paced providers' budgets

	Query     deliveryQuery // deliveries
	Statuses  []notify.Status
	Templates []string
	Rows      []notify.Delivery
	Prev      string
	Next      string

	Delivery    notify.Delivery // one delivery
	Events      []notify.Event
	Email       emailView
	CanRetry    bool
	CanMarkSent bool
	CanCancel   bool

	MaxBulk int        // a bulk retry's most
	Bulk    bulkResult // a bulk retry, counted or done

	Suppressions      []notify.Suppression // the list's newest
	Suppression       *notify.Suppression  // the one looked up
	SuppressionEvents []notify.SuppressionEvent

	Blocks []notify.Block

	Keys      []apikey.Key
	Scopes    []apikey.Scope
	NewSecret string // a key just created, shown this once

	Activity []activityRow // what operators did, newest first (Prev, Next: its pages)

	Endpoints  []webhookout.Endpoint // the shop's webhook endpoints
	EventTypes []string              // the types one may subscribe to
	Webhook    webhookView           // one endpoint (NewSecret: a new one, shown this once)

	// Mode is a list's live/test filter ("", live, test), ModeLinks its
	// choices.
	Mode      string
	ModeLinks []modeLink
}

// bulkResult is a bulk retry: counted first, done on confirmation.
type bulkResult struct {
	Done            bool
	Count, Unqueued int
	Note            string
	Back            string // the search it came from
}

type sessionKey struct{}

func sessionOf(r *http.Request) *apikey.Session {
	s, _ := r.Context().Value(sessionKey{}).(*apikey.Session)
	return s
}

// render writes a console page with its security headers.
func render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", consolePolicy)
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "same-origin")
	w.WriteHeader(status)
	if err := consolePages.ExecuteTemplate(w, name, p); err != nil {
		setLogError(r.Context(), err)
	}
}

func consoleError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	render(w, r, status, "error", page{Title: http.StatusText(status), Error: msg, Session: sessionOf(r)})
}

// requireSession lets a request through with a live session, which it
// puts in the context; a POST must also carry the session's CSRF token
// and, if its browser says where it comes from, come from here. Without
// a session the browser is sent to sign in.
func requireSession(keys *apikey.Service) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, err := r.Cookie(sessionCookie)
			var s apikey.Session
			if err == nil {
				s, err = keys.Session(r.Context(), c.Value)
			}
			if err != nil {
				if !errors.Is(err, apikey.ErrInvalid) && !errors.Is(err, http.ErrNoCookie) {
					setLogError(r.Context(), err)
					consoleError(w, r, http.StatusInternalServerError, "The sessions cannot be read now; try again.")
					return
				}
				http.Redirect(w, r, "/admin/sign-in", http.StatusSeeOther)
				return
			}
			addLogAttrs(r.Context(), slog.String("operator", s.Actor()))
			r = r.WithContext(context.WithValue(r.Context(), sessionKey{}, &s))
			if r.Method == http.MethodPost {
				if !sameOrigin(r) || subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(s.CSRF)) != 1 {
					consoleError(w, r, http.StatusForbidden, "This form is stale or was not sent from the console: reload the page and try again.")
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

// sameOrigin is false when the browser names an Origin other than this
// host's; a request without one (an old browser) passes on the CSRF token.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// setSession sets (or, with an empty value, clears) the session cookie:
// HttpOnly, SameSite=Strict, Secure when served over TLS, for /admin/.
func setSession(w http.ResponseWriter, r *http.Request, value string, expires time.Time) {
	c := &http.Cookie{Name: sessionCookie, Value: value, Path: "/admin/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"}
	if value == "" {
		c.MaxAge = -1
	} else {
		c.Expires = expires
	}
	http.SetCookie(w, c)
}

func handleConsoleCSS() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		w.Header().Set("Cache-Control", "max-age=300")
		_, _ = w.Write(consoleCSS)
	})
}

func handleSignInForm() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		render(w, r, http.StatusOK, "sign-in", page{Title: "Sign in"})
	})
}

// handleSignIn starts a session for an operator key. A failed sign-in
// counts against its client address and the key prefix it names, as the
// admin API's failed tokens do (operatorGuard); past their backoff the
// answer is 429 before any look-up.
func handleSignIn(keys *apikey.Service, guard *operatorGuard, addr func(*http.Request) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client, key := addr(r), strings.TrimSpace(r.PostFormValue("key"))
		if wait := guard.wait(r.Context(), client, key, time.Now()); wait > 0 {
			retryAfter(w, wait)
			render(w, r, http.StatusTooManyRequests, "sign-in", page{Title: "Sign in",
				Error: "Too many failed sign-ins or admin API tokens from this address, or with this key; try again in " + wait.Round(time.Second).String() + "."})
			return
		}
		if !sameOrigin(r) {
			consoleError(w, r, http.StatusForbidden, "Sign in from the console's own page.")
			return
		}
		s, secret, err := keys.SignIn(r.Context(), key)
		switch {
		case errors.Is(err, apikey.ErrInvalid), errors.Is(err, apikey.ErrNotOperator):
			guard.failed(client, key, time.Now())
			addLogAttrs(r.Context(), slog.String("sign_in", "refused"))
			render(w, r, http.StatusUnauthorized, "sign-in", page{Title: "Sign in",
				Error: "That is not an operator key: a live API key of the admin scope."})
			return
		case err != nil:
			setLogError(r.Context(), err)
			consoleError(w, r, http.StatusInternalServerError, "Sign-in is not possible now; try again.")
			return
		}
		addLogAttrs(r.Context(), slog.String("operator", s.Actor()), slog.String("sign_in", "ok"))
		setSession(w, r, secret, s.Expires)
		http.Redirect(w, r, "/admin/", http.StatusSeeOther)
	})
}

func handleSignOut(keys *apikey.Service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie(sessionCookie); err == nil {
			if err := keys.SignOut(r.Context(), c.Value); err != nil {
				setLogError(r.Context(), err)
			}
		}
		setSession(w, r, "", time.Time{})
		http.Redirect(w, r, "/admin/sign-in", http.StatusSeeOther)
	})
}

// handleConsoleOverview shows the queue, the providers and the held and
// failed counts, and the last hour: the history by minute, the
// providers' states over it, the queue's depth now. Each part that
// cannot be read is left out and the page says why; the others show.
func handleConsoleOverview(ops *notify.Operator) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		p := page{Title: "Overview", Session: sessionOf(r)}
		now := time.Now()
		var errs []error
		var queueErr string
		var err error
		if p.Data, err = ops.Queue(ctx); err != nil {
			errs, queueErr = append(errs, err), err.Error()
		} else {
			q := newQueueNow(p.Data)
			p.QueueNow = &q
			p.Paces = newPaceRows(p.Data.Provider.Providers, now)
		}
		if p.Held, err = countOf(ctx, ops, notify.StatusHeld); err != nil {
			errs = append(errs, err)
		}
		if p.Failed, err = countOf(ctx, ops, notify.StatusFailed); err != nil {
			errs = append(errs, err)
		}
		if minutes, err := ops.LastHour(ctx, now); err != nil {
			errs = append(errs, err)
		} else {
			h := newLastHour(minutes, now, p.Data.Provider.Workers, queueErr)
			n := newLastHourIn(narrowChart, minutes, now, p.Data.Provider.Workers, queueErr)
			p.LastHour, p.LastHourNarrow = &h, &n
		}
		if p.TestLastHour, err = ops.TestRecordedSince(ctx, now.Add(-time.Hour)); err != nil {
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err != nil {
			setLogError(ctx, err)
			p.Error = "Part of the overview could not be read: " + strings.ReplaceAll(err.Error(), "\n", "; ")
		}
		render(w, r, http.StatusOK, "overview", p)
	})
}

// overviewCountLimit is where the overview stops counting held and
// failed deliveries: past it, the search says what there is.
const overviewCountLimit = 100

// count is a count that stopped at its limit: N, or N or more.
type count struct {
	N      int
	Capped bool // N is the limit: there may be more
}

// countOf counts the deliveries in status, up to overviewCountLimit.
func countOf(ctx context.Context, ops *notify.Operator, status notify.Status) (count, error) {
	n, err := ops.CountUpTo(ctx, status, overviewCountLimit)
	return count{N: n, Capped: n >= overviewCountLimit}, err
}

// handleConsoleQueue pauses or resumes all sending, or the later lane
// alone (the form's lane "later").
func handleConsoleQueue(ops *notify.Operator, pause bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		note := strings.TrimSpace(r.PostFormValue("note"))
		if note == "" {
			consoleError(w, r, http.StatusUnprocessableEntity, "Say why in the note.")
			return
		}
		act, name := ops.Resume, "resume"
		if pause {
			act, name = ops.Pause, "pause"
		}
		switch r.PostFormValue("lane") {
		case "":
		case "later":
			act, name = ops.ResumeLater, "resume the later lane"
			if pause {
				act, name = ops.PauseLater, "pause the later lane"
			}
		default:
			consoleError(w, r, http.StatusUnprocessableEntity, "There is no such lane: the queue has all sending and its later lane.")
			return
		}
		addLogAttrs(r.Context(), slog.String("action", name), slog.String("note", note))
		if err := act(r.Context(), sessionOf(r).Actor(), note); err != nil {
			if errors.Is(err, notify.ErrNotRecorded) {
				setLogError(r.Context(), err)
				consoleError(w, r, http.StatusInternalServerError, "Done ("+name+"), but the record of it in the activity could not be written: "+err.Error())
				return
			}
			setLogError(r.Context(), err)
			consoleError(w, r, http.StatusInternalServerError, name+" failed: "+err.Error())
			return
		}
		http.Redirect(w, r, "/admin/", http.StatusSeeOther)
	})
}
