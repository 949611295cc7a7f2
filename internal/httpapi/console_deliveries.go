package httpapi

import (
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

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
)

// The console's deliveries: the search, one delivery with its e-mail,
// the actions on it, and the bulk retry of a search.

// deliveryQuery is a search as the form and the URL carry it.
type deliveryQuery struct {
	Recipient, OrderID, Key, Status, Template, OlderThan string
	// CreatedAfter and CreatedBefore are a browser's datetime-local
	// values ("2026-12-01T14:30"), read as UTC.
	CreatedAfter, CreatedBefore string
	Newest                      bool
	Page                        int
	// BouncedOrComplained: only those a provider reported a bounce or a
	// complaint of.
	BouncedOrComplained bool
	// Mode: live and test alike (""), or "live" or "test" alone.
	Mode string
}

// consoleTime is the layout of a datetime-local input.
const consoleTime = "2006-01-02T15:04"

// filter checks the query and makes the operator service's filter; the
// problem is said to the operator on the page.
func (q deliveryQuery) filter() (notify.Filter, string) {
	f := notify.Filter{Key: q.Key, Template: q.Template, Status: notify.Status(q.Status), Newest: q.Newest,
		Offset: q.Page * consolePageSize, Limit: consolePageSize + 1, BouncedOrComplained: q.BouncedOrComplained}
	_, f.Test = modeOf(url.Values{"mode": {q.Mode}})
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
	if q.Status != "" && !slices.Contains(notify.Statuses, notify.Status(q.Status)) {
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
		"created_after": q.CreatedAfter, "created_before": q.CreatedBefore, "mode": q.Mode} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.BouncedOrComplained {
		v.Set("bounced_or_complained", "yes")
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
		CreatedAfter: strings.TrimSpace(v.Get("created_after")), CreatedBefore: strings.TrimSpace(v.Get("created_before")),
		BouncedOrComplained: v.Get("bounced_or_complained") == "yes"}
	q.Mode, _ = modeOf(v)
	q.Page, _ = strconv.Atoi(v.Get("page"))
	q.Page = min(max(q.Page, 0), 10_000)
	return q
}

func handleConsoleDeliveries(ops *notify.Operator, templates *mailtemplate.Templates) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := queryFrom(r.URL.Query())
		p := page{Title: "Deliveries", Session: sessionOf(r), Query: q, Statuses: notify.Statuses, MaxBulk: notify.MaxBulkRetry}
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

// emailView is what a delivery's page says of its e-mail: the message
// its latest hand-over gave the provider, rendered with the template
// version that rendered it then, or, when that version is unknown, that
// it cannot be shown and the subject as sent; a delivery never handed
// over shows today's template, rendered now, and says so.
type emailView struct {
	HandedOver bool
	notify.HandOver
	Shown      bool   // the frame shows it
	Problem    string // why it cannot be shown as it was sent
	SubjectNow string // the subject the kept version renders today, when it is not the one sent
}

// consoleEmail is the delivery's e-mail as its page and its frame show it
// (emailView), and the HTML of the frame when it is shown.
func consoleEmail(r *http.Request, ops *notify.Operator, templates *mailtemplate.Templates, d notify.Delivery, events []notify.Event) (emailView, string) {
	var v emailView
	if d.Retired {
		v.Problem = "the delivery was retired: its data is gone"
		return v, ""
	}
	v.HandOver, v.HandedOver = notify.LastHandOver(events)
	if !v.HandedOver {
		if templates == nil {
			v.Problem = "this API has no templates"
			return v, ""
		}
		out, err := templates.RenderLocale(d.Template, d.Data, d.Locale)
		if err != nil {
			v.Problem = "it does not render with today's templates: " + err.Error()
			return v, ""
		}
		v.Shown = true
		return v, out.HTML
	}
	out, err := ops.SentEmail(r.Context(), d, v.HandOver)
	switch {
	case errors.Is(err, notify.ErrVersionUnknown):
		v.Problem = strings.TrimPrefix(err.Error(), "notify: ")
		return v, ""
	case err != nil:
		setLogError(r.Context(), err)
		v.Problem = "the template version it was sent with could not be read; reload the page"
		return v, ""
	}
	v.Shown = true
	if v.Subject != "" && out.Subject != v.Subject {
		v.SubjectNow = out.Subject
	}
	return v, out.HTML
}

