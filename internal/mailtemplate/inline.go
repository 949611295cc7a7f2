package mailtemplate

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/PuerkitoBio/goquery"
	"github.com/vanng822/go-premailer/premailer"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// CSS is inlined when the templates load, once: a layout's <style> is
// applied to the style attributes of the layout's own HTML, of the
// partials and of the html.tmpl of every template that names the layout
// (many mail clients drop a <style>, or some of it). What cannot be
// inlined (@media rules: dark mode, narrow screens; :hover) stays in the
// layout's <style>, marked !important so that it beats the inline styles.
//
// The inliner (go-premailer) parses HTML, not templates. So each action
// ({{...}}) is first replaced by a placeholder the HTML parser keeps
// where it is: a comment between elements, where text would be moved
// (text inside a <table> but outside a cell is put before the table), a
// word inside a tag, an attribute value or an element whose content is
// text (<title>, <style>). After inlining, the actions are put back, and
// a file whose actions did not all come back, once each and in order
// (markup the parser had to rearrange), is refused, saying so.
//
// The inlined file is what html/template parses; its sourceMap takes a
// line of it back to the line of the file as written, for problems and
// render errors.

// inlined is one HTML file with the CSS inlined.
type inlined struct {
	src  string
	smap *sourceMap
}

// sourceMap maps positions in an inlined file to the file as written:
// the actions are the text the two share exactly.
type sourceMap struct {
	orig, out string
	spans     []span // in order
}

// span is one action: where it is in out, and where it was in orig.
type span struct {
	outStart, outEnd, origStart int
}

// line is the line of the file as written for line and col (col -1 when
// unknown) of the inlined file. A position inside an action maps exactly;
// elsewhere, to the line of the action before it.
func (m *sourceMap) line(line, col int) int {
	off := 0
	for i := 1; i < line; i++ {
		next := strings.IndexByte(m.out[off:], '\n')
		if next < 0 {
			break
		}
		off += next + 1
	}
	if col >= 0 {
		off += col
	}
	i := sort.Search(len(m.spans), func(i int) bool { return m.spans[i].outStart > off }) - 1
	if i < 0 {
		return line
	}
	sp := m.spans[i]
	if off < sp.outEnd {
		return lineAt([]byte(m.orig), int64(sp.origStart+off-sp.outStart))
	}
	return lineAt([]byte(m.orig), int64(sp.origStart))
}

// action is one {{...}} of a template source.
type action struct {
	start, end int  // in the source
	word       bool // the placeholder is a word, not a comment
}

// rawTextElements hold text, not elements: an action in one is a word.
var rawTextElements = map[string]bool{"title": true, "textarea": true, "style": true, "script": true, "xmp": true, "noscript": true}

// findActions lists the actions of src in order, with where each is: in
// a tag, in a comment or raw text (a word), or between elements.
func findActions(src string) ([]action, error) {
	var actions []action
	inTag, quote, raw, inComment := false, byte(0), "", false
	tagName := func(i int) string { // the name of the tag that starts at src[i] == '<'
		j := i + 1
		if j < len(src) && src[j] == '/' {
			j++
		}
		k := j
		for k < len(src) && (src[k] >= 'a' && src[k] <= 'z' || src[k] >= 'A' && src[k] <= 'Z' || src[k] >= '0' && src[k] <= '9') {
			k++
		}
		return strings.ToLower(src[j:k])
	}
	for i := 0; i < len(src); {
		if strings.HasPrefix(src[i:], "{{") {
			end, err := actionEnd(src, i)
			if err != nil {
				return nil, err
			}
			actions = append(actions, action{start: i, end: end, word: inTag || raw != "" || inComment})
			i = end
			continue
		}
		c := src[i]
		switch {
		case inComment:
			if strings.HasPrefix(src[i:], "-->") {
				inComment = false
				i += 3
				continue
			}
		case inTag && quote != 0:
			if c == quote {
				quote = 0
			}
		case inTag:
			switch c {
			case '"', '\'':
				quote = c
			case '>':
				inTag = false
			}
		case raw != "":
			if c == '<' && strings.HasPrefix(strings.ToLower(src[i:]), "</"+raw) {
				raw = ""
				inTag = true
			}
		case strings.HasPrefix(src[i:], "<!--"):
			inComment = true
			i += 4
			continue
		case c == '<' && i+1 < len(src) && (src[i+1] == '/' || src[i+1] == '!' || src[i+1] >= 'a' && src[i+1] <= 'z' || src[i+1] >= 'A' && src[i+1] <= 'Z'):
			inTag = true
			if name := tagName(i); src[i+1] != '/' && rawTextElements[name] {
				raw = name
			}
		}
		i++
	}
	return actions, nil
}

