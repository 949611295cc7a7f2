package mailtemplate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"testing/fstest"

	"golang.org/x/text/language"
)

// Version is one version of a template: everything it renders from —
// its own files, the layout it names, the partials and the brand — and
// their digest, which names the version. The worker records the digest
// with each hand-over and keeps the versions it loaded, so that what a
// delivery's e-mail looked like can be rendered again after the
// template has changed (LoadVersion).
type Version struct {
	Template string
	// Digest is 32 hex digits of a SHA-256 over the template's name and
	// every file it was loaded from, by path: the same files give the
	// same digest in every process and build, any change another.
	Digest string
	Files  []File // by path
}

// File is one file of a template version, its path relative to the
// template's directory ("schema.json", "id/html.tmpl"), or, for what it
// shares with other templates, to the templates directory
// ("_layouts/default/html.tmpl", "_partials/pay-button.html.tmpl"), or
// the brand it was loaded with (brandFile).
type File struct {
	Path    string
	Content []byte
}

// brandFile is the version's brand, as JSON: a layout renders it, so a
// change of BRAND_NAME is a new version.
const brandFile = "_brand.json"

// versionFiles is what the template being loaded renders from, by path
// in its source: the files it read, those of lay (nil: none), every
// partial (a template may call any), and the brand.
func (l *templateLoader) versionFiles(lay *layout) map[string][]byte {
	files := maps.Clone(l.files)
	if lay != nil {
		files[lay.html.rel], files[lay.text.rel] = []byte(lay.html.src), []byte(lay.text.src)
	}
	for _, set := range []map[string]*sharedFile{l.shared.html, l.shared.text} {
		for _, f := range set {
			files[f.rel] = []byte(f.src)
		}
	}
	if !l.brand.isZero() {
		files[brandFile], _ = json.Marshal(l.brand) // strings, and a map of them: its keys sorted
	}
	return files
}

// sharedPath reports whether a version's file path is one it shares with
// other templates (a layout's, a partial's, the brand), which lives at
// the top of the templates directory, not in the template's.
func sharedPath(p string) bool {
	return p == brandFile || strings.HasPrefix(p, layoutsDir+"/") || strings.HasPrefix(p, partialsDir+"/")
}

// newVersion is the version of template name loaded from files, keyed by
// their path in its source ("name/id/html.tmpl").
func newVersion(name string, files map[string][]byte) Version {
	v := Version{Template: name}
	h := sha256.New()
	fmt.Fprintf(h, "sekali template %q\n", name)
	for _, p := range slices.Sorted(maps.Keys(files)) {
		rel := strings.TrimPrefix(p, name+"/")
		// Each file's path and length first: no two sets of files hash
		// the same bytes.
		fmt.Fprintf(h, "%q %d\n", rel, len(files[p]))
		h.Write(files[p])
		v.Files = append(v.Files, File{Path: rel, Content: files[p]})
	}
	v.Digest = hex.EncodeToString(h.Sum(nil))[:32]
	return v
}

// Version returns the digest of the version of template name in t, ""
// for an unknown template.
func (t *Templates) Version(name string) string {
	t = t.current()
	et, ok := t.byName[name]
	if !ok {
		return ""
	}
	return et.version.Digest
}

// Versions returns the version of every template in t, in name order.
func (t *Templates) Versions() []Version {
	t = t.current()
	out := make([]Version, 0, len(t.byName))
	for _, name := range t.Names() {
		out = append(out, t.byName[name].version)
	}
	return out
}

// LoadVersion loads a template version again, from its files, with the
// checks of Load, as a registry of that template alone whose default
// language is lang (a BCP 47 tag): the language the version rendered a
// delivery in, which it must have. The template functions are today's: a version
// renders as it did as long as they do. A version whose files do not
// give its digest is refused.
func LoadVersion(v Version, lang string) (*Templates, error) {
	// An in-memory tree of the version's files, for the loader; fstest's
	// MapFS is the standard library's (it imports no testing).
	fsys := fstest.MapFS{}
	var brand Brand
	for _, f := range v.Files {
		switch {
		case !fs.ValidPath(f.Path):
			return nil, fmt.Errorf("mailtemplate: version %s of %s: %q is not a file of a template", v.Digest, v.Template, f.Path)
		case f.Path == brandFile:
			if err := json.Unmarshal(f.Content, &brand); err != nil {
				return nil, fmt.Errorf("mailtemplate: version %s of %s: its brand: %w", v.Digest, v.Template, err)
			}
		case sharedPath(f.Path):
			fsys[f.Path] = &fstest.MapFile{Data: f.Content, Mode: 0o444}
		default:
			fsys[path.Join(v.Template, f.Path)] = &fstest.MapFile{Data: f.Content, Mode: 0o444}
		}
	}
	tag, err := language.Parse(lang)
	if err != nil {
		return nil, fmt.Errorf("mailtemplate: version %s of %s: language %q: %w", v.Digest, v.Template, lang, err)
	}
	l, err := newLoader(tag, brand)
	if err != nil {
		return nil, fmt.Errorf("mailtemplate: version %s of %s: its brand: %w", v.Digest, v.Template, err)
	}
	src := templateSource{fsys: fsys, root: "template " + v.Template + " version " + v.Digest}
	l.loadShared(src)
	l.checkShared()
	l.loadSource(src)
	if len(l.problems.list) > 0 {
		return nil, &LoadError{Problems: l.problems.list}
	}
	et, ok := l.byName[v.Template]
	if !ok || et.version.Digest != v.Digest {
		return nil, fmt.Errorf("mailtemplate: version %s of %s: its files do not make that version", v.Digest, v.Template)
	}
	return &Templates{byName: l.byName}, nil
}
