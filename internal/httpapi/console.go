package httpapi

import (
	"cmp"
	"context"
	"crypto/subtle"
	"embed"
	"errors"
	htmltemplate "html/template"
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
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
)

// The operator console: server-rendered pages under /admin/ over
// notify.Operator, with no logic of their own and no script. Operators
// sign in with an API key of the admin scope; every action is recorded
// under the key's name (apikey.Session.Actor).

//go:embed console/console.html console/console.css
var consoleFiles embed.FS

var (
	consolePages = htmltemplate.Must(htmltemplate.ParseFS(consoleFiles, "console/console.html"))
	consoleCSS   = must(consoleFiles.ReadFile("console/console.css"))
)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// consolePolicy: the console's own style sheet and frames (the e-mail),
// nothing else; no script at all.
const consolePolicy = "default-src 'none'; style-src 'self'; frame-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// sessionCookie carries the console session; only its SHA-256 is stored.
const sessionCookie = "sekali_console"

// consolePageSize is how many deliveries a search page shows.
const consolePageSize = 50

// consoleStatuses are the statuses a search offers.
var consoleStatuses = []notify.Status{notify.StatusPending, notify.StatusSending, notify.StatusSent,
	notify.StatusFailed, notify.StatusHeld, notify.StatusSuppressed, notify.StatusCancelled}

// errNoProviderID: mark-sent without the provider's message id.
var errNoProviderID = errors.New("say which message at the provider this is")

// SignInLimit is how many failed sign-ins a client address may make: 10
// at once, then one every 90 s.
var SignInLimit = RateLimit{PerSecond: 1.0 / 90, Burst: 10}

// page is what a console page shows; each page fills its part.
type page struct {
	Title   string
	Error   string
	Session *apikey.Session

	Data         notify.QueueState // overview
	Held, Failed int

	Query     deliveryQuery // deliveries
	Statuses  []notify.Status
	Templates []string
	Rows      []notify.Delivery
	Prev      string
	Next      string

	Delivery    notify.Delivery // one delivery
	Events      []notify.Event
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

// handleSignIn starts a session for an operator key. Failed sign-ins
// spend the client address's budget in failures (SignInLimit); past it
// the answer is 429 before any look-up.
func handleSignIn(keys *apikey.Service, failures *limiter, addr func(*http.Request) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client := addr(r)
		if empty, wait := failures.empty(client, time.Now()); empty {
			w.Header().Set("Retry-After", strconv.Itoa(max(int(wait.Seconds()), 1)))
			render(w, r, http.StatusTooManyRequests, "sign-in", page{Title: "Sign in",
				Error: "Too many failed sign-ins from this address; try again in " + wait.Round(time.Second).String() + "."})
			return
		}
		if !sameOrigin(r) {
			consoleError(w, r, http.StatusForbidden, "Sign in from the console's own page.")
			return
		}
		s, secret, err := keys.SignIn(r.Context(), strings.TrimSpace(r.PostFormValue("key")))
		switch {
		case errors.Is(err, apikey.ErrInvalid), errors.Is(err, apikey.ErrNotOperator):
			failures.spend(client, time.Now())
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

func handleConsoleOverview(ops *notify.Operator) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := page{Title: "Overview", Session: sessionOf(r)}
		var err error
		if p.Data, err = ops.Queue(r.Context()); err == nil {
			p.Held, err = countUpTo(r.Context(), ops, notify.StatusHeld)
		}
		if err == nil {
			p.Failed, err = countUpTo(r.Context(), ops, notify.StatusFailed)
		}
		if err != nil {
			setLogError(r.Context(), err)
			p.Error = "Part of the overview could not be read: " + err.Error()
		}
		render(w, r, http.StatusOK, "overview", p)
	})
}

// countUpTo counts the deliveries in status, up to 100.
func countUpTo(ctx context.Context, ops *notify.Operator, status notify.Status) (int, error) {
	ds, err := ops.List(ctx, notify.Filter{Status: status, Limit: 100})
	return len(ds), err
}

// deliveryQuery is a search as the form and the URL carry it.
type deliveryQuery struct {
	Recipient, OrderID, Key, Status, Template, OlderThan string
	// CreatedAfter and CreatedBefore are a browser's datetime-local
	// values ("2026-12-01T14:30"), read as UTC.
	CreatedAfter, CreatedBefore string
	Newest                      bool
	Page                        int
}

