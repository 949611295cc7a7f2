// Package mailtemplate is the registry of every e-mail the service can
// send: it loads the templates (the built-in ones, embedded, and those of
// TEMPLATES_DIR), checks each at load so that a broken one stops a binary
// at start rather than a delivery later, validates a delivery's data
// against its template's schema, and renders it in the language that
// best matches the recipient's.
//
// A template is a directory named after it, holding
//
//	schema.json   the JSON Schema of the data it reads (draft 2020-12 unless "$schema" says otherwise)
//	sample.json   example data: the preview, the golden test and the check at load render it
//	id/, en/, ... one directory per language, named by its BCP 47 tag, each with
//	              subject.tmpl, text.tmpl (text/template) and html.tmpl (html/template)
//
// or, for a template in one language, subject.tmpl, text.tmpl and
// html.tmpl directly beside schema.json: they are then in the default
// language. Every template has a variant in the default language.
//
// A template may name a layout in its meta.json: its html.tmpl and
// text.tmpl are then what the layout's {{template "content" .}} shows,
// and the layout's CSS is inlined into them when they load. Layouts
// (_layouts/<name>/) and partials (_partials/<name>.html.tmpl,
// <name>.text.tmpl) are shared by every template (layout.go, inline.go).
//
// The built-in templates, and their layout, are in builtin/; Config.Dir
// may add more, and replace the built-in layout.
package mailtemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"maps"
	"slices"
	"strings"
	texttemplate "text/template"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
)

// ErrUnknown is returned for a template name that is not registered.
var ErrUnknown = errors.New("mailtemplate: unknown template")

// Templates is the registry of every e-mail the service can send.
type Templates struct {
	byName map[string]*emailTemplate
	live   *reloader // Config.Reload's: nil unless TEMPLATES_RELOAD (reload.go)
}

type emailTemplate struct {
	schema   *jsonschema.Schema
	sample   json.RawMessage
	variants []*templateVariant // the default language first, then by tag
	matcher  language.Matcher   // over the variants' languages, in that order
	meta     meta               // meta.json: sender identity and category
	version  Version            // the files it was loaded from, and their digest
}

// templateVariant is a template in one language. Its functions (money,
// date) write that language's formats: they are bound when it is parsed,
// so a render never consults anything global.
type templateVariant struct {
	lang    language.Tag
	subject *texttemplate.Template
	text    *texttemplate.Template
	html    *htmltemplate.Template
	files   map[string]sourceFile // by template name: what errors name
}

// FieldError names one place in a template's data that its schema
// refuses, by JSON pointer (RFC 6901: "" is the whole document,
// "/items/0/quantity" one field), with what is wrong there.
type FieldError struct {
	Pointer string `json:"pointer"`
	Detail  string `json:"detail"`
}

// DataError is returned by Validate: the template cannot take the data,
// at each of Fields: its schema.json refuses it there, or (at "", the
// whole) a language of it cannot render it.
type DataError struct {
	Template string
	Fields   []FieldError
}

func (e *DataError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = displayPointer(f.Pointer) + ": " + f.Detail
	}
	return fmt.Sprintf("mailtemplate: template %s cannot take this data: %s", e.Template, strings.Join(parts, "; "))
}

// Without returns a registry that lacks the named templates, as an older
// build that predates them would; the fault-injection suite runs such a
// worker to rehearse a rolling deploy.
func (t *Templates) Without(names ...string) *Templates {
	t = t.current()
	out := &Templates{byName: maps.Clone(t.byName)}
	for _, n := range names {
		delete(out.byName, n)
	}
	return out
}

// Subscriptions are the names of the templates of the subscription
// category (meta.json), sorted.
func (t *Templates) Subscriptions() []string {
	t = t.current()
	var out []string
	for _, name := range t.Names() {
		if t.byName[name].meta.category == CategorySubscription {
			out = append(out, name)
		}
	}
	return out
}

// Names lists the registered templates in order.
func (t *Templates) Names() []string {
	t = t.current()
	names := make([]string, 0, len(t.byName))
	for n := range t.byName {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Has reports whether name is registered.
func (t *Templates) Has(name string) bool {
	t = t.current()
	_, ok := t.byName[name]
	return ok
}

// Languages lists the BCP 47 tags a template is written in, the default
// language first; nil for an unknown template.
func (t *Templates) Languages(name string) []string {
	t = t.current()
	et, ok := t.byName[name]
	if !ok {
		return nil
	}
	langs := make([]string, len(et.variants))
	for i, v := range et.variants {
		langs[i] = v.lang.String()
	}
	return langs
}

// Sample returns the example data a template is previewed with.
func (t *Templates) Sample(name string) (json.RawMessage, error) {
	t = t.current()
	et, ok := t.byName[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknown, name)
	}
	return et.sample, nil
}

// Validate checks that template name can take data: its schema first,
// then a render in each of its languages, since a schema can let through
// what the template cannot show (an "integer" 1.0 or 1e30 that money
// cannot take as minor units). Data it cannot take is a *DataError
// naming every failing place. The generic trigger and the preview both
// ask it, so that neither takes data the worker could only hold.
func (t *Templates) Validate(name string, data json.RawMessage) error {
	t = t.current()
	et, ok := t.byName[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknown, name)
	}
	v, err := decodeJSON(data)
	if err != nil {
		return &DataError{Template: name, Fields: []FieldError{{Pointer: "", Detail: "is not valid JSON: " + err.Error()}}}
	}
	if _, ok := v.(map[string]any); !ok {
		return &DataError{Template: name, Fields: []FieldError{{Pointer: "", Detail: "must be a JSON object"}}}
	}
	if err := et.schema.Validate(v); err != nil {
		var verr *jsonschema.ValidationError
		if errors.As(err, &verr) {
			return &DataError{Template: name, Fields: fieldErrors(verr)}
		}
		return fmt.Errorf("validate data for template %s: %w", name, err)
	}
	for _, variant := range et.variants {
		if _, part, err := variant.render(v.(map[string]any)); err != nil {
			return &DataError{Template: name, Fields: []FieldError{{Pointer: "",
				Detail: fmt.Sprintf("cannot be rendered: its %s in %s: %v", part, variant.lang, variant.locate(err))}}}
		}
	}
	return nil
}
