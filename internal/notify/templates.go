package notify

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	texttemplate "text/template"
	"time"

	"github.com/sekali-dev/sekali/internal/money"
)

// templateFS holds one directory per template: subject.tmpl, text.tmpl,
// html.tmpl and sample.json (the data the preview and the golden test
// render). docs/templates.md explains how to add one.
//
//go:embed templates
var templateFS embed.FS

// ErrUnknownTemplate is returned for a template name that is not registered.
var ErrUnknownTemplate = errors.New("notify: unknown template")

// Rendered is a template's output for one delivery.
type Rendered struct {
	Subject string
	Text    string
	HTML    string
}

// Templates is the registry of every e-mail the service can send.
type Templates struct {
	byName map[string]*emailTemplate
}

type emailTemplate struct {
	subject *texttemplate.Template
	text    *texttemplate.Template
	html    *htmltemplate.Template
	sample  json.RawMessage
}

// templateFuncs are available in every template.
var templateFuncs = map[string]any{
	// money formats minor units of a currency: {{money .total .currency}}.
	"money": func(amount any, currency string) (string, error) {
		n, err := toInt64(amount)
		if err != nil {
			return "", err
		}
		return money.Format(n, currency), nil
	},
	// date formats an RFC 3339 timestamp: {{date .placed_at}}.
	"date": func(v string) (string, error) {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return "", fmt.Errorf("date: %w", err)
		}
		return t.UTC().Format("2 January 2006, 15:04 UTC"), nil
	},
	// shortid is the first block of a UUID, for subjects: {{shortid .order_id}}.
	"shortid": func(v string) string {
		head, _, _ := strings.Cut(v, "-")
		return strings.ToUpper(head)
	},
}

// LoadTemplates parses every embedded template and renders each with its
// sample data, so that a broken template stops the binary at start, not
// a delivery at 3 a.m.
func LoadTemplates() (*Templates, error) {
	entries, err := fs.ReadDir(templateFS, "templates")
	if err != nil {
		return nil, fmt.Errorf("read templates: %w", err)
	}
	t := &Templates{byName: map[string]*emailTemplate{}}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		et, err := parseTemplate(e.Name())
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", e.Name(), err)
		}
		t.byName[e.Name()] = et
		if _, err := t.Render(e.Name(), et.sample); err != nil {
			return nil, fmt.Errorf("template %s does not render its sample.json: %w", e.Name(), err)
		}
	}
	return t, nil
}

func parseTemplate(name string) (*emailTemplate, error) {
	read := func(file string) (string, error) {
		b, err := templateFS.ReadFile(path.Join("templates", name, file))
		return string(b), err
	}
	var et emailTemplate
	src, err := read("subject.tmpl")
	if err != nil {
		return nil, err
	}
	if et.subject, err = texttemplate.New("subject").Funcs(templateFuncs).Option("missingkey=error").Parse(strings.TrimSpace(src)); err != nil {
		return nil, err
	}
	if src, err = read("text.tmpl"); err != nil {
		return nil, err
	}
	if et.text, err = texttemplate.New("text").Funcs(templateFuncs).Option("missingkey=error").Parse(src); err != nil {
		return nil, err
	}
	if src, err = read("html.tmpl"); err != nil {
		return nil, err
	}
	if et.html, err = htmltemplate.New("html").Funcs(templateFuncs).Option("missingkey=error").Parse(src); err != nil {
		return nil, err
	}
	sample, err := read("sample.json")
	if err != nil {
		return nil, err
	}
	et.sample = json.RawMessage(sample)
	return &et, nil
}

// Without returns a registry that lacks the named templates, as an older
// build that predates them would; the fault-injection suite runs such a
// worker to rehearse a rolling deploy.
func (t *Templates) Without(names ...string) *Templates {
	out := &Templates{byName: maps.Clone(t.byName)}
	for _, n := range names {
		delete(out.byName, n)
	}
	return out
}

// Names lists the registered templates in order.
func (t *Templates) Names() []string {
	names := make([]string, 0, len(t.byName))
	for n := range t.byName {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Has reports whether name is registered.
func (t *Templates) Has(name string) bool {
	_, ok := t.byName[name]
	return ok
}

// Sample returns the example data a template is previewed with.
func (t *Templates) Sample(name string) (json.RawMessage, error) {
	et, ok := t.byName[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownTemplate, name)
	}
	return et.sample, nil
}

// Render renders template name with data, the JSON snapshot stored with
// the delivery. Numbers stay exact (no float64 detour).
func (t *Templates) Render(name string, data json.RawMessage) (Rendered, error) {
	et, ok := t.byName[name]
	if !ok {
		return Rendered{}, fmt.Errorf("%w: %q", ErrUnknownTemplate, name)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		return Rendered{}, fmt.Errorf("render %s: template data: %w", name, err)
	}
	var subject, text, html bytes.Buffer
	if err := et.subject.Execute(&subject, v); err != nil {
		return Rendered{}, fmt.Errorf("render %s subject: %w", name, err)
	}
	if err := et.text.Execute(&text, v); err != nil {
		return Rendered{}, fmt.Errorf("render %s text: %w", name, err)
	}
	if err := et.html.Execute(&html, v); err != nil {
		return Rendered{}, fmt.Errorf("render %s html: %w", name, err)
	}
	// A subject is one header line whatever the data holds.
	s := strings.Join(strings.Fields(subject.String()), " ")
	return Rendered{Subject: s, Text: text.String(), HTML: html.String()}, nil
}

func toInt64(v any) (int64, error) {
	switch n := v.(type) {
	case json.Number:
		return n.Int64()
	case int64:
		return n, nil
	case int:
		return int64(n), nil
	case string:
		return strconv.ParseInt(n, 10, 64)
	default:
		return 0, fmt.Errorf("money: %v (%T) is not a whole number of minor units", v, v)
	}
}
