package httpapi

import (
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/sekali-dev/sekali/internal/notify"
)

func handleListTemplates(templates *notify.Templates) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string][]string{"templates": templates.Names()})
	})
}

// handlePreviewTemplate renders a template with its sample data, without
// sending anything: ?format=html or ?format=text give the body alone, for
// a browser; the default is JSON with subject, text and html.
func handlePreviewTemplate(templates *notify.Templates) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := chi.URLParam(r, "name")
		sample, err := templates.Sample(name)
		if errors.Is(err, notify.ErrUnknownTemplate) {
			writeProblem(w, r, problem{Type: typeNotFound, Status: http.StatusNotFound, Detail: "No template has this name; GET /v1/templates lists them."})
			return
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		out, err := templates.Render(name, sample)
		if err != nil {
			writeError(w, r, err)
			return
		}
		switch r.URL.Query().Get("format") {
		case "html":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write([]byte(out.HTML))
		case "text":
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = w.Write([]byte(out.Text))
		case "", "json":
			writeJSON(w, http.StatusOK, map[string]string{"template": name, "subject": out.Subject, "text": out.Text, "html": out.HTML})
		default:
			writeProblem(w, r, problem{Type: typeInvalidQuery, Status: http.StatusBadRequest, Detail: "format must be json, html or text."})
		}
	})
}
