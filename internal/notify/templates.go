package notify

import (
	"bytes"
	"cmp"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	texttemplate "text/template"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/sekali-dev/sekali/internal/locale"
)

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
// templateFS holds the built-in templates; TemplateConfig.Dir may add more.
//
//go:embed templates
var templateFS embed.FS

// builtinRoot is how problems name the files of the built-in templates:
// where they are in the repository.
const builtinRoot = "internal/notify/templates"

// ErrUnknownTemplate is returned for a template name that is not registered.
var ErrUnknownTemplate = errors.New("notify: unknown template")

// Rendered is a template's output for one delivery.
type Rendered struct {
	Subject string
	Text    string
	HTML    string
	// Language is the BCP 47 tag of the variant rendered ("id", "en"):
	// the best match for the locale asked for, or the default language.
	Language string
}

// TemplateConfig says where templates come from besides the built-in
// ones, and which language a delivery falls back to.
type TemplateConfig struct {
	// Dir holds more templates, one sub-directory each, laid out like the
	// built-in ones (TEMPLATES_DIR). Empty: the built-in templates only.
	Dir string
	// DefaultLanguage is the BCP 47 tag of the language a delivery gets
	// when its locale matches none of a template's languages; every
	// template must have it. Empty means English, the language of the
	// e-mails before there were languages.
	DefaultLanguage string
}

// Templates is the registry of every e-mail the service can send.
type Templates struct {
	byName map[string]*emailTemplate
}

type emailTemplate struct {
	schema   *jsonschema.Schema
	sample   json.RawMessage
	variants []*templateVariant // the default language first, then by tag
	matcher  language.Matcher   // over the variants' languages, in that order
}

// templateVariant is a template in one language. Its functions (money,
// date) write that language's formats: they are bound when it is parsed,
// so a render never consults anything global.
type templateVariant struct {
	lang    language.Tag
	subject *texttemplate.Template
	text    *texttemplate.Template
	html    *htmltemplate.Template
}

// templateFuncs are the functions of every template, writing money and
// dates in the language of f.
func templateFuncs(f locale.Format) map[string]any {
	return map[string]any{
		// money formats minor units of a currency: {{money .total .currency}}.
		"money": func(amount any, currency string) (string, error) {
			n, err := toInt64(amount)
			if err != nil {
				return "", err
			}
			return f.Money(n, currency), nil
		},
		// date formats an RFC 3339 timestamp, in UTC: {{date .placed_at}}.
		"date": func(v string) (string, error) {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return "", fmt.Errorf("date: %w", err)
			}
			return f.DateTime(t), nil
		},
		// shortid is the first block of a UUID, for subjects: {{shortid .order_id}}.
		"shortid": func(v string) string {
			head, _, _ := strings.Cut(v, "-")
			return strings.ToUpper(head)
		},
	}
}

// TemplatesFromEnv is the TemplateConfig the binaries read from
// TEMPLATES_DIR (default none) and TEMPLATES_DEFAULT_LANGUAGE (default id).
func TemplatesFromEnv(getenv func(string) string) TemplateConfig {
	return TemplateConfig{Dir: strings.TrimSpace(getenv("TEMPLATES_DIR")),
		DefaultLanguage: cmp.Or(strings.TrimSpace(getenv("TEMPLATES_DEFAULT_LANGUAGE")), "id")}
}

// LoadTemplates loads the built-in templates, in English by default. See
// LoadTemplatesFrom.
func LoadTemplates() (*Templates, error) {
	return LoadTemplatesFrom(TemplateConfig{})
}

// LoadTemplatesFrom loads the built-in templates and those in cfg.Dir,
// and checks every one: its name, its files, its schema, that sample.json
// satisfies the schema and that it renders sample.json in every language
// it has, so that a broken template stops the binary at start, not a
// delivery at 3 a.m. If anything is wrong the error is a *TemplateError
// listing every problem.
func LoadTemplatesFrom(cfg TemplateConfig) (*Templates, error) {
	t, problems := loadTemplates(cfg)
	if len(problems) > 0 {
		return nil, &TemplateError{Problems: problems}
	}
	return t, nil
}

