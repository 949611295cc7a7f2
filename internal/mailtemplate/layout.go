package mailtemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	texttemplate "text/template"
	"text/template/parse"

	"github.com/sekali-dev/sekali/internal/locale"
)

// Layouts and partials: what the templates of a directory share.
//
//	_layouts/<name>/html.tmpl   the HTML around a template's: {{template "content" .}} where it goes
//	_layouts/<name>/text.tmpl   the plain text around its text.tmpl, the same way
//	_partials/<name>.html.tmpl  {{template "<name>" .}} in any html.tmpl
//	_partials/<name>.text.tmpl  {{template "<name>" .}} in any text.tmpl or subject.tmpl
//
// A template names its layout in meta.json ("layout": "default"); its
// html.tmpl and text.tmpl are then the content, and html.tmpl may define
// the preheader ({{define "preheader"}}…{{end}}) and whatever other block
// the layout has. The built-in ones are in builtin/_layouts and
// builtin/_partials; a directory's of the same name replace them, for the
// built-in templates too.
const (
	layoutsDir  = "_layouts"
	partialsDir = "_partials"
	// contentSlot is where a layout puts the template's own text.
	contentSlot = "content"
)

// sharedFile is one file of a layout or a partial, as written.
type sharedFile struct {
	s   templateSource
	rel string // in s: _layouts/default/html.tmpl
	src string
}

func (f *sharedFile) file() string { return f.s.file(f.rel) }

// files is how errors of f parsed alone are told.
func (f *sharedFile) files() map[string]sourceFile {
	return map[string]sourceFile{f.rel: {display: f.file()}}
}

// layout is a layout's two parts; its HTML is parsed with the CSS inlined
// (inline.go), and css is the stylesheet the HTML of the templates and
// partials that use it get inlined too.
type layout struct {
	name       string
	html, text *sharedFile
	inlined    inlined
	css        string
	broken     bool // a problem is reported: its templates do not load
}

// shared is every layout and partial of a load, the directory's replacing
// the built-in ones of the same name.
type shared struct {
	layouts    map[string]*layout
	html, text map[string]*sharedFile // the partials, by name
	// fragments caches a partial's HTML inlined for a layout.
	fragments map[[2]string]fragment
}

type fragment struct {
	inlined inlined
	ok      bool // false: it cannot be inlined, and the problem is reported
}

// loadShared reads the layouts and partials of s, replacing those of the
// same name read before.
func (l *templateLoader) loadShared(s templateSource) {
	if l.shared.layouts == nil {
		l.shared = shared{layouts: map[string]*layout{}, html: map[string]*sharedFile{}, text: map[string]*sharedFile{}, fragments: map[[2]string]fragment{}}
	}
	for _, e := range l.sharedEntries(s, layoutsDir) {
		dir := path.Join(layoutsDir, e)
		info, err := fs.Stat(s.fsys, dir)
		switch {
		case err != nil:
			l.problem(s.file(dir), 0, "%v", err)
			continue
		case !info.IsDir():
			l.problem(s.file(dir), 0, "unexpected file: %s/ holds one directory per layout, with html.tmpl and text.tmpl", layoutsDir)
			continue
		case !validTemplateName(e):
			l.problem(s.file(dir), 0, "%q is not a layout name: use lower-case letters, digits and single hyphens, such as default", e)
			continue
		}
		lay := &layout{name: e}
		for _, f := range l.sharedEntries(s, dir) {
			if f != "html.tmpl" && f != "text.tmpl" {
				l.problem(s.file(path.Join(dir, f)), 0, "unexpected file: a layout holds html.tmpl and text.tmpl")
				lay.broken = true
			}
		}
		for _, part := range []string{"html.tmpl", "text.tmpl"} {
			rel := path.Join(dir, part)
			src, err := fs.ReadFile(s.fsys, rel)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				l.problem(s.file(rel), 0, "missing: a layout has html.tmpl and text.tmpl, every HTML part having a plain-text one")
				lay.broken = true
			case err != nil:
				l.problem(s.file(rel), 0, "%v", err)
				lay.broken = true
			case part == "html.tmpl":
				lay.html = &sharedFile{s: s, rel: rel, src: string(src)}
			default:
				lay.text = &sharedFile{s: s, rel: rel, src: string(src)}
			}
		}
		l.shared.layouts[e] = lay
	}
	for _, e := range l.sharedEntries(s, partialsDir) {
		rel := path.Join(partialsDir, e)
		name, kind, ok := strings.Cut(strings.TrimSuffix(e, ".tmpl"), ".")
		switch {
		case !strings.HasSuffix(e, ".tmpl") || !ok || kind != "html" && kind != "text":
			l.problem(s.file(rel), 0, "unexpected file: %s/ holds <name>.html.tmpl for HTML parts and <name>.text.tmpl for plain-text parts and subjects", partialsDir)
			continue
		case !validTemplateName(name):
			l.problem(s.file(rel), 0, "%q is not a partial name: use lower-case letters, digits and single hyphens, such as footer", name)
			continue
		case name == contentSlot:
			l.problem(s.file(rel), 0, "a partial cannot be named %s: that is the layouts' slot for the template's own text", contentSlot)
			continue
		}
		src, err := fs.ReadFile(s.fsys, rel)
		if err != nil {
			l.problem(s.file(rel), 0, "%v", err)
			continue
		}
		f := &sharedFile{s: s, rel: rel, src: string(src)}
		if kind == "html" {
			l.shared.html[name] = f
		} else {
			l.shared.text[name] = f
		}
	}
}