// consoleTime is the layout of a datetime-local input.
const consoleTime = "2006-01-02T15:04"

// filter checks the query and makes the operator service's filter; the
// problem is said to the operator on the page.
func (q deliveryQuery) filter() (notify.Filter, string) {
	f := notify.Filter{Key: q.Key, Template: q.Template, Status: notify.Status(q.Status), Newest: q.Newest,
		Offset: q.Page * consolePageSize, Limit: consolePageSize + 1}
	if q.Recipient != "" {
		addr, err := mail.NormalizeAddress(q.Recipient)
		if err != nil {
			return f, "Recipient: " + err.Error()
		}
		f.Recipient = addr
	}
	if q.OrderID != "" {
		id, err := uuid.Parse(q.OrderID)
		if err != nil {
			return f, "Order id: not a UUID."
		}
		f.OrderID = &id
	}
	if q.Status != "" && !slices.Contains(consoleStatuses, notify.Status(q.Status)) {
		return f, "Status: not one of the statuses."
	}
	if q.OlderThan != "" {
		d, err := time.ParseDuration(q.OlderThan)
		if err != nil || d < 0 {
			return f, "Not updated for: a duration such as 30m or 2h."
		}
		f.OlderThan = d
	}
	for _, b := range []struct {
		raw, name string
		into      *time.Time
	}{{q.CreatedAfter, "Created from", &f.CreatedAfter}, {q.CreatedBefore, "Created before", &f.CreatedBefore}} {
		if b.raw == "" {
			continue
		}
		t, err := time.Parse(consoleTime, b.raw)
		if err != nil {
			return f, b.name + ": a time such as 2026-12-01T14:30 (UTC)."
		}
		*b.into = t
	}
	return f, ""
}

// url is the search's address, on page n.
func (q deliveryQuery) url(n int) string {
	v := url.Values{}
	for k, s := range map[string]string{"recipient": q.Recipient, "order_id": q.OrderID, "key": q.Key,
		"status": q.Status, "template": q.Template, "older_than": q.OlderThan,
		"created_after": q.CreatedAfter, "created_before": q.CreatedBefore} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.Newest {
		v.Set("order", "newest")
	} else {
		v.Set("order", "oldest")
	}
	if n > 0 {
		v.Set("page", strconv.Itoa(n))
	}
	return "/admin/deliveries?" + v.Encode()
}

// queryFrom reads a search from a URL's query or a form.
func queryFrom(v url.Values) deliveryQuery {
	q := deliveryQuery{Recipient: strings.TrimSpace(v.Get("recipient")), OrderID: strings.TrimSpace(v.Get("order_id")),
		Key: strings.TrimSpace(v.Get("key")), Status: v.Get("status"), Template: v.Get("template"),
		OlderThan: strings.TrimSpace(v.Get("older_than")), Newest: v.Get("order") != "oldest",
		CreatedAfter: strings.TrimSpace(v.Get("created_after")), CreatedBefore: strings.TrimSpace(v.Get("created_before"))}
	q.Page, _ = strconv.Atoi(v.Get("page"))
	q.Page = min(max(q.Page, 0), 10_000)
	return q
}

func handleConsoleDeliveries(ops *notify.Operator, templates *mailtemplate.Templates) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := queryFrom(r.URL.Query())
		p := page{Title: "Deliveries", Session: sessionOf(r), Query: q, Statuses: consoleStatuses, MaxBulk: notify.MaxBulkRetry}
		if templates != nil {
			p.Templates = templates.Names()
		}
		f, problem := q.filter()
		if problem != "" {
			p.Error = problem
			render(w, r, http.StatusUnprocessableEntity, "deliveries", p)
			return
		}
		rows, err := ops.List(r.Context(), f)
		if err != nil {
			setLogError(r.Context(), err)
			consoleError(w, r, http.StatusInternalServerError, "The deliveries could not be read; try again.")
			return
		}
		if len(rows) > consolePageSize {
			rows, p.Next = rows[:consolePageSize], q.url(q.Page+1)
		}
		if q.Page > 0 {
			p.Prev = q.url(q.Page - 1)
		}
		p.Rows = rows
		render(w, r, http.StatusOK, "deliveries", p)
	})
}

