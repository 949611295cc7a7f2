package mailtemplate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"golang.org/x/text/language"
)

// Rendered is a template's output for one delivery.
type Rendered struct {
	Subject string
	Text    string
	HTML    string
	// Language is the BCP 47 tag of the variant rendered ("id", "en"):
	// the best match for the locale asked for, or the default language.
	Language string
	// FromName is the template's sender name in that language (meta.json),
	// "" for MAIL_FROM's; ReplyTo its Reply-To, "" for none; Category
	// CategoryTransactional or CategorySubscription.
	FromName, ReplyTo, Category string
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
	t = t.current()
	et, ok := t.byName[name]
	if !ok {
		return Rendered{}, fmt.Errorf("%w: %q", ErrUnknown, name)
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
		return Rendered{}, fmt.Errorf("render %s %s (%s): %w", name, part, v.lang, v.locate(err))
	}
	r.FromName, r.ReplyTo, r.Category = et.meta.fromName(v.lang), et.meta.replyTo, et.meta.category
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
