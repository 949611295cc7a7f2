package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sekali-dev/sekali/internal/textrule"
)

// The API's JSON bodies are read one way everywhere: JSON media type, at
// most maxBodyBytes, valid UTF-8, one object, every key once, no unknown
// field, no NUL (\u0000) in any key or string, which PostgreSQL's text
// and jsonb refuse: refused here, no handler's statement meets one. A proxy or WAF that looks at the first of two equal keys and a
// decoder that keeps the last would disagree about what was sent; so
// would one that replaces invalid UTF-8 and one that refuses it. "Equal"
// is encoding/json's idea of it: it matches a key to a struct field
// regardless of case (Unicode simple folding, so "\u017fku" is "sku"),
// so keys that differ only in case are one key repeated.

// readJSONBody reads a request body that must be JSON and at most
// maxBodyBytes long.
func readJSONBody(w http.ResponseWriter, r *http.Request) ([]byte, *problem) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return nil, &problem{Type: typeUnsupportedType, Status: http.StatusUnsupportedMediaType,
			Detail: "Send the body as JSON with Content-Type: application/json."}
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, &problem{Type: typeBodyTooLarge, Status: http.StatusRequestEntityTooLarge,
				Detail: fmt.Sprintf("The body must be at most %d bytes.", maxBodyBytes)}
		}
		return nil, &problem{Type: typeInvalidBody, Status: http.StatusBadRequest, Detail: "The body could not be read."}
	}
	return raw, nil
}

// decodeJSON reads the request's JSON body (readJSONBody) and decodes it
// strictly into dst (decodeStrict); when it cannot, it answers with the
// problem and returns false.
func decodeJSON(w http.ResponseWriter, r *http.Request, dst any) bool {
	raw, p := readJSONBody(w, r)
	if p == nil {
		p = decodeStrict(raw, dst, "")
	}
	if p != nil {
		writeProblem(w, r, *p)
		return false
	}
	return true
}

// decodeStrict decodes exactly one JSON object into dst, refusing
// invalid UTF-8, anything but an object, repeated keys, unknown fields
// and trailing data. prefix is the JSON pointer of the value.
func decodeStrict(raw []byte, dst any, prefix string) *problem {
	if !utf8.Valid(raw) {
		return invalidBody(prefix, "is not valid UTF-8")
	}
	if nestsDeeper(raw, maxJSONDepth) {
		return invalidBody(prefix, fmt.Sprintf("nests arrays and objects more than %d levels deep", maxJSONDepth))
	}
	if p := notAnObject(raw, prefix); p != nil {
		return p
	}
	if pointer, detail, ok := firstFault(raw, prefix); ok {
		return invalidBody(pointer, detail)
	}
	return decodeChecked(raw, dst, prefix)
}

// invalidBody is the 400 problem of a body, or of the value at pointer
// within it, that is not what was asked for.
func invalidBody(pointer, detail string) *problem {
	return &problem{Type: typeInvalidBody, Status: http.StatusBadRequest, Title: "The body is not valid",
		Detail: detail, Errors: []fieldError{{Pointer: pointer, Detail: detail}}}
}

// notAnObject refuses a valid JSON value at pointer that is not an
// object (null included: encoding/json would decode it into a struct as
// if it were empty). Malformed JSON is left to the decoder to report.
func notAnObject(raw []byte, pointer string) *problem {
	if trimmed := bytes.TrimSpace(raw); len(trimmed) > 0 && trimmed[0] != '{' && json.Valid(trimmed) {
		return invalidBody(pointer, "must be a JSON object, not "+jsonValueKind(trimmed[0]))
	}
	return nil
}

// decodeChecked is decodeStrict's decoding, for a part of a body that
// decodeStrict has checked whole (an item of a checkout): a value that is
// not an object, unknown fields, wrong types and trailing data are still
// refused, the checks of the whole are not run again.
func decodeChecked(raw []byte, dst any, prefix string) *problem {
	if p := notAnObject(raw, prefix); p != nil {
		return p
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
	if err == nil {
		if _, tokErr := dec.Token(); tokErr != io.EOF {
			err = errors.New("unexpected data after the JSON value")
		}
	}
	if err == nil {
		return nil
	}
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return invalidBody(prefix, "the body is empty; send a JSON object")
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF):
		return invalidBody(prefix, "malformed JSON: "+err.Error())
	case errors.As(err, &typeErr):
		pointer := prefix
		if typeErr.Field != "" {
			pointer += "/" + strings.ReplaceAll(typeErr.Field, ".", "/")
		}
		return invalidBody(pointer, fmt.Sprintf("must be a JSON %s, not %s", jsonKind(typeErr.Type.Kind().String()), typeErr.Value))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return invalidBody(prefix+"/"+name, "is not a known field")
	default:
		return invalidBody(prefix, err.Error())
	}
}

// jsonKind names a Go kind the way a JSON client thinks of it.
func jsonKind(goKind string) string {
	switch goKind {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "integer within range"
	case "float32", "float64":
		return "number"
	case "string":
		return "string"
	case "slice", "array":
		return "array"
	case "struct", "map":
		return "object"
	default:
		return goKind
	}
}

// jsonValueKind names the JSON value that starts with b.
func jsonValueKind(b byte) string {
	switch b {
	case 'n':
		return "null"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	default:
		return "a number"
	}
}

// maxJSONDepth bounds how deeply a body's arrays and objects nest. No
// body the API takes needs more than a few levels (a checkout's items, a
// template's data); 32 leaves room for any template's data and refuses
// the bodies that exist only to make a parser work.
const maxJSONDepth = 32

