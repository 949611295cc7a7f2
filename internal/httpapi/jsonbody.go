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
)

// The API's JSON bodies are read one way everywhere: JSON media type, at
// most maxBodyBytes, valid UTF-8, one object, every key once, no unknown
// field. A proxy or WAF that looks at the first of two equal keys and a
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
	invalid := func(pointer, detail string) *problem {
		return &problem{Type: typeInvalidBody, Status: http.StatusBadRequest, Title: "The body is not valid",
			Detail: detail, Errors: []fieldError{{Pointer: pointer, Detail: detail}}}
	}
	if !utf8.Valid(raw) {
		return invalid(prefix, "is not valid UTF-8")
	}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) > 0 && trimmed[0] != '{' && json.Valid(trimmed) {
		return invalid(prefix, "must be a JSON object, not "+jsonValueKind(trimmed[0]))
	}
	if pointer, first, ok := repeatedKey(raw, prefix); ok {
		detail := "appears more than once; send each field once"
		if first != "" {
			detail = fmt.Sprintf("repeats %q in another case (keys are matched regardless of case); send each field once", first)
		}
		return invalid(pointer, detail)
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
		return invalid(prefix, "the body is empty; send a JSON object")
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF):
		return invalid(prefix, "malformed JSON: "+err.Error())
	case errors.As(err, &typeErr):
		pointer := prefix
		if typeErr.Field != "" {
			pointer += "/" + strings.ReplaceAll(typeErr.Field, ".", "/")
		}
		return invalid(pointer, fmt.Sprintf("must be a JSON %s, not %s", jsonKind(typeErr.Type.Kind().String()), typeErr.Value))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return invalid(prefix+"/"+name, "is not a known field")
	default:
		return invalid(prefix, err.Error())
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

// repeatedKey finds the first object key that appears twice in the same
// object of raw, as written or in another case (foldKey), and returns
// its JSON pointer as written the second time, and the key as first
// written when that differs ("" for an exact repeat). Malformed JSON is
// left to the decoder to report.
func repeatedKey(raw []byte, prefix string) (pointer, first string, repeated bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	type frame struct {
		object bool
		keys   map[string]string // folded key -> the key as first written
		path   string
		index  int    // next array index
		key    string // the key whose value comes next, in an object
		expect bool   // in an object: the next token is a key
	}
	var stack []*frame
	child := func() string { // the pointer of the value about to be read
		if len(stack) == 0 {
			return prefix
		}
		f := stack[len(stack)-1]
		if f.object {
			return f.path + "/" + escapePointer(f.key)
		}
		p := f.path + "/" + strconv.Itoa(f.index)
		f.index++
		return p
	}
	// done marks the value just read as complete: the object it was in
	// expects a key next. It reports whether the outermost value ended.
	done := func() bool {
		if len(stack) == 0 {
			return true
		}
		if f := stack[len(stack)-1]; f.object {
			f.expect = true
		}
		return false
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", "", false
		}
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].expect {
			f := stack[n-1]
			if tok == json.Delim('}') {
				stack = stack[:n-1]
				if done() {
					return "", "", false
				}
				continue
			}
			k, _ := tok.(string)
			folded := foldKey(k)
			if prior, ok := f.keys[folded]; ok {
				if prior == k {
					prior = ""
				}
				return f.path + "/" + escapePointer(k), prior, true
			}
			f.keys[folded], f.key, f.expect = k, k, false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, keys: map[string]string{}, path: child(), expect: true})
		case json.Delim('['):
			stack = append(stack, &frame{path: child()})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			if done() {
				return "", "", false
			}
		default:
			child()
			if done() {
				return "", "", false
			}
		}
	}
}

// foldKey is k in the form encoding/json compares field names in:
// foldKey(a) == foldKey(b) exactly when bytes.EqualFold(a, b). ASCII
// letters become upper case, and every other rune the smallest of its
// Unicode simple folding orbit (U+212A KELVIN SIGN and "k" are "K").
func foldKey(k string) string {
	var b strings.Builder
	b.Grow(len(k))
	for _, r := range k {
		switch {
		case r < utf8.RuneSelf:
			b.WriteRune(unicode.ToUpper(r))
		default:
			b.WriteRune(foldRune(r))
		}
	}
	return b.String()
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
