package notify

import (
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/message"

	"github.com/sekali-dev/sekali/internal/textrule"
)

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
