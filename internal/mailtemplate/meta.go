package mailtemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"path"
	"slices"
	"strings"

	"golang.org/x/text/language"

	"github.com/sekali-dev/sekali/internal/mail"
)

// The kinds of mail a template is (meta.json's category). Inboxes treat
// them apart: a subscription's mail carries one-click unsubscribe; a
// transactional one (a receipt, a confirmation) is exempt and never stops
// because of a subscription's unsubscribe.
const (
	CategoryTransactional = "transactional"
	CategorySubscription  = "subscription"
)

// meta is a template's sender identity and kind, from meta.json.
type meta struct {
	names    map[string]string // the From name by language tag; "" for every language
	replyTo  string
	category string
}

// fromName is the template's From name in lang: its own, the one for
// every language, or "" (MAIL_FROM's).
func (m meta) fromName(lang language.Tag) string {
	if n, ok := m.names[lang.String()]; ok {
		return n
	}
	return m.names[""]
}

// metaJSON is meta.json: from_name is one name, or one per language.
type metaJSON struct {
	FromName json.RawMessage `json:"from_name"`
	ReplyTo  string          `json:"reply_to"`
	Category string          `json:"category"`
	Layout   string          `json:"layout"` // read by templateLayout
}

// loadMeta reads name/meta.json, if there is one, and checks it: every
// problem is the template's.
func (l *templateLoader) loadMeta(s templateSource, name string, variants []*templateVariant) meta {
	m := meta{category: CategoryTransactional}
	rel := path.Join(name, metaFile)
	raw, err := l.readFile(s, rel)
	if errors.Is(err, fs.ErrNotExist) {
		return m
	}
	if err != nil {
		l.problem(s.file(rel), 0, "%v", err)
		return m
	}
	var doc metaJSON
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		l.problem(s.file(rel), 0, "want {\"from_name\": \"Toko Ana\" or {\"id\": …, \"en\": …}, \"reply_to\": an address, \"category\": \"transactional\" or \"subscription\", \"layout\": a layout's name}: %v", err)
		return m
	}
	if doc.Category != "" {
		if doc.Category != CategoryTransactional && doc.Category != CategorySubscription {
			l.problem(s.file(rel), 0, "category %q: want transactional or subscription", doc.Category)
		}
		m.category = doc.Category
	}
	if doc.ReplyTo != "" {
		addr, err := mail.NormalizeAddress(doc.ReplyTo)
		if err != nil {
			l.problem(s.file(rel), 0, "reply_to: %v", err)
		}
		m.replyTo = addr
	}
	m.names = l.fromNames(s.file(rel), doc.FromName, variants)
	return m
}

// fromNames reads from_name: one name for every language, or an object
// of one per language the template has.
func (l *templateLoader) fromNames(file string, raw json.RawMessage, variants []*templateVariant) map[string]string {
	if len(raw) == 0 {
		return nil
	}
	names := map[string]string{}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		names[""] = one
	} else if err := json.Unmarshal(raw, &names); err != nil {
		l.problem(file, 0, "from_name: want a name, or an object of one name per language")
		return nil
	}
	langs := make([]string, len(variants))
	for i, v := range variants {
		langs[i] = v.lang.String()
	}
	for lang, n := range names {
		if lang != "" && !slices.Contains(langs, lang) {
			l.problem(file, 0, "from_name: %q is not a language of this template (%s)", lang, strings.Join(langs, ", "))
		}
		if strings.TrimSpace(n) == "" {
			l.problem(file, 0, "from_name: the %s name is empty", lang)
		} else if err := mail.CheckSenderName(n); err != nil {
			l.problem(file, 0, "from_name: %v", err)
		}
	}
	return names
}