// sharedEntries lists dir of s, hidden entries left out; none if there
// is no dir.
func (l *templateLoader) sharedEntries(s templateSource, dir string) []string {
	entries, err := fs.ReadDir(s.fsys, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		l.problem(s.file(dir), 0, "%v", err)
		return nil
	}
	var names []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	return names
}

// checkShared checks every layout and partial once, whether a template
// uses it or not: each parses, each layout has its content slot, and a
// layout's HTML takes its CSS inlined.
func (l *templateLoader) checkShared() {
	funcs := templateFuncs(locale.For(l.defaultLang), l.defaultLang, l.brand, l.shop)
	for _, name := range sortedKeys(l.shared.layouts) {
		lay := l.shared.layouts[name]
		if lay.broken {
			continue
		}
		ht, err := htmltemplate.New(lay.html.rel).Funcs(funcs).Parse(lay.html.src)
		if err != nil {
			l.problems.add(problemFrom(lay.html.files(), lay.html.file(), "", err))
			lay.broken = true
		} else if !callsTemplate(htmlTrees(ht), contentSlot) {
			l.problem(lay.html.file(), 0, `has no content slot: write {{template "content" .}} where each template's html.tmpl goes`)
			lay.broken = true
		}
		tt, err := texttemplate.New(lay.text.rel).Funcs(funcs).Parse(lay.text.src)
		if err != nil {
			l.problems.add(problemFrom(lay.text.files(), lay.text.file(), "", err))
			lay.broken = true
		} else if !callsTemplate(textTrees(tt), contentSlot) {
			l.problem(lay.text.file(), 0, `has no content slot: write {{template "content" .}} where each template's text.tmpl goes`)
			lay.broken = true
		}
		if lay.broken {
			continue
		}
		if lay.inlined, lay.css, err = inlineLayout(lay.html.src); err != nil {
			l.inlineProblem(lay.html.file(), err)
			lay.broken = true
		}
	}
	for _, name := range sortedKeys(l.shared.html) {
		f := l.shared.html[name]
		if _, err := htmltemplate.New(f.rel).Funcs(funcs).Parse(f.src); err != nil {
			l.problems.add(problemFrom(f.files(), f.file(), "", err))
		}
	}
	for _, name := range sortedKeys(l.shared.text) {
		f := l.shared.text[name]
		if _, err := texttemplate.New(f.rel).Funcs(funcs).Parse(f.src); err != nil {
			l.problems.add(problemFrom(f.files(), f.file(), "", err))
		}
	}
}