// consoleDelivery reads the delivery of the URL, or answers the page.
func consoleDelivery(w http.ResponseWriter, r *http.Request, ops *notify.Operator) (notify.Delivery, []notify.Event, bool) {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		consoleError(w, r, http.StatusNotFound, "No delivery has this id.")
		return notify.Delivery{}, nil, false
	}
	d, events, err := ops.Get(r.Context(), id)
	switch {
	case errors.Is(err, notify.ErrNotFound):
		consoleError(w, r, http.StatusNotFound, "No delivery has this id.")
		return notify.Delivery{}, nil, false
	case err != nil:
		setLogError(r.Context(), err)
		consoleError(w, r, http.StatusInternalServerError, "The delivery could not be read; try again.")
		return notify.Delivery{}, nil, false
	}
	return d, events, true
}

func handleConsoleDelivery(ops *notify.Operator) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, events, ok := consoleDelivery(w, r, ops)
		if !ok {
			return
		}
		render(w, r, http.StatusOK, "delivery", page{Title: "Delivery " + d.ID.String(), Session: sessionOf(r),
			Delivery: d, Events: events,
			CanRetry:    !d.Retired && (d.Status == notify.StatusFailed || d.Status == notify.StatusHeld),
			CanMarkSent: !d.Retired && d.Status == notify.StatusHeld,
			CanCancel:   !d.Retired && d.Status == notify.StatusPending})
	})
}

// handleConsoleEmail renders the delivery's e-mail from its stored data,
// for the sandboxed frame of its page: the template's HTML, under the
// policy of every rendered e-mail here, and a sandbox of its own.
func handleConsoleEmail(ops *notify.Operator, templates *mailtemplate.Templates) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _, ok := consoleDelivery(w, r, ops)
		if !ok {
			return
		}
		if templates == nil || d.Retired {
			consoleError(w, r, http.StatusNotFound, "There is nothing to render: the delivery was retired, or this API has no templates.")
			return
		}
		out, err := templates.RenderLocale(d.Template, d.Data, d.Locale)
		if err != nil {
			consoleError(w, r, http.StatusUnprocessableEntity, "It does not render with today's templates: "+err.Error())
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		// The frame is the console's own; emailPolicy's frame-ancestors
		// 'none' would refuse it.
		w.Header().Set("Content-Security-Policy", strings.Replace(emailPolicy, "frame-ancestors 'none'", "frame-ancestors 'self'", 1)+"; sandbox")
		_, _ = w.Write([]byte(out.HTML))
	})
}

// consoleAction runs act with the operator's note, then shows the
// delivery again: its timeline has the new row.
func consoleAction(ops *notify.Operator, name string, act func(r *http.Request, id uuid.UUID, actor, note string) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := uuid.Parse(chi.URLParam(r, "id"))
		if err != nil {
			consoleError(w, r, http.StatusNotFound, "No delivery has this id.")
			return
		}
		note := strings.TrimSpace(r.PostFormValue("note"))
		if note == "" {
			consoleError(w, r, http.StatusUnprocessableEntity, "Say why in the note: the history keeps it.")
			return
		}
		addLogAttrs(r.Context(), slog.String("action", name), slog.String("delivery_id", id.String()))
		switch err := act(r, id, sessionOf(r).Actor(), note); {
		case errors.Is(err, notify.ErrNotFound):
			consoleError(w, r, http.StatusNotFound, "No delivery has this id.")
			return
		case errors.Is(err, errNoProviderID):
			consoleError(w, r, http.StatusUnprocessableEntity, "Say which message at the provider this is.")
			return
		case errors.Is(err, notify.ErrWrongState):
			consoleError(w, r, http.StatusConflict, "Not possible in the delivery's current state: someone or something acted first. Reload it.")
			return
		case err != nil:
			setLogError(r.Context(), err)
			consoleError(w, r, http.StatusInternalServerError, name+" failed: "+err.Error())
			return
		}
		http.Redirect(w, r, "/admin/deliveries/"+id.String(), http.StatusSeeOther)
	})
}