// actionEnd is the offset just past the action that starts at src[i]:
// its "}}", past strings and comments that may hold one.
func actionEnd(src string, i int) (int, error) {
	for j := i + 2; j < len(src); j++ {
		switch {
		case strings.HasPrefix(src[j:], "}}"):
			return j + 2, nil
		case strings.HasPrefix(src[j:], "/*"):
			k := strings.Index(src[j+2:], "*/")
			if k < 0 {
				return 0, fmt.Errorf("line %d: unclosed comment", lineAt([]byte(src), int64(i)))
			}
			j += 2 + k + 1
		case src[j] == '"' || src[j] == '\'' || src[j] == '`':
			q := src[j]
			for j++; j < len(src) && src[j] != q; j++ {
				if src[j] == '\\' && q != '`' {
					j++
				}
			}
		}
	}
	return 0, fmt.Errorf("line %d: unclosed action", lineAt([]byte(src), int64(i)))
}

// The placeholders: sekali-action-N-x, or <!--sekali-action-N--> where a
// comment keeps its place and a word would not. Serialized, a word in a
// tag's attribute list comes back as an attribute: sekali-action-N-x="".
var placeholder = regexp.MustCompile(`sekali-action-(\d+)-x(?:="")?|<!--sekali-action-(\d+)-->`)

func placeholderFor(i int, word bool) string {
	if word {
		return "sekali-action-" + strconv.Itoa(i) + "-x"
	}
	return "<!--sekali-action-" + strconv.Itoa(i) + "-->"
}

// protect replaces the actions of src by placeholders.
func protect(src string, actions []action) string {
	var b strings.Builder
	last := 0
	for i, a := range actions {
		b.WriteString(src[last:a.start])
		b.WriteString(placeholderFor(i, a.word))
		last = a.end
	}
	b.WriteString(src[last:])
	return b.String()
}

// errRearranged: the HTML parser moved, dropped or copied an action.
var errRearranged = errors.New("the HTML parser had to rearrange this file's markup, moving its actions ({{...}}) out of place: close every element in the same file, and in the same branch of an {{if}} or {{range}}, that opens it")

// restore puts the actions of orig back into out, the inlined file with
// placeholders, and maps the one to the other.
func restore(orig, out string, actions []action) (inlined, error) {
	var b strings.Builder
	m := &sourceMap{orig: orig}
	last, next := 0, 0
	for _, loc := range placeholder.FindAllStringSubmatchIndex(out, -1) {
		numStart, numEnd := loc[2], loc[3]
		if numStart < 0 {
			numStart, numEnd = loc[4], loc[5]
		}
		n, _ := strconv.Atoi(out[numStart:numEnd])
		if n != next {
			return inlined{}, errRearranged
		}
		a := actions[n]
		b.WriteString(out[last:loc[0]])
		m.spans = append(m.spans, span{outStart: b.Len(), outEnd: b.Len() + a.end - a.start, origStart: a.start})
		b.WriteString(orig[a.start:a.end])
		last = loc[1]
		next++
	}
	if next != len(actions) {
		return inlined{}, errRearranged
	}
	b.WriteString(out[last:])
	m.out = b.String()
	return inlined{src: m.out, smap: m}, nil
}

