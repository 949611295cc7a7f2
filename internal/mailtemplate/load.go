package mailtemplate

import (
	"cmp"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/text/language"

	"github.com/sekali-dev/sekali/internal/locale"
)

// builtinFS holds the built-in templates, laid out as the package
// comment says, and their layouts and partials (all: keeps _layouts and
// _partials, which embed otherwise leaves out).
//
//go:embed all:builtin
var builtinFS embed.FS

// builtinRoot is how problems name the files of the built-in templates:
// where they are in the repository.
const builtinRoot = "internal/mailtemplate/builtin"

// Config says where templates come from besides the built-in ones, and
// which language a delivery falls back to.
type Config struct {
	// Dir holds more templates, one sub-directory each, laid out like the
	// built-in ones (TEMPLATES_DIR). Empty: the built-in templates only.
	Dir string
	// DefaultLanguage is the BCP 47 tag of the language a delivery gets
	// when its locale matches none of a template's languages; every
	// template must have it. Empty means English, the language of the
	// e-mails before there were languages.
	DefaultLanguage string
	// Brand is the shop the layouts show (ReadBrand: BRAND_NAME, ...).
	Brand Brand
	// Reload reads Dir again when its files change (TEMPLATES_RELOAD, for
	// development: reload.go), OnReload hears of each reload: the
	// templates it loaded, or why it kept those it had.
	Reload   bool
	OnReload func(*Templates, error)
}

// FromEnv is the Config the binaries read from TEMPLATES_DIR (default
// none) and TEMPLATES_DEFAULT_LANGUAGE (default id).
func FromEnv(getenv func(string) string) Config {
	return Config{Dir: strings.TrimSpace(getenv("TEMPLATES_DIR")),
		DefaultLanguage: cmp.Or(strings.TrimSpace(getenv("TEMPLATES_DEFAULT_LANGUAGE")), "id")}
}

// LoadBuiltin loads the built-in templates only, in English by default.
// See Load.
func LoadBuiltin() (*Templates, error) {
	return Load(Config{})
}

// Load loads the built-in templates and those in cfg.Dir, and checks
// every one: its name, its files, its schema, that sample.json satisfies
// the schema and that it renders sample.json in every language it has,
// so that a broken template stops the binary at start, not a delivery at
// 3 a.m. If anything is wrong the error is a *LoadError listing every
// problem.
func Load(cfg Config) (*Templates, error) {
	if cfg.Reload && cfg.Dir != "" {
		return loadReloading(cfg)
	}
	t, problems := loadTemplates(cfg)
	if len(problems) > 0 {
		return nil, &LoadError{Problems: problems}
	}
	return t, nil
}