// CheckTemplates returns every problem LoadTemplatesFrom(cfg) would
// refuse, template by template in name order, the built-in ones first;
// none means the templates load. A command checking a directory before a
// deploy prints them one per line (Problem.String).
func CheckTemplates(cfg TemplateConfig) []Problem {
	_, problems := loadTemplates(cfg)
	return problems
}

// Problem is one thing wrong with a template: the file, the line when the
// parser says (0 otherwise), and what is wrong.
type Problem struct {
	File    string
	Line    int
	Message string
}

// String is "file:line: message", as compilers write it.
func (p Problem) String() string {
	switch {
	case p.File == "":
		return p.Message
	case p.Line > 0:
		return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Message)
	default:
		return p.File + ": " + p.Message
	}
}

// TemplateError is why templates do not load: every problem found.
type TemplateError struct {
	Problems []Problem
}

func (e *TemplateError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	return "notify: broken templates: " + strings.Join(parts, "; ")
}

// FieldError names one place in a template's data that its schema
// refuses, by JSON pointer (RFC 6901: "" is the whole document,
// "/items/0/quantity" one field), with what is wrong there.
type FieldError struct {
	Pointer string `json:"pointer"`
	Detail  string `json:"detail"`
}

// DataError is returned by Validate: the data does not satisfy the
// template's schema.json, at each of Fields.
type DataError struct {
	Template string
	Fields   []FieldError
}

func (e *DataError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = displayPointer(f.Pointer) + ": " + f.Detail
	}
	return fmt.Sprintf("notify: data for template %s does not match its schema: %s", e.Template, strings.Join(parts, "; "))
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

// Languages lists the BCP 47 tags a template is written in, the default
// language first; nil for an unknown template.
func (t *Templates) Languages(name string) []string {
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
	et, ok := t.byName[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownTemplate, name)
	}
	return et.sample, nil
}

// Validate checks data against the schema of template name. Data that
// does not satisfy it is a *DataError naming every failing place.
func (t *Templates) Validate(name string, data json.RawMessage) error {
	et, ok := t.byName[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownTemplate, name)
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
	return nil
}

// Render renders template name with data in the default language; see
// RenderLocale.
func (t *Templates) Render(name string, data json.RawMessage) (Rendered, error) {
	return t.RenderLocale(name, data, "")
}