// inlineOptions: no presentational attributes from CSS (width="600" on a
// table is obsolete HTML; a layout writes the few that mail clients need
// itself), and the classes stay, for the @media rules.
func inlineOptions() *premailer.Options {
	return premailer.NewOptions(premailer.WithCssToAttributes(false))
}

// inlineLayout inlines the CSS of a layout's HTML, a whole document, and
// returns it with its stylesheet: the text of its <style> elements.
func inlineLayout(src string) (inlined, string, error) {
	actions, err := findActions(src)
	if err != nil {
		return inlined{}, "", err
	}
	doc, err := html.Parse(strings.NewReader(protect(src, actions)))
	if err != nil {
		return inlined{}, "", err
	}
	// The stylesheet, and a mark where its first <style> was: the rules
	// that stay go back there, so that the lines after it move as little
	// as they can.
	var css strings.Builder
	var mark *html.Node
	for n := range doc.Descendants() {
		if n.Type != html.ElementNode || n.DataAtom != atom.Style {
			continue
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			css.WriteString(c.Data)
		}
		if mark == nil {
			mark = &html.Node{Type: html.CommentNode, Data: "sekali-style"}
			n.Parent.InsertBefore(mark, n)
		}
	}
	if _, err := premailer.NewPremailer(goquery.NewDocumentFromNode(doc), inlineOptions()).Transform(); err != nil {
		return inlined{}, "", err
	}
	if mark != nil {
		// The leftover rules, in the <style> the inliner appended to <head>.
		var left *html.Node
		for n := range doc.Descendants() {
			if n.Type == html.ElementNode && n.Data == "style" { // the inliner's has no DataAtom
				left = n
			}
		}
		if left != nil {
			left.Parent.RemoveChild(left)
			left.Attr = slicesDeleteAttr(left.Attr, "type") // text/css is the default
			mark.Parent.InsertBefore(left, mark)
		}
		mark.Parent.RemoveChild(mark)
	}
	var out bytes.Buffer
	if err := html.Render(&out, doc); err != nil {
		return inlined{}, "", err
	}
	if err := sameTags(src, actions, out.String()); err != nil {
		return inlined{}, "", err
	}
	in, err := restore(src, out.String(), actions)
	return in, css.String(), err
}

func slicesDeleteAttr(attrs []html.Attribute, key string) []html.Attribute {
	out := attrs[:0]
	for _, a := range attrs {
		if a.Key != key {
			out = append(out, a)
		}
	}
	return out
}

// errStyleInFragment: a partial or a template with a layout has no
// <style> of its own; its rules would apply to it alone, and the @media
// ones would be lost.
var errStyleInFragment = errors.New("has a <style>: with a layout, CSS belongs in the layout's <style>, which is inlined into this file too")

// errWholeDocument: a template with a layout wrote a whole document.
var errWholeDocument = errors.New("is a whole document, but with a layout html.tmpl is the content only: what goes inside the layout's <body>, without <html>, <head> or <body>")

