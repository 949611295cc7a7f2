package httpapi

import (
	"errors"
	htmltemplate "html/template"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/sekali-dev/sekali/internal/mail"
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
{{if .Done}}<p id="done">{{.Recipient}} will get no more of these e-mails. Order confirmations and receipts still arrive.</p>
{{else}}<form method="post"><p>Stop these e-mails to {{.Recipient}}? Order confirmations and receipts still arrive.</p>
<button id="unsubscribe">Unsubscribe</button></form>{{end}}
</body>
</html>
`))

// unsubscribePolicy: no script, no style, no frame; the one form posts
// back here.
const unsubscribePolicy = "default-src 'none'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

func handleUnsubscribe(secret string, ops *notify.Operator) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		recipient, category, err := mail.ParseUnsubscribeToken(secret, chi.URLParam(r, "token"))
		if secret == "" || ops == nil || errors.Is(err, mail.ErrBadUnsubscribeToken) {
			writeProblem(w, r, problem{Type: typeNotFound, Status: http.StatusNotFound, Detail: "This unsubscribe link is not valid."})
			return
		}
		done := false
		if r.Method == http.MethodPost {
			added, err := ops.Unsubscribe(r.Context(), recipient, category)
			if err != nil {
				writeError(w, r, err)
				return
			}
			addLogAttrs(r.Context(), slog.String("action", "unsubscribe"), slog.String("category", category),
				slog.String("key_hash", mail.KeyHash(recipient)), slog.Bool("added", added))
			done = true
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", unsubscribePolicy)
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Referrer-Policy", "no-referrer")
		if err := unsubscribePage.Execute(w, map[string]any{"Recipient": recipient, "Done": done}); err != nil {
			setLogError(r.Context(), err)
		}
	})
}