// RenderLocale renders template name with data, the JSON snapshot stored
// with the delivery, in the language that best matches userLocale (a BCP 47
// tag such as "id-ID" or "en-GB", or an Accept-Language list): id-ID gets
// id, en-GB gets en, and a locale matching none of the template's
// languages, or empty, or malformed, gets the default language.
// Rendered.Language says which. Numbers stay exact (no float64 detour).
func (t *Templates) RenderLocale(name string, data json.RawMessage, userLocale string) (Rendered, error) {
	et, ok := t.byName[name]
	if !ok {
		return Rendered{}, fmt.Errorf("%w: %q", ErrUnknownTemplate, name)
	}
	v := et.variants[0]
	if userLocale != "" && len(et.variants) > 1 {
		// With no match the matcher answers its first language: the default.
		_, i := language.MatchStrings(et.matcher, userLocale)
		v = et.variants[i]
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var d map[string]any
	if err := dec.Decode(&d); err != nil {
		return Rendered{}, fmt.Errorf("render %s: template data: %w", name, err)
	}
	r, part, err := v.render(d)
	if err != nil {
		return Rendered{}, fmt.Errorf("render %s %s (%s): %w", name, part, v.lang, err)
	}
	return r, nil
}

// render executes the three parts; on failure it names the part.
func (v *templateVariant) render(data map[string]any) (Rendered, string, error) {
	var subject, text, html bytes.Buffer
	if err := v.subject.Execute(&subject, data); err != nil {
		return Rendered{}, "subject", err
	}
	if err := v.text.Execute(&text, data); err != nil {
		return Rendered{}, "text", err
	}
	if err := v.html.Execute(&html, data); err != nil {
		return Rendered{}, "html", err
	}
	// A subject is one header line whatever the data holds.
	s := strings.Join(strings.Fields(subject.String()), " ")
	return Rendered{Subject: s, Text: text.String(), HTML: html.String(), Language: v.lang.String()}, "", nil
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

// --- loading ---

// The files of a template, and of each of its languages.
const (
	schemaFile = "schema.json"
	sampleFile = "sample.json"
)

var partFiles = []string{"subject.tmpl", "text.tmpl", "html.tmpl"}

// templateSource is a tree of templates: fsys, whose files problems name
// under root.
type templateSource struct {
	fsys    fs.FS
	root    string
	builtin bool
}

// file is how problems name rel, a slash-separated path in fsys.
func (s templateSource) file(rel string) string {
	return filepath.Join(s.root, filepath.FromSlash(rel))
}

// templateLoader collects templates and every problem on the way.
type templateLoader struct {
	defaultLang language.Tag
	byName      map[string]*emailTemplate
	builtin     map[string]bool
	problems    []Problem
}

func (l *templateLoader) problem(file string, line int, format string, args ...any) {
	l.problems = append(l.problems, Problem{File: file, Line: line, Message: fmt.Sprintf(format, args...)})
}

func loadTemplates(cfg TemplateConfig) (*Templates, []Problem) {
	l := &templateLoader{defaultLang: language.English, byName: map[string]*emailTemplate{}, builtin: map[string]bool{}}
	if cfg.DefaultLanguage != "" {
		tag, err := language.Parse(cfg.DefaultLanguage)
		if err != nil {
			return nil, []Problem{{Message: fmt.Sprintf("default language %q is not a BCP 47 tag such as id or en: %v", cfg.DefaultLanguage, err)}}
		}
		l.defaultLang = tag
	}
	builtin, err := fs.Sub(templateFS, "templates")
	if err != nil {
		return nil, []Problem{{File: builtinRoot, Message: err.Error()}}
	}
	l.loadSource(templateSource{fsys: builtin, root: builtinRoot, builtin: true})
	if cfg.Dir != "" {
		if info, err := os.Stat(cfg.Dir); err != nil {
			l.problem(cfg.Dir, 0, "cannot read the templates directory: %v", err)
		} else if !info.IsDir() {
			l.problem(cfg.Dir, 0, "is not a directory")
		} else {
			l.loadSource(templateSource{fsys: os.DirFS(cfg.Dir), root: cfg.Dir})
		}
	}
	return &Templates{byName: l.byName}, l.problems
}

// loadSource loads every template of s: each directory at its top is one.
// Hidden entries (a Kubernetes volume's ..data) and plain files (a
// README) are passed over.
func (l *templateLoader) loadSource(s templateSource) {
	entries, err := fs.ReadDir(s.fsys, ".")
	if err != nil {
		l.problem(s.root, 0, "cannot read the templates directory: %v", err)
		return
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		info, err := fs.Stat(s.fsys, name) // follows symbolic links
		if err != nil {
			l.problem(s.file(name), 0, "%v", err)
			continue
		}
		if !info.IsDir() {
			continue
		}
		valid := true
		if !validTemplateName(name) {
			l.problem(s.file(name), 0, "%q is not a template name: use lower-case letters, digits and single hyphens, at most 64 characters, such as order-cancelled", name)
			valid = false
		}
		if !s.builtin && l.builtin[name] {
			l.problem(s.file(name), 0, "%s is a built-in template, and a directory cannot replace one: give this template another name", name)
			valid = false
		}
		et := l.loadTemplate(s, name)
		if et != nil && valid {
			l.byName[name] = et
			if s.builtin {
				l.builtin[name] = true
			}
		}
	}
}

// validTemplateName: lower-case letters and digits in groups joined by
// single hyphens, as in order-confirmation; it is part of every
// idempotency key and metric label.
func validTemplateName(name string) bool {
	if name == "" || len(name) > 64 || name[0] == '-' || name[len(name)-1] == '-' || strings.Contains(name, "--") {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// loadTemplate checks one template directory and returns it, or nil if
// anything in it is wrong (the problems say what).
func (l *templateLoader) loadTemplate(s templateSource, name string) *emailTemplate {
	before := len(l.problems)
	entries, err := fs.ReadDir(s.fsys, name)
	if err != nil {
		l.problem(s.file(name), 0, "%v", err)
		return nil
	}
	var rootParts, langDirs []string
	for _, e := range entries {
		file := e.Name()
		if strings.HasPrefix(file, ".") {
			continue
		}
		rel := path.Join(name, file)
		info, err := fs.Stat(s.fsys, rel)
		switch {
		case err != nil:
			l.problem(s.file(rel), 0, "%v", err)
		case info.IsDir():
			langDirs = append(langDirs, file)
		case file == schemaFile || file == sampleFile:
		case slices.Contains(partFiles, file):
			rootParts = append(rootParts, file)
		default:
			l.problem(s.file(rel), 0, "unexpected file: a template holds schema.json, sample.json, and subject.tmpl, text.tmpl and html.tmpl in each language directory (id/, en/, ...)")
		}
	}

	et := &emailTemplate{}
	schemaURL := "file:///" + name + "/" + schemaFile // never loaded: the document is added as it is
	if raw, doc, ok := l.readJSON(s, path.Join(name, schemaFile)); ok {
		et.schema = l.compileSchema(s, path.Join(name, schemaFile), schemaURL, raw, doc)
	}
	var sample any
	sampleRaw, sample, sampleOK := l.readJSON(s, path.Join(name, sampleFile))
	et.sample = sampleRaw
	if sampleOK {
		if _, isObject := sample.(map[string]any); !isObject {
			l.problem(s.file(path.Join(name, sampleFile)), 1, "must be a JSON object, as the data of every delivery is")
			sampleOK = false
		}
	}
	if sampleOK && et.schema != nil {
		l.checkSample(s, path.Join(name, sampleFile), sampleRaw, sample, et.schema)
	}

	// The variants: the files at the top in the default language, or one
	// directory per language.
	switch {
	case len(rootParts) > 0 && len(langDirs) > 0:
		l.problem(s.file(name), 0, "has both %s at the top and language directories (%s/): move them into a language directory",
			strings.Join(rootParts, ", "), strings.Join(langDirs, "/, "))
	case len(rootParts) > 0:
		if v := l.parseVariant(s, name, l.defaultLang); v != nil {
			et.variants = []*templateVariant{v}
		}
	case len(langDirs) == 0:
		l.problem(s.file(name), 0, "has no text: add subject.tmpl, text.tmpl and html.tmpl in one directory per language (id/, en/, ...)")
	default:
		et.variants = l.parseLanguages(s, name, langDirs)
	}

	if sampleOK {
		for _, v := range et.variants {
			if _, part, err := v.render(sample.(map[string]any)); err != nil {
				rel := variantFile(name, v, len(langDirs) == 0, part+".tmpl")
				l.problems = append(l.problems, templateProblem(s, rel, "does not render sample.json: ", err))
			}
		}
	}
	if len(l.problems) > before {
		return nil
	}
	tags := make([]language.Tag, len(et.variants))
	for i, v := range et.variants {
		tags[i] = v.lang
	}
	et.matcher = language.NewMatcher(tags)
	return et
}

// variantFile is the path in the source of one part of a variant.
func variantFile(name string, v *templateVariant, atTop bool, file string) string {
	if atTop {
		return path.Join(name, file)
	}
	return path.Join(name, v.lang.String(), file)
}

// parseLanguages parses each language directory and returns the variants
// that parse, the default language first. Any problem is recorded, and
// the template refused by the caller; the variants that parse are still
// rendered, so that their problems are found in the same pass.
func (l *templateLoader) parseLanguages(s templateSource, name string, dirs []string) []*templateVariant {
	var variants []*templateVariant
	var tags []language.Tag
	for _, dir := range dirs {
		rel := path.Join(name, dir)
		tag, err := language.Parse(dir)
		switch {
		case err != nil:
			l.problem(s.file(rel), 0, "%q is not a language: name each language directory by its BCP 47 tag, such as id, en or pt-BR (%v)", dir, err)
			continue
		case tag.String() != dir:
			l.problem(s.file(rel), 0, "name this language directory %s, as BCP 47 writes %q", tag, dir)
			continue
		}
		tags = append(tags, tag)
		if v := l.parseVariant(s, rel, tag); v != nil {
			variants = append(variants, v)
		}
	}
	if len(tags) == 0 {
		return nil
	}
	// The default language's variant: the closest in the same language
	// (id for id-ID, en-GB before en for en-GB).
	_, i, conf := language.NewMatcher(tags).Match(l.defaultLang)
	defBase, _ := l.defaultLang.Base()
	if base, _ := tags[i].Base(); conf < language.High || base != defBase {
		have := make([]string, len(tags))
		for j, t := range tags {
			have[j] = t.String()
		}
		l.problem(s.file(name), 0, "has no variant in the default language, %s (it has %s): add a %s/ directory", l.defaultLang, strings.Join(have, ", "), l.defaultLang)
	}
	def := tags[i]
	slices.SortStableFunc(variants, func(a, b *templateVariant) int {
		switch {
		case a.lang == def:
			return -1
		case b.lang == def:
			return 1
		default:
			return strings.Compare(a.lang.String(), b.lang.String())
		}
	})
	return variants
}

// parseVariant parses subject.tmpl, text.tmpl and html.tmpl in dir, the
// variant in language lang.
func (l *templateLoader) parseVariant(s templateSource, dir string, lang language.Tag) *templateVariant {
	funcs := templateFuncs(locale.For(lang))
	v := &templateVariant{lang: lang}
	ok := true
	for _, file := range partFiles {
		rel := path.Join(dir, file)
		src, err := fs.ReadFile(s.fsys, rel)
		if errors.Is(err, fs.ErrNotExist) {
			l.problem(s.file(rel), 0, "missing: each language has subject.tmpl, text.tmpl and html.tmpl")
			ok = false
			continue
		}
		if err != nil {
			l.problem(s.file(rel), 0, "%v", err)
			ok = false
			continue
		}
		// Each is named by its path, so that errors, at load and in a
		// held delivery's last_error, say file:line.
		switch file {
		case "subject.tmpl":
			v.subject, err = texttemplate.New(rel).Funcs(funcs).Option("missingkey=error").Parse(string(src))
		case "text.tmpl":
			v.text, err = texttemplate.New(rel).Funcs(funcs).Option("missingkey=error").Parse(string(src))
		case "html.tmpl":
			v.html, err = htmltemplate.New(rel).Funcs(funcs).Option("missingkey=error").Parse(string(src))
		}
		if err != nil {
			l.problems = append(l.problems, templateProblem(s, rel, "", err))
			ok = false
		}
	}
	if !ok {
		return nil
	}
	return v
}

// templateProblem turns a text/template or html/template error, which
// starts "template: rel:line:" or "html/template:rel:line:col:", into a
// problem at that file and line.
func templateProblem(s templateSource, rel, prefix string, err error) Problem {
	msg := err.Error()
	i := strings.Index(msg, rel+":")
	if i < 0 {
		return Problem{File: s.file(rel), Message: prefix + msg}
	}
	rest := msg[i+len(rel)+1:]
	lineText, after, _ := strings.Cut(rest, ":")
	line, convErr := strconv.Atoi(lineText)
	if convErr != nil {
		return Problem{File: s.file(rel), Message: prefix + strings.TrimSpace(rest)}
	}
	rest = after
	if col, after, ok := strings.Cut(rest, ":"); ok {
		if _, err := strconv.Atoi(col); err == nil {
			rest = after
		}
	}
	rest = strings.Replace(strings.TrimSpace(rest), fmt.Sprintf("executing %q at ", rel), "at ", 1)
	return Problem{File: s.file(rel), Line: line, Message: prefix + rest}
}

// readJSON reads a JSON file and decodes it with exact numbers; a syntax
// error is a problem at its line.
func (l *templateLoader) readJSON(s templateSource, rel string) (raw []byte, v any, ok bool) {
	raw, err := fs.ReadFile(s.fsys, rel)
	if errors.Is(err, fs.ErrNotExist) {
		switch path.Base(rel) {
		case schemaFile:
			l.problem(s.file(rel), 0, "missing: every template has a JSON Schema of the data it reads")
		default:
			l.problem(s.file(rel), 0, "missing: every template has example data, which the preview and the check at load render")
		}
		return nil, nil, false
	}
	if err != nil {
		l.problem(s.file(rel), 0, "%v", err)
		return nil, nil, false
	}
	if err := json.Unmarshal(raw, new(json.RawMessage)); err != nil {
		line := 0
		var serr *json.SyntaxError
		if errors.As(err, &serr) {
			line = lineAt(raw, serr.Offset-1)
		}
		l.problem(s.file(rel), line, "not valid JSON: %v", err)
		return nil, nil, false
	}
	v, err = decodeJSON(raw)
	if err != nil {
		l.problem(s.file(rel), 0, "not valid JSON: %v", err)
		return nil, nil, false
	}
	return raw, v, true
}

// decodeJSON decodes one JSON value, numbers as json.Number, as the
// schema validator wants them.
func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	return v, nil
}

// compileSchema compiles a schema.json. It must be self-contained: a
// $ref elsewhere than inside it (or to the JSON Schema metaschemas) is
// refused rather than fetched.
func (l *templateLoader) compileSchema(s templateSource, rel, schemaURL string, raw []byte, doc any) *jsonschema.Schema {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.RegisterVocabulary(textVocabulary())
	c.AssertVocabs()
	c.UseLoader(refusingLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		l.problem(s.file(rel), 0, "%v", err)
		return nil
	}
	sch, err := c.Compile(schemaURL)
	if err == nil {
		return sch
	}
	lines := jsonLines(raw)
	file := s.file(rel)
	base := schemaURL[:strings.LastIndexByte(schemaURL, '/')+1]
	readable := func(msg string) string { // the locations as the author wrote them
		return strings.ReplaceAll(strings.ReplaceAll(msg, schemaURL, schemaFile), base, "")
	}
	var (
		metaErr  *jsonschema.SchemaValidationError
		regexErr *jsonschema.InvalidRegexError
		loadErr  *jsonschema.LoadURLError
	)
	switch {
	case errors.As(err, &metaErr):
		var verr *jsonschema.ValidationError
		if errors.As(metaErr.Err, &verr) {
			for _, f := range fieldErrors(verr) {
				l.problem(file, lineOf(lines, f.Pointer), "not a valid JSON Schema: at %s: %s", displayPointer(f.Pointer), f.Detail)
			}
			return nil
		}
	case errors.As(err, &regexErr):
		l.problem(file, lineOf(lines, fragmentPointer(regexErr.URL)), "invalid regular expression %q: %v", regexErr.Regex, regexErr.Err)
		return nil
	case errors.As(err, &loadErr):
		l.problem(file, 0, "$ref to %s: a schema.json must be self-contained, with its definitions under $defs", readable(loadErr.URL))
		return nil
	}
	l.problem(file, 0, "%s", readable(err.Error()))
	return nil
}

// refusingLoader loads no schema: the metaschemas are built in, and a
// template's schema refers to nothing else.
type refusingLoader struct{}

func (refusingLoader) Load(url string) (any, error) {
	return nil, errors.New("not loaded")
}

// checkSample validates sample.json against the schema: every failing
// place is a problem at its line.
func (l *templateLoader) checkSample(s templateSource, rel string, raw []byte, sample any, sch *jsonschema.Schema) {
	err := sch.Validate(sample)
	if err == nil {
		return
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		l.problem(s.file(rel), 0, "%v", err)
		return
	}
	lines := jsonLines(raw)
	for _, f := range fieldErrors(verr) {
		l.problem(s.file(rel), lineOf(lines, f.Pointer), "does not satisfy schema.json: at %s: %s", displayPointer(f.Pointer), f.Detail)
	}
}

var schemaMessages = message.NewPrinter(language.English)

// fieldErrors flattens a validation error to its leaves, one per failing
// place; a missing or unexpected property points at that property.
func fieldErrors(verr *jsonschema.ValidationError) []FieldError {
	var out []FieldError
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		at := pointer(e.InstanceLocation)
		switch k := e.ErrorKind.(type) {
		case *kind.Required:
			for _, p := range k.Missing {
				out = append(out, FieldError{Pointer: at + "/" + escapePointer(p), Detail: "is required"})
			}
		case *kind.AdditionalProperties:
			for _, p := range k.Properties {
				out = append(out, FieldError{Pointer: at + "/" + escapePointer(p), Detail: "is not a property the schema allows"})
			}
		default:
			out = append(out, FieldError{Pointer: at, Detail: e.ErrorKind.LocalizedString(schemaMessages)})
		}
	}
	walk(verr)
	slices.SortStableFunc(out, func(a, b FieldError) int { return strings.Compare(a.Pointer, b.Pointer) })
	return slices.Compact(out)
}

func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escapePointer(t))
	}
	return b.String()
}

