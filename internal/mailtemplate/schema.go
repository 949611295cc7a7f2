package mailtemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/sekali-dev/sekali/internal/textrule"
)

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

// A template's data reaches an e-mail, so its strings are held to the
// checkout's rule for text (textrule.OneLine): no control characters or
// line breaks, no bidirectional controls, something visible. A schema
// says otherwise for one of its strings with the keyword x-sekali-text:
//
//	"x-sekali-text": "line"    one line of visible text (the default)
//	"x-sekali-text": "lines"   visible text that may run over lines (an address)
//	"x-sekali-text": "any"     no rule beyond the schema's own (a token, a code)
//
// The rule applies to every string a schema object validates, whatever
// its other keywords; the schema's own maxLength bounds the length.
const textKeyword = "x-sekali-text"

// textVocabulary adds x-sekali-text to the schemas of templates.
func textVocabulary() *jsonschema.Vocabulary {
	meta := jsonschema.NewCompiler()
	const url = "urn:sekali:schema:text-vocabulary"
	if err := meta.AddResource(url, map[string]any{
		"properties": map[string]any{textKeyword: map[string]any{"enum": []any{"line", "lines", "any"}}},
	}); err != nil {
		panic(err) // a constant: it always adds
	}
	return &jsonschema.Vocabulary{
		URL:    url,
		Schema: meta.MustCompile(url),
		Compile: func(_ *jsonschema.CompilerContext, obj map[string]any) (jsonschema.SchemaExt, error) {
			mode, _ := obj[textKeyword].(string)
			if mode == "" {
				mode = "line"
			}
			return textRule(mode), nil
		},
	}
}

// textRule is the x-sekali-text of one schema object.
type textRule string

func (m textRule) Validate(ctx *jsonschema.ValidatorContext, v any) {
	s, ok := v.(string)
	if !ok || s == "" || m == "any" {
		return // emptiness and length are the schema's own business
	}
	if d := textrule.Problem(s, len(s), m == "line"); d != "" {
		ctx.AddError(textError(d))
	}
}

// textError is a string that breaks its x-sekali-text rule.
type textError string

func (e textError) KeywordPath() []string { return []string{textKeyword} }

func (e textError) LocalizedString(*message.Printer) string { return string(e) }