// Check returns every problem Load(cfg) would refuse, template by
// template in name order, the built-in ones first; none means the
// templates load. A command checking a directory before a deploy prints
// them one per line (Problem.String).
func Check(cfg Config) []Problem {
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

// LoadError is why templates do not load: every problem found.
type LoadError struct {
	Problems []Problem
}

func (e *LoadError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	return "mailtemplate: broken templates: " + strings.Join(parts, "; ")
}

// The files of a template, and of each of its languages.
const (
	schemaFile = "schema.json"
	sampleFile = "sample.json"
	metaFile   = "meta.json" // optional: the sender's name, Reply-To, category
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
	brand       Brand
	shop        shop // what the template functions need of the brand
	shared      shared
	byName      map[string]*emailTemplate
	builtin     map[string]bool
	problems    problemList
	files       map[string][]byte // what the template being loaded read, by path in its source
}

// newLoader is a loader of templates in defaultLang for brand, whose
// time zone and links it checks.
func newLoader(defaultLang language.Tag, brand Brand) (*templateLoader, error) {
	s, err := newShop(brand)
	if err != nil {
		return nil, err
	}
	return &templateLoader{defaultLang: defaultLang, brand: brand, shop: s, byName: map[string]*emailTemplate{}, builtin: map[string]bool{}}, nil
}

// readFile reads rel from s and keeps it among the files of the template
// being loaded: its version is their digest.
func (l *templateLoader) readFile(s templateSource, rel string) ([]byte, error) {
	b, err := fs.ReadFile(s.fsys, rel)
	if err == nil {
		l.files[rel] = b
	}
	return b, err
}

func (l *templateLoader) problem(file string, line int, format string, args ...any) {
	l.problems.add(Problem{File: file, Line: line, Message: fmt.Sprintf(format, args...)})
}

// problemList is the problems found, each once: a layout or a partial
// that every template uses is wrong once, not once a template.
type problemList struct {
	list []Problem
	seen map[Problem]bool
}

func (p *problemList) add(pr Problem) {
	if p.seen[pr] {
		return
	}
	if p.seen == nil {
		p.seen = map[Problem]bool{}
	}
	p.seen[pr] = true
	p.list = append(p.list, pr)
}

func loadTemplates(cfg Config) (*Templates, []Problem) {
	l, err := newLoader(language.English, cfg.Brand)
	if err != nil {
		return nil, []Problem{{Message: err.Error()}}
	}
	if cfg.DefaultLanguage != "" {
		tag, err := language.Parse(cfg.DefaultLanguage)
		if err != nil {
			return nil, []Problem{{Message: fmt.Sprintf("default language %q is not a BCP 47 tag such as id or en: %v", cfg.DefaultLanguage, err)}}
		}
		l.defaultLang = tag
	}
	builtin, err := fs.Sub(builtinFS, "builtin")
	if err != nil {
		return nil, []Problem{{File: builtinRoot, Message: err.Error()}}
	}
	sources := []templateSource{{fsys: builtin, root: builtinRoot, builtin: true}}
	if cfg.Dir != "" {
		if info, err := os.Stat(cfg.Dir); err != nil {
			l.problem(cfg.Dir, 0, "cannot read the templates directory: %v", err)
		} else if !info.IsDir() {
			l.problem(cfg.Dir, 0, "is not a directory")
		} else {
			sources = append(sources, templateSource{fsys: os.DirFS(cfg.Dir), root: cfg.Dir})
		}
	}
	// The layouts and partials first, the directory's replacing the
	// built-in ones: the built-in templates use a shop's layout too.
	for _, s := range sources {
		l.loadShared(s)
	}
	l.checkShared()
	for _, s := range sources {
		l.loadSource(s)
	}
	return &Templates{byName: l.byName}, l.problems.list
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
		if strings.HasPrefix(name, ".") || name == layoutsDir || name == partialsDir {
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
	before := len(l.problems.list)
	l.files = map[string][]byte{}
	lay, layoutOK := l.templateLayout(s, name)
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
		case file == schemaFile || file == sampleFile || file == metaFile:
		case slices.Contains(partFiles, file):
			rootParts = append(rootParts, file)
		default:
			l.problem(s.file(rel), 0, "unexpected file: a template holds schema.json, sample.json, meta.json if it sets its sender, and subject.tmpl, text.tmpl and html.tmpl in each language directory (id/, en/, ...)")
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
		if !layoutOK {
			break
		}
		if v := l.parseVariant(s, name, l.defaultLang, lay); v != nil {
			et.variants = []*templateVariant{v}
		}
	case len(langDirs) == 0:
		l.problem(s.file(name), 0, "has no text: add subject.tmpl, text.tmpl and html.tmpl in one directory per language (id/, en/, ...)")
	case layoutOK:
		et.variants = l.parseLanguages(s, name, langDirs, lay)
	}

	et.meta = l.loadMeta(s, name, et.variants)

	if sampleOK {
		for _, v := range et.variants {
			if _, part, err := v.render(sample.(map[string]any)); err != nil {
				rel := variantFile(name, v, len(langDirs) == 0, part+".tmpl")
				l.problems.add(problemFrom(v.files, s.file(rel), "does not render sample.json: ", err))
			}
		}
	}
	// A problem seen before (a layout's, found rendering another
	// template) is not added again, but refuses this template too: so
	// does a layout that does not load.
	if len(l.problems.list) > before || !layoutOK || len(et.variants) == 0 {
		return nil
	}
	tags := make([]language.Tag, len(et.variants))
	for i, v := range et.variants {
		tags[i] = v.lang
	}
	et.matcher = language.NewMatcher(tags)
	et.version = newVersion(name, l.versionFiles(lay))
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
func (l *templateLoader) parseLanguages(s templateSource, name string, dirs []string, lay *layout) []*templateVariant {
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
		if v := l.parseVariant(s, rel, tag, lay); v != nil {
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
// variant in language lang, with the partials and, with lay, inside that
// layout.
func (l *templateLoader) parseVariant(s templateSource, dir string, lang language.Tag, lay *layout) *templateVariant {
	funcs := templateFuncs(locale.For(lang), lang, l.brand, l.shop)
	v := &templateVariant{lang: lang, files: map[string]sourceFile{}}
	src := map[string]string{}
	ok := true
	for _, file := range partFiles {
		rel := path.Join(dir, file)
		b, err := l.readFile(s, rel)
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
		src[file] = string(b)
	}
	if !ok {
		return nil
	}
	// Each file is named by its path, so that errors, at load and in a
	// held delivery's last_error, say file:line. A subject has no layout.
	v.subject = l.textSet(v, s, path.Join(dir, "subject.tmpl"), src["subject.tmpl"], nil, funcs)
	v.text = l.textSet(v, s, path.Join(dir, "text.tmpl"), src["text.tmpl"], lay, funcs)
	v.html = l.htmlSet(v, s, path.Join(dir, "html.tmpl"), src["html.tmpl"], lay, funcs)
	if v.subject == nil || v.text == nil || v.html == nil {
		return nil
	}
	return v
}

// readJSON reads a JSON file and decodes it with exact numbers; a syntax
// error is a problem at its line.
func (l *templateLoader) readJSON(s templateSource, rel string) (raw []byte, v any, ok bool) {
	raw, err := l.readFile(s, rel)
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