func escapePointer(token string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(token)
}

// displayPointer writes a pointer for people: "" is the document itself.
func displayPointer(p string) string {
	if p == "" {
		return "the top level"
	}
	return p
}

// fragmentPointer is the JSON pointer in a schema location's fragment
// ("file:///x/schema.json#/properties/a/pattern").
func fragmentPointer(loc string) string {
	_, frag, _ := strings.Cut(loc, "#")
	if p, err := url.PathUnescape(frag); err == nil {
		return p
	}
	return frag
}

// lineAt is the line (from 1) of the byte at offset in data.
func lineAt(data []byte, offset int64) int {
	offset = max(0, min(offset, int64(len(data))))
	return 1 + bytes.Count(data[:offset], []byte("\n"))
}

// jsonLines maps the JSON pointer of every value in data, valid JSON, to
// the line it starts on.
func jsonLines(data []byte) map[string]int {
	lines := map[string]int{}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	start := func() int64 { // the offset of the next value: past blanks, ':' and ','
		off := dec.InputOffset()
		for off < int64(len(data)) && strings.IndexByte(" \t\r\n:,", data[off]) >= 0 {
			off++
		}
		return off
	}
	var walk func(ptr string) error
	walk = func(ptr string) error {
		lines[ptr] = lineAt(data, start())
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			for dec.More() {
				key, err := dec.Token()
				if err != nil {
					return err
				}
				k, _ := key.(string)
				if err := walk(ptr + "/" + escapePointer(k)); err != nil {
					return err
				}
			}
			_, err = dec.Token()
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				if err := walk(ptr + "/" + strconv.Itoa(i)); err != nil {
					return err
				}
			}
			_, err = dec.Token()
		}
		return err
	}
	_ = walk("") // data is valid: an error only ends the map early
	return lines
}

// lineOf is the line of the value at ptr or, when the value is missing
// (a required property), of its closest enclosing value.
func lineOf(lines map[string]int, ptr string) int {
	for {
		if n, ok := lines[ptr]; ok {
			return n
		}
		i := strings.LastIndexByte(ptr, '/')
		if i < 0 {
			return 0
		}
		ptr = ptr[:i]
	}
}