func (l *templateLoader) inlineProblem(file string, err error) {
	line := 0
	var ierr *inlineError
	if errors.As(err, &ierr) {
		line = ierr.line
	}
	l.problem(file, line, "%v", err)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// templateLayout is the layout meta.json names for template name, nil
// for none; ok is false when the template cannot load because of it (a
// layout that does not exist is a problem here; a broken one has its
// own).
func (l *templateLoader) templateLayout(s templateSource, name string) (lay *layout, ok bool) {
	rel := path.Join(name, metaFile)
	raw, err := fs.ReadFile(s.fsys, rel)
	if err != nil {
		return nil, true // none, or loadMeta says why
	}
	var doc struct {
		Layout *string `json:"layout"`
	}
	if json.Unmarshal(raw, &doc) != nil || doc.Layout == nil {
		return nil, true // loadMeta says why
	}
	lay, found := l.shared.layouts[*doc.Layout]
	if !found {
		have := "there is none"
		if names := sortedKeys(l.shared.layouts); len(names) > 0 {
			have = "there are " + strings.Join(names, ", ")
		}
		l.problem(s.file(rel), jsonLines(raw)["/layout"], "layout %q: no such layout (%s): add %s/%s/html.tmpl and text.tmpl to the templates directory",
			*doc.Layout, have, layoutsDir, *doc.Layout)
		return nil, false
	}
	return lay, !lay.broken
}

// sourceFile is how errors of one parsed file are told: the file
// problems name, and for a file parsed with its CSS inlined, the map back
// to its lines as written.
type sourceFile struct {
	display string
	smap    *sourceMap
}

// textSet parses a text part, subject.tmpl or text.tmpl at rel, into a
// set with the text partials and, with lay, inside lay's text.tmpl, and
// returns what is executed: the layout, or the file at rel. The layout
// is parsed first and the file last, so that the file's {{define}}s
// replace the layout's {{block}}s.
func (l *templateLoader) textSet(v *templateVariant, s templateSource, rel, src string, lay *layout, funcs map[string]any) *texttemplate.Template {
	var root *texttemplate.Template
	parse := func(name, file, src string) bool {
		var t *texttemplate.Template
		if root == nil {
			root = texttemplate.New(name).Funcs(funcs).Option("missingkey=error")
			t = root
		} else {
			t = root.New(name)
		}
		if _, err := t.Parse(src); err != nil {
			if file != "" {
				v.files[name] = sourceFile{display: file}
			}
			l.problems.add(problemFrom(v.files, file, "", err))
			return false
		}
		if file != "" {
			v.files[name] = sourceFile{display: file}
		}
		return true
	}
	ok := true
	if lay != nil {
		ok = parse(lay.text.rel, lay.text.file(), lay.text.src) && ok
	}
	for _, name := range sortedKeys(l.shared.text) {
		p := l.shared.text[name]
		ok = parse(p.rel, p.file(), p.src) && parse(name, "", call(p.rel)) && ok
	}
	ok = parse(rel, s.file(rel), src) && ok
	if lay != nil {
		ok = parse(contentSlot, "", call(rel)) && ok
	}
	if !ok {
		return nil
	}
	if !l.checkCalls(v, textTrees(root), func(n string) bool { return root.Lookup(n) != nil }, "text") {
		return nil
	}
	if lay != nil {
		return root.Lookup(lay.text.rel)
	}
	return root.Lookup(rel)
}

// htmlSet parses html.tmpl at rel into a set with the HTML partials and,
// with lay, inside lay's html.tmpl, each file with lay's CSS inlined.
func (l *templateLoader) htmlSet(v *templateVariant, s templateSource, rel, src string, lay *layout, funcs map[string]any) *htmltemplate.Template {
	var root *htmltemplate.Template
	ok := true
	parse := func(name, file string, in inlined) {
		var t *htmltemplate.Template
		if root == nil {
			root = htmltemplate.New(name).Funcs(funcs).Option("missingkey=error")
			t = root
		} else {
			t = root.New(name)
		}
		if file != "" {
			v.files[name] = sourceFile{display: file, smap: in.smap}
		}
		if _, err := t.Parse(in.src); err != nil {
			l.problems.add(problemFrom(v.files, file, "", err))
			ok = false
		}
	}
	// inline is a file's HTML as parsed: with lay's CSS, or as written.
	inline := func(file, src string) (inlined, bool) {
		if lay == nil {
			return inlined{src: src}, true
		}
		in, err := inlineFragment(src, lay.css)
		if err != nil {
			l.inlineProblem(file, err)
			return inlined{}, false
		}
		return in, true
	}
	if lay != nil {
		parse(lay.html.rel, lay.html.file(), lay.inlined)
	}
	for _, name := range sortedKeys(l.shared.html) {
		p := l.shared.html[name]
		key := [2]string{"", name}
		if lay != nil {
			key[0] = lay.name
		}
		fr, cached := l.shared.fragments[key]
		if !cached {
			fr.inlined, fr.ok = inline(p.file(), p.src)
			l.shared.fragments[key] = fr
		}
		if !fr.ok {
			ok = false
			continue
		}
		parse(p.rel, p.file(), fr.inlined)
		parse(name, "", inlined{src: call(p.rel)})
	}
	in, good := inline(s.file(rel), src)
	if !good {
		return nil
	}
	parse(rel, s.file(rel), in)
	if lay != nil {
		parse(contentSlot, "", inlined{src: call(rel)})
	}
	if !ok {
		return nil
	}
	if !l.checkCalls(v, htmlTrees(root), func(n string) bool { return root.Lookup(n) != nil }, "html") {
		return nil
	}
	// What is executed: the layout, or the template's own file.
	if lay != nil {
		return root.Lookup(lay.html.rel)
	}
	return root.Lookup(rel)
}

// call is a template that calls the one named name with the same data:
// how a partial's and a content's names point at their files.
func call(name string) string {
	return "{{template " + strconv.Quote(name) + " .}}"
}

func htmlTrees(t *htmltemplate.Template) []*parse.Tree {
	var trees []*parse.Tree
	for _, t := range t.Templates() {
		if t.Tree != nil {
			trees = append(trees, t.Tree)
		}
	}
	return trees
}

func textTrees(t *texttemplate.Template) []*parse.Tree {
	var trees []*parse.Tree
	for _, t := range t.Templates() {
		if t.Tree != nil {
			trees = append(trees, t.Tree)
		}
	}
	return trees
}

// templateCalls lists every {{template}} (and {{block}}) of trees.
func templateCalls(trees []*parse.Tree) []*parse.TemplateNode {
	var calls []*parse.TemplateNode
	var walk func(n parse.Node)
	walk = func(n parse.Node) {
		switch n := n.(type) {
		case *parse.ListNode:
			if n != nil {
				for _, c := range n.Nodes {
					walk(c)
				}
			}
		case *parse.IfNode:
			walk(n.List)
			walk(n.ElseList)
		case *parse.RangeNode:
			walk(n.List)
			walk(n.ElseList)
		case *parse.WithNode:
			walk(n.List)
			walk(n.ElseList)
		case *parse.TemplateNode:
			calls = append(calls, n)
		}
	}
	for _, t := range trees {
		if t.Root != nil {
			walk(t.Root)
		}
	}
	return calls
}

func callsTemplate(trees []*parse.Tree, name string) bool {
	return slices.ContainsFunc(templateCalls(trees), func(n *parse.TemplateNode) bool { return n.Name == name })
}

// checkCalls reports every {{template "name"}} of a set that names no
// template, partial or slot of it, at its file and line; kind is html or
// text, the partials the set has.
func (l *templateLoader) checkCalls(v *templateVariant, trees []*parse.Tree, defined func(string) bool, kind string) bool {
	ok := true
	for _, t := range trees {
		for _, n := range templateCalls([]*parse.Tree{t}) {
			if defined(n.Name) {
				continue
			}
			loc, _ := t.ErrorContext(n)
			err := fmt.Errorf("template: %s: no partial %q: add %s/%s.%s.tmpl to the templates directory", loc, n.Name, partialsDir, n.Name, kind)
			l.problems.add(problemFrom(v.files, "", "", err))
			ok = false
		}
	}
	return ok
}

// errLocation is where a text/template or html/template error says it
// happened: "template: NAME:LINE:COL: …", "html/template:NAME:LINE:COL: …",
// or without the column, or the line.
var errLocation = regexp.MustCompile(`^(?:html/)?template: ?([^:\s]+)(?::(\d+))?(?::(\d+))?: `)

// problemFrom turns a template error into a problem at the file and line
// it names (files by template name), or at fallback.
func problemFrom(files map[string]sourceFile, fallback, prefix string, err error) Problem {
	msg := err.Error()
	m := errLocation.FindStringSubmatchIndex(msg)
	if m == nil {
		return Problem{File: fallback, Message: prefix + msg}
	}
	name := msg[m[2]:m[3]]
	f, known := files[name]
	if !known {
		return Problem{File: fallback, Message: prefix + msg}
	}
	line, col := 0, -1
	if m[4] >= 0 {
		line, _ = strconv.Atoi(msg[m[4]:m[5]])
	}
	if m[6] >= 0 {
		col, _ = strconv.Atoi(msg[m[6]:m[7]])
	}
	if f.smap != nil && line > 0 {
		line = f.smap.line(line, col)
	}
	rest := executing.ReplaceAllString(strings.TrimSpace(msg[m[1]:]), "at ")
	return Problem{File: f.display, Line: line, Message: prefix + rest}
}

var executing = regexp.MustCompile(`^executing "[^"]*" at `)

// located is a render error whose location is that of the file as
// written, for a file parsed with its CSS inlined.
type located struct {
	msg string
	err error
}

func (e *located) Error() string { return e.msg }
func (e *located) Unwrap() error { return e.err }

// locate is err with its line that of the file as written.
func (v *templateVariant) locate(err error) error {
	msg := err.Error()
	m := errLocation.FindStringSubmatchIndex(msg)
	if m == nil || m[4] < 0 {
		return err
	}
	f := v.files[msg[m[2]:m[3]]]
	if f.smap == nil {
		return err
	}
	line, _ := strconv.Atoi(msg[m[4]:m[5]])
	col := -1
	end := m[5]
	if m[6] >= 0 {
		col, _ = strconv.Atoi(msg[m[6]:m[7]])
		end = m[7]
	}
	var b bytes.Buffer
	b.WriteString(msg[:m[4]])
	b.WriteString(strconv.Itoa(f.smap.line(line, col)))
	b.WriteString(msg[end:])
	return &located{msg: b.String(), err: err}
}