func handleConsoleRetry(ops *notify.Operator) http.Handler {
	return consoleAction(ops, "retry", func(r *http.Request, id uuid.UUID, actor, note string) error {
		_, _, enqueueErr, err := ops.Retry(r.Context(), id, actor, note)
		if enqueueErr != nil {
			// Pending now; the reconciler queues it later.
			addLogAttrs(r.Context(), slog.String("enqueue_error", enqueueErr.Error()))
		}
		return err
	})
}

func handleConsoleCancel(ops *notify.Operator) http.Handler {
	return consoleAction(ops, "cancel", func(r *http.Request, id uuid.UUID, actor, note string) error {
		_, err := ops.Cancel(r.Context(), id, actor, note)
		return err
	})
}

func handleConsoleMarkSent(ops *notify.Operator) http.Handler {
	return consoleAction(ops, "mark-sent", func(r *http.Request, id uuid.UUID, actor, note string) error {
		pid := strings.TrimSpace(r.PostFormValue("provider_message_id"))
		if pid == "" {
			return errNoProviderID
		}
		_, err := ops.MarkSent(r.Context(), id, pid, actor, note)
		return err
	})
}

// handleConsoleQueue pauses or resumes all sending.
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
		addLogAttrs(r.Context(), slog.String("action", name), slog.String("note", note))
		if err := act(r.Context()); err != nil {
			setLogError(r.Context(), err)
			consoleError(w, r, http.StatusInternalServerError, name+" failed: "+err.Error())
			return
		}
		http.Redirect(w, r, "/admin/", http.StatusSeeOther)
	})
}

// handleConsoleBulkRetry retries every failed or held delivery a search
// selects: the first post counts them and asks; the second, which
// carries the count the operator saw, retries them.
func handleConsoleBulkRetry(ops *notify.Operator) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := queryFrom(r.PostForm)
		q.Page = 0
		note := strings.TrimSpace(r.PostFormValue("note"))
		p := page{Title: "Retry every matching delivery", Session: sessionOf(r), Query: q, MaxBulk: notify.MaxBulkRetry,
			Bulk: bulkResult{Note: note, Back: q.url(0)}}
		f, problem := q.filter()
		switch {
		case problem != "":
			consoleError(w, r, http.StatusUnprocessableEntity, problem)
			return
		case note == "":
			consoleError(w, r, http.StatusUnprocessableEntity, "Say why in the note: the history of each delivery keeps it.")
			return
		}
		dryRun := r.PostFormValue("confirm") == ""
		n, unqueued, err := ops.RetryMatching(r.Context(), f, sessionOf(r).Actor(), note, dryRun)
		switch {
		case errors.Is(err, notify.ErrWrongState):
			consoleError(w, r, http.StatusUnprocessableEntity, "A bulk retry selects failed or held deliveries: choose one of the two statuses.")
			return
		case err != nil:
			setLogError(r.Context(), err)
			consoleError(w, r, http.StatusInternalServerError, "The bulk retry stopped: "+err.Error()+". What it retried is in each delivery's history; run it again for the rest.")
			return
		}
		if !dryRun {
			addLogAttrs(r.Context(), slog.String("action", "bulk-retry"), slog.Int("retried", n), slog.Int("unqueued", unqueued))
		}
		p.Bulk.Done, p.Bulk.Count, p.Bulk.Unqueued = !dryRun, n, unqueued
		render(w, r, http.StatusOK, "bulk", p)
	})
}

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
		var err error
		if p.Suppressions, err = ops.Suppressions(r.Context(), 100); err != nil {
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
		if _, err := ops.AddBlock(r.Context(), kind, value, reason, ttl); err != nil {
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
			err = ops.RemoveBlock(r.Context(), id)
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

// renderKeys shows the keys page: secret is a key just made, shown this
// once; problem what was wrong with a key to make.
func renderKeys(w http.ResponseWriter, r *http.Request, keys *apikey.Service, status int, secret, problem string) {
	ks, err := keys.List(r.Context())
	if err != nil {
		setLogError(r.Context(), err)
		consoleError(w, r, http.StatusInternalServerError, "The keys could not be read; try again.")
		return
	}
	render(w, r, status, "api-keys", page{Title: "API keys", Session: sessionOf(r), Keys: ks, Scopes: apikey.Scopes,
		NewSecret: secret, Error: problem})
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
		k, secret, err := keys.Create(r.Context(), name, scopes)
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
		_, err = keys.Revoke(r.Context(), id)
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