// inlineFragment inlines css into src, a partial or the html.tmpl of a
// template with a layout: HTML that goes inside the layout's <body>.
func inlineFragment(src, css string) (inlined, error) {
	actions, err := findActions(src)
	if err != nil {
		return inlined{}, err
	}
	// Parsed as the content of a <template> element, where any element
	// may stand: table rows and cells too.
	context := &html.Node{Type: html.ElementNode, Data: "template", DataAtom: atom.Template}
	nodes, err := html.ParseFragment(strings.NewReader(protect(src, actions)), context)
	if err != nil {
		return inlined{}, err
	}
	doc, err := html.Parse(strings.NewReader("<!DOCTYPE html><html><head><style></style></head><body></body></html>"))
	if err != nil {
		return inlined{}, err
	}
	var body *html.Node
	for n := range doc.Descendants() {
		switch n.DataAtom {
		case atom.Style:
			n.AppendChild(&html.Node{Type: html.TextNode, Data: css})
		case atom.Body:
			body = n
		}
	}
	for _, t := range tags(src) {
		if !t.end && (t.name == "html" || t.name == "head" || t.name == "body") {
			return inlined{}, &inlineError{line: lineAt([]byte(src), int64(t.pos)), msg: errWholeDocument.Error()}
		}
	}
	for _, n := range nodes {
		for d := range n.Descendants() {
			if d.Type == html.ElementNode && d.DataAtom == atom.Style {
				return inlined{}, errStyleInFragment
			}
		}
		if n.Type == html.ElementNode && n.DataAtom == atom.Style {
			return inlined{}, errStyleInFragment
		}
		body.AppendChild(n)
	}
	if _, err := premailer.NewPremailer(goquery.NewDocumentFromNode(doc), inlineOptions()).Transform(); err != nil {
		return inlined{}, err
	}
	var out bytes.Buffer
	for n := body.FirstChild; n != nil; n = n.NextSibling {
		if err := html.Render(&out, n); err != nil {
			return inlined{}, err
		}
	}
	if err := sameTags(src, actions, out.String()); err != nil {
		return inlined{}, err
	}
	return restore(src, out.String(), actions)
}

// tagToken is a start or end tag, as sameTags compares them.
type tagToken struct {
	end  bool
	name string
	pos  int // offset in the text tokenized
}

// tags lists the start and end tags of src but <style>'s, which the
// inliner moves or removes.
func tags(src string) []tagToken {
	var out []tagToken
	z := html.NewTokenizer(strings.NewReader(src))
	pos := 0
	for {
		tt := z.Next()
		raw := len(z.Raw())
		switch tt {
		case html.ErrorToken:
			return out
		case html.StartTagToken, html.SelfClosingTagToken, html.EndTagToken:
			name, _ := z.TagName()
			if string(name) != "style" {
				out = append(out, tagToken{end: tt == html.EndTagToken, name: string(name), pos: pos})
			}
		}
		pos += raw
	}
}

// sameTags refuses a file whose markup the HTML parser changed: an
// element it opened or closed that the file does not (a <tbody> in a
// table written without one, a <p> closed by a <div>), which would move
// markup across the actions of a {{range}} or an {{if}}. orig is the file
// as written, protected with the placeholders, out the parser's.
func sameTags(orig string, actions []action, out string) error {
	protected := protect(orig, actions)
	want, got := tags(protected), tags(out)
	for i := 0; i < len(want) || i < len(got); i++ {
		if i < len(want) && i < len(got) && want[i].end == got[i].end && want[i].name == got[i].name {
			continue
		}
		at := len(protected)
		if i < len(want) {
			at = want[i].pos
		}
		line := lineAt([]byte(orig), int64(origOffset(actions, at)))
		var what string
		switch {
		case i >= len(got):
			what = fmt.Sprintf("%s is dropped", want[i])
		case i >= len(want) || got[i].end != want[i].end || got[i].name != want[i].name:
			what = fmt.Sprintf("the HTML parser reads %s here", got[i])
			if i < len(want) {
				what += fmt.Sprintf(" where the file has %s", want[i])
			}
		}
		return &inlineError{line: line, msg: "cannot inline the layout's CSS: " + what + ": write every element's start and end tags (a table's <tbody> too), closed in the order they open, so that the markup is what a mail client's parser makes of it"}
	}
	return nil
}

// origOffset is the offset in the file as written of off in the file
// protected with placeholders.
func origOffset(actions []action, off int) int {
	shift := 0 // how much longer the file is than the protected text, up to here
	for i, a := range actions {
		p := len(placeholderFor(i, a.word))
		if a.start-shift+p > off {
			break
		}
		shift += a.end - a.start - p
	}
	return off + shift
}

func (t tagToken) String() string {
	if t.end {
		return "</" + t.name + ">"
	}
	return "<" + t.name + ">"
}

// inlineError is a problem of a file's HTML that inlining found, at a
// line of the file as written.
type inlineError struct {
	line int
	msg  string
}

func (e *inlineError) Error() string { return e.msg }
