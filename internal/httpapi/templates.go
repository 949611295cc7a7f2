package httpapi

import (
	"errors"
	htmltemplate "html/template"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/sekali-dev/sekali/internal/mailtemplate"
)

// emailPolicy is the Content-Security-Policy of an e-mail's HTML shown
// by the API: its styles and images, no script, no form, no frame
// around it. The gallery adds the frames it shows the e-mails in.
const emailPolicy = "default-src 'none'; style-src 'unsafe-inline'; img-src data: https:; form-action 'none'; base-uri 'none'; frame-ancestors 'none'"

func handleListTemplates(templates *mailtemplate.Templates) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		languages := map[string][]string{}
		for _, name := range templates.Names() {
			languages[name] = templates.Languages(name)
		}
		writeJSON(w, http.StatusOK, map[string]any{"templates": templates.Names(), "languages": languages})
	})
}

// handlePreviewTemplate renders a template without sending anything:
// with its sample data (GET), or with the data of the request body (POST,
// checked against the template's schema); ?lang= picks the language the
// way a delivery's locale does; ?format=html or ?format=text give the body
// alone, for a browser; the default is JSON with subject, text and html.
func handlePreviewTemplate(templates *mailtemplate.Templates) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := chi.URLParam(r, "name")
		data, err := templates.Sample(name)
		if errors.Is(err, mailtemplate.ErrUnknown) {
			writeProblem(w, r, problem{Type: typeNotFound, Status: http.StatusNotFound, Detail: "No template has this name; GET /v1/templates lists them."})
			return
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		format := r.URL.Query().Get("format")
		if format != "" && format != "json" && format != "html" && format != "text" {
			writeProblem(w, r, problem{Type: typeInvalidQuery, Status: http.StatusBadRequest, Detail: "format must be json, html or text.",
				Errors: []fieldError{{Pointer: "format", Detail: "must be json, html or text"}}})
			return
		}
		if r.Method == http.MethodPost {
			raw, p := readJSONBody(w, r)
			if p == nil {
				p = decodeStrict(raw, new(map[string]any), "")
			}
			if p != nil {
				writeProblem(w, r, *p)
				return
			}
			if p := schemaProblem(templates.Validate(name, raw), ""); p != nil {
				writeProblem(w, r, *p)
				return
			}
			data = raw
		}
		out, err := templates.RenderLocale(name, data, r.URL.Query().Get("lang"))
		if err != nil {
			// Validate rendered the data already, and a template's
			// sample renders at load; said as plainly as a bad field.
			writeProblem(w, r, problem{Type: typeValidation, Status: http.StatusUnprocessableEntity,
				Detail: "The template cannot render this data: " + err.Error()})
			return
		}
		switch format {
		case "html":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			// The e-mail's own HTML, as a mail client shows it: its
			// styles and images, no script, no form, no frame around it.
			w.Header().Set("Content-Security-Policy", emailPolicy)
			_, _ = w.Write([]byte(out.HTML))
		case "text":
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = w.Write([]byte(out.Text))
		default:
			writeJSON(w, http.StatusOK, map[string]string{"template": name, "language": out.Language,
				"subject": out.Subject, "text": out.Text, "html": out.HTML})
		}
	})
}

// schemaProblem turns a template's *DataError (mailtemplate.Validate)
// into a 422 naming each failing JSON pointer under prefix; nil for no
// error.
func schemaProblem(err error, prefix string) *problem {
	var derr *mailtemplate.DataError
	if !errors.As(err, &derr) {
		return nil
	}
	fields := make([]fieldError, len(derr.Fields))
	for i, f := range derr.Fields {
		fields[i] = fieldError{Pointer: prefix + f.Pointer, Detail: f.Detail}
	}
	return &problem{Type: typeValidation, Status: http.StatusUnprocessableEntity,
		Detail: "The template cannot take this data: its schema refuses it, or it cannot be rendered; see errors.", Errors: fields}
}

// galleryWidths are the widths the gallery shows every e-mail at: a
// phone's (375 px, an iPhone's) and a desktop client's reading pane.
var galleryWidths = []int{375, 800}

// galleryPage lists every template in every language, rendered with its
// sample data: subject, HTML at each of galleryWidths (in sandboxed
// frames, so that its styles stay its own) and text. No script.
var galleryPage = htmltemplate.Must(htmltemplate.New("gallery").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>sekali: e-mail templates</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; background: #f6f6f4; }
  h1 { font-size: 1.4rem; } h2 { font-size: 1.1rem; margin-top: 2.5rem; border-bottom: 1px solid #ccc; }
  .variants { display: grid; gap: 1.5rem; }
  .variant { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: 1rem; }
  .lang { font-size: .8rem; text-transform: uppercase; color: #666; letter-spacing: .05em; }
  .subject { font-weight: 600; margin: .3rem 0 .8rem; }
  .frames { display: flex; flex-wrap: wrap; gap: 1rem; align-items: flex-start; }
  figure { margin: 0; }
  figcaption { font-size: .75rem; color: #666; margin-bottom: .2rem; }
  iframe { height: 46rem; border: 1px solid #ddd; background: #fff; box-sizing: content-box; }
  pre { white-space: pre-wrap; font-size: .8rem; background: #fafafa; border: 1px solid #eee; padding: .6rem; max-height: 16rem; overflow: auto; }
  .error { color: #a00; }
</style>
</head>
<body>
<h1>E-mail templates</h1>
<p>Every template in every language, rendered with its <code>sample.json</code>, as a phone (375 px) and a desktop
client (800 px) show it. Nothing here is sent. The same renders are at <code>GET /v1/templates/{name}/preview?lang=</code>.</p>
{{range .}}{{$name := .Name}}
<h2 id="{{.Name}}">{{.Name}}</h2>
<div class="variants">
{{range .Variants}}
<section class="variant">
  <div class="lang">{{.Language}}</div>
  {{if .Error}}<p class="error">{{.Error}}</p>{{else}}
  <div class="subject">{{.Subject}}</div>
  <div class="frames">{{$v := .}}{{range .Widths}}
    <figure><figcaption>{{.}} px</figcaption><iframe style="width: {{.}}px" data-template="{{$name}}" data-lang="{{$v.Language}}" data-width="{{.}}" title="{{$name}} in {{$v.Language}} at {{.}} px" sandbox srcdoc="{{$v.HTML}}"></iframe></figure>{{end}}
  </div>
  <pre>{{.Text}}</pre>{{end}}
</section>
{{end}}
</div>
{{end}}
</body>
</html>
`))

type galleryTemplate struct {
	Name     string
	Variants []galleryVariant
}

type galleryVariant struct {
	Language, Subject, HTML, Text, Error string
	Widths                               []int
}

// handleGallery serves the preview gallery, for a person in a browser.
func handleGallery(templates *mailtemplate.Templates) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var page []galleryTemplate
		for _, name := range templates.Names() {
			t := galleryTemplate{Name: name}
			sample, _ := templates.Sample(name) // the name is registered
			for _, lang := range templates.Languages(name) {
				out, err := templates.RenderLocale(name, sample, lang)
				v := galleryVariant{Language: lang, Subject: out.Subject, HTML: out.HTML, Text: out.Text, Widths: galleryWidths}
				if err != nil {
					v.Error = err.Error()
				}
				t.Variants = append(t.Variants, v)
			}
			page = append(page, t)
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		// The frames render the templates' own HTML; nothing else may run.
		w.Header().Set("Content-Security-Policy", emailPolicy+"; frame-src 'self'")
		if err := galleryPage.Execute(w, page); err != nil {
			setLogError(r.Context(), err)
		}
	})
}
