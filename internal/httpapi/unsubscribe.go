package httpapi

import (
	"errors"
	"fmt"
	htmltemplate "html/template"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
)

// One-click unsubscribe (RFC 8058): the link of a subscription template's
// List-Unsubscribe. A POST (the inbox's one click, or the page's button)
// unsubscribes at once, without a login: the token's signature is the
// proof. A GET (a person who followed the link) shows what a POST would
// do, and a button for it; a GET changes nothing, since mail scanners
// follow links.

var unsubscribePage = htmltemplate.Must(htmltemplate.New("unsubscribe").Parse(`<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>Unsubscribe</title></head>
<body>
{{if .Expired}}<p id="expired">This unsubscribe link has expired: links work for {{.Lifetime}} after the e-mail that carried them was sent. Use the link in a more recent e-mail, or write to the shop.</p>
{{else if .Done}}<p id="done">{{.Recipient}} will get no more of these e-mails. Order confirmations and receipts still arrive.</p>
{{else}}<form method="post"><p>Stop these e-mails to {{.Recipient}}? Order confirmations and receipts still arrive.</p>
<button id="unsubscribe">Unsubscribe</button></form>{{end}}
</body>
</html>
`))

// unsubscribePolicy: no script, no style, no frame; the one form posts
// back here.
const unsubscribePolicy = "default-src 'none'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// handleUnsubscribe answers a link whose token verifies with secret and
// is at most ttl old (after its issue day); an expired one gets a page
// that says so, 410, and changes nothing.
func handleUnsubscribe(secret string, ttl time.Duration, ops *notify.Operator) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		claim, err := mail.ParseUnsubscribeToken(secret, chi.URLParam(r, "token"), time.Now(), ttl)
		// Only a subscription can be left (the worker signs no other
		// category); a token of another is no link of ours.
		if secret == "" || ops == nil || errors.Is(err, mail.ErrBadUnsubscribeToken) || claim.Category != mailtemplate.CategorySubscription {
			writeProblem(w, r, problem{Type: typeNotFound, Status: http.StatusNotFound, Detail: "This unsubscribe link is not valid."})
			return
		}
		page := map[string]any{"Recipient": claim.Recipient}
		status := http.StatusOK
		switch {
		case errors.Is(err, mail.ErrExpiredUnsubscribeToken):
			addLogAttrs(r.Context(), slog.String("unsubscribe", "expired"), slog.String("issued", claim.Issued.Format(time.DateOnly)))
			status, page["Expired"], page["Lifetime"] = http.StatusGone, true, lifetime(ttl)
		case r.Method == http.MethodPost:
			added, err := ops.Unsubscribe(r.Context(), claim.Recipient, claim.Category)
			if err != nil {
				writeError(w, r, err)
				return
			}
			addLogAttrs(r.Context(), slog.String("action", "unsubscribe"), slog.String("category", claim.Category),
				slog.String("key_hash", mail.KeyHash(claim.Recipient)), slog.Bool("added", added), slog.Bool("legacy_token", claim.Legacy()))
			page["Done"] = true
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", unsubscribePolicy)
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.WriteHeader(status)
		if err := unsubscribePage.Execute(w, page); err != nil {
			setLogError(r.Context(), err)
		}
	})
}

// lifetime says ttl in days (or hours, under two days), for people.
func lifetime(ttl time.Duration) string {
	if ttl < 48*time.Hour {
		return fmt.Sprintf("%d hours", int(ttl/time.Hour))
	}
	return fmt.Sprintf("%d days", int(ttl/(24*time.Hour)))
}