func handleConsoleDelivery(ops *notify.Operator, templates *mailtemplate.Templates) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, events, ok := consoleDelivery(w, r, ops)
		if !ok {
			return
		}
		email, _ := consoleEmail(r, ops, templates, d, events)
		render(w, r, http.StatusOK, "delivery", page{Title: "Delivery " + d.ID.String(), Session: sessionOf(r),
			Delivery: d, Events: events, Email: email,
			CanRetry:    !d.Retired && (d.Status == notify.StatusFailed || d.Status == notify.StatusHeld),
			CanMarkSent: !d.Retired && d.Status == notify.StatusHeld,
			CanCancel:   !d.Retired && d.Status == notify.StatusPending})
	})
}

// remoteImages is the query parameter (?images=remote) with which the
// console's e-mail frame loads the e-mail's remote images: the
// operator asked for them with the link next to the frame.
const remoteImages = "remote"

// consoleEmailPolicy is the policy of the console's e-mail frame: that of
// every rendered e-mail here, framed by the console alone and sandboxed,
// and, unless the operator asked for them (remote), with no image but
// those inside the e-mail (data:). A remote image, a tracking pixel in a
// template or in what a customer typed, would tell its sender that an
// operator opened the e-mail, when, and from which address; mail clients
// hold such images back until asked too.
func consoleEmailPolicy(remote bool) string {
	policy := strings.Replace(emailPolicy, "frame-ancestors 'none'", "frame-ancestors 'self'", 1) + "; sandbox"
	if !remote {
		policy = strings.Replace(policy, "img-src data: https:", "img-src data:", 1)
	}
	return policy
}

// handleConsoleEmail renders the delivery's e-mail for the sandboxed
// frame of its page, as consoleEmail says: as it was handed over, with
// the template version that rendered it, or, never handed over, today's
// template rendered now. The HTML is under consoleEmailPolicy, without
// remote images unless ?images=remote.
func handleConsoleEmail(ops *notify.Operator, templates *mailtemplate.Templates) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, events, ok := consoleDelivery(w, r, ops)
		if !ok {
			return
		}
		email, html := consoleEmail(r, ops, templates, d, events)
		if !email.Shown {
			consoleError(w, r, http.StatusNotFound, "This e-mail cannot be shown: "+email.Problem+".")
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Security-Policy", consoleEmailPolicy(r.URL.Query().Get("images") == remoteImages))
		// Remote images, once asked for, learn nothing of the console's URLs.
		w.Header().Set("Referrer-Policy", "no-referrer")
		_, _ = w.Write([]byte(html))
	})
}

// consoleAction runs act with the operator's note, then shows the
// delivery again: its timeline has the new row.
func consoleAction(name string, act func(r *http.Request, id uuid.UUID, actor, note string) error) http.Handler {
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
		case errors.Is(err, notify.ErrPinnedUnreachable):
			consoleError(w, r, http.StatusConflict, strings.TrimPrefix(err.Error(), "notify: ")+".")
			return
		case errors.Is(err, notify.ErrMayHaveBeenSent):
			consoleError(w, r, http.StatusConflict, "Not cancelled: "+strings.TrimPrefix(err.Error(), notify.ErrWrongState.Error()+": ")+
				". Check that provider's log; if it does not have the message, cancel again saying so.")
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
	return consoleAction("retry", func(r *http.Request, id uuid.UUID, actor, note string) error {
		// "unpin": the operator found that the provider the delivery is
		// pinned to does not hold the message.
		_, _, enqueueErr, err := ops.Retry(r.Context(), id, actor, note, r.PostFormValue("unpin") == "yes")
		if enqueueErr != nil {
			// Pending now; the reconciler queues it later.
			addLogAttrs(r.Context(), slog.String("enqueue_error", enqueueErr.Error()))
		}
		return err
	})
}

func handleConsoleCancel(ops *notify.Operator) http.Handler {
	return consoleAction("cancel", func(r *http.Request, id uuid.UUID, actor, note string) error {
		// "not_at_provider": the operator checked the log of the provider
		// the delivery is pinned to, and it does not hold the message.
		_, err := ops.Cancel(r.Context(), id, actor, note, r.PostFormValue("not_at_provider") == "yes")
		return err
	})
}

func handleConsoleMarkSent(ops *notify.Operator) http.Handler {
	return consoleAction("mark-sent", func(r *http.Request, id uuid.UUID, actor, note string) error {
		pid := strings.TrimSpace(r.PostFormValue("provider_message_id"))
		if pid == "" {
			return errNoProviderID
		}
		_, err := ops.MarkSent(r.Context(), id, pid, actor, note)
		return err
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