// nestsDeeper reports whether raw opens more than limit arrays and
// objects inside one another. It reads raw once, byte by byte, and
// allocates nothing, so it runs before anything that keeps per-level
// state. Malformed JSON is left to the decoder to report.
func nestsDeeper(raw []byte, limit int) bool {
	depth, inString, escaped := 0, false, false
	for _, c := range raw {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			if depth++; depth > limit {
				return true
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return false
}

// firstFault finds the first object key that appears twice in the same
// object of raw, as written or in another case (appendFolded), or the
// first key or string that holds NUL, and returns its JSON pointer (a
// repeat's as written the second time) and what is wrong there. raw must
// nest no deeper than maxJSONDepth (decodeStrict checks that first: the
// scanner keeps a set of keys per level); malformed JSON is left to the
// decoder to report. Past the validity check it reads raw once, keeps
// one set of keys per open level (reused by the next object at that
// level) and spells a pointer out only for the fault it reports: its
// work is linear in len(raw).
func firstFault(raw []byte, prefix string) (pointer, detail string, found bool) {
	if !json.Valid(raw) {
		return "", "", false
	}
	k := keyScanner{raw: raw}
	path, detail, found := k.value(0)
	if !found {
		return "", "", false
	}
	return prefix + path, detail, true
}

// keyScanner walks a valid JSON value for firstFault.
type keyScanner struct {
	raw    []byte
	i      int
	levels [maxJSONDepth]map[string]string // per depth: folded key -> the key as first written
	folded []byte                          // scratch for appendFolded
}

// nulDetail is what firstFault says of a key or string that is not
// textrule.Storable: the body is valid UTF-8, so it holds NUL.
const nulDetail = "must not contain NUL (\\u0000)"

// value reads the value at k.i, at depth open arrays and objects; on a
// fault it returns the pointer below this value and what is wrong.
func (k *keyScanner) value(depth int) (path, detail string, found bool) {
	k.space()
	switch k.raw[k.i] {
	case '{':
		return k.object(depth)
	case '[':
		k.i++
		for index := 0; ; index++ {
			if k.space(); k.raw[k.i] == ']' {
				k.i++
				return "", "", false
			}
			if path, detail, found := k.value(depth + 1); found {
				return "/" + strconv.Itoa(index) + path, detail, true
			}
			if k.space(); k.raw[k.i] == ',' {
				k.i++
			}
		}
	case '"':
		if !textrule.Storable(k.str()) {
			return "", nulDetail, true
		}
	default: // a number, true, false or null
		for k.i < len(k.raw) && !strings.ContainsRune(",]} \t\r\n", rune(k.raw[k.i])) {
			k.i++
		}
	}
	return "", "", false
}

// object reads the object at k.i (see value).
func (k *keyScanner) object(depth int) (path, detail string, found bool) {
	k.i++
	seen := k.levels[depth]
	if seen == nil {
		seen = map[string]string{}
		k.levels[depth] = seen
	}
	clear(seen)
	for {
		if k.space(); k.raw[k.i] == '}' {
			k.i++
			return "", "", false
		}
		key := k.str()
		if !textrule.Storable(key) {
			return "/" + escapePointer(key), "is a key that " + nulDetail, true
		}
		k.folded = appendFolded(k.folded[:0], key)
		if prior, ok := seen[string(k.folded)]; ok {
			detail := "appears more than once; send each field once"
			if prior != key {
				detail = fmt.Sprintf("repeats %q in another case (keys are matched regardless of case); send each field once", prior)
			}
			return "/" + escapePointer(key), detail, true
		}
		seen[string(k.folded)] = key
		k.space()
		k.i++ // the colon
		if path, detail, found := k.value(depth + 1); found {
			// The objects inside this one use the maps of deeper
			// levels: seen is still this object's.
			return "/" + escapePointer(key) + path, detail, true
		}
		if k.space(); k.raw[k.i] == ',' {
			k.i++
		}
	}
}

// str reads the string at k.i and returns it decoded.
func (k *keyScanner) str() string {
	start, escaped := k.i, false
	k.i++
	for ; k.raw[k.i] != '"'; k.i++ {
		if k.raw[k.i] == '\\' {
			escaped = true
			k.i++
		}
	}
	k.i++
	if !escaped {
		return string(k.raw[start+1 : k.i-1])
	}
	var s string
	_ = json.Unmarshal(k.raw[start:k.i], &s) // valid JSON: it decodes
	return s
}

// space skips white space.
func (k *keyScanner) space() {
	for k.i < len(k.raw) && (k.raw[k.i] == ' ' || k.raw[k.i] == '\t' || k.raw[k.i] == '\r' || k.raw[k.i] == '\n') {
		k.i++
	}
}

// appendFolded appends k to b in the form encoding/json compares field
// names in: two keys fold to the same bytes exactly when
// bytes.EqualFold(a, b). ASCII letters become upper case, and every other
// rune the smallest of its Unicode simple folding orbit (U+212A KELVIN
// SIGN and "k" are "K").
func appendFolded(b []byte, k string) []byte {
	for _, r := range k {
		switch {
		case r < utf8.RuneSelf:
			b = append(b, byte(unicode.ToUpper(r)))
		default:
			b = utf8.AppendRune(b, foldRune(r))
		}
	}
	return b
}

// foldRune is the smallest rune of r's simple folding orbit.
func foldRune(r rune) rune {
	for {
		next := unicode.SimpleFold(r)
		if next <= r {
			return next
		}
		r = next
	}
}

// escapePointer escapes a key for a JSON pointer (RFC 6901).
func escapePointer(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}
