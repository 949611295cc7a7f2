package httpapi

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/sekali-dev/sekali/internal/textrule"
)

// A body built to make the parser work costs memory in proportion to its
// size, not to its square: 65,000 "[" once took the API to 4 GB. Each
// shape here is under the 64 KiB limit; none may cost more than 4 MB to
// refuse or accept. Not parallel: it reads the process's allocation
// counter.
func TestHostileBodiesCostLittleMemory(t *testing.T) {
	deep := func(opening, closing string, n int) []byte {
		return []byte(strings.Repeat(opening, n) + "1" + strings.Repeat(closing, n))
	}
	// The widest body at the deepest level allowed: 32 levels (the last one
	// objects in an array), as many as fit.
	wide := []byte(strings.Repeat(`{"a":`, maxJSONDepth-2) + "[" +
		strings.TrimSuffix(strings.Repeat(`{"k":1},`, 7000), ",") + "]" + strings.Repeat("}", maxJSONDepth-2))
	// Many distinct keys in one object, the repeat at the very end.
	var keys strings.Builder
	keys.WriteString("{")
	for i := range 5000 {
		keys.WriteString(`"k` + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + `":1,`)
	}
	keys.WriteString(`"ka":2}`)
	for _, tt := range []struct {
		name   string
		body   []byte
		detail string // what the 400 says, "" to decode it
	}{
		{"65,000 [", []byte(strings.Repeat("[", 65_000)), "nests arrays and objects more than 32 levels deep"},
		{"65,000 [ inside an object", []byte(`{"items":` + strings.Repeat("[", 64_000)), "nests arrays and objects more than 32 levels deep"},
		{"10,000 nested objects", deep(`{"a":`, "}", 10_000), "nests arrays and objects more than 32 levels deep"},
		{"33 levels", deep("[", "]", 33), "nests arrays and objects more than 32 levels deep"},
		{"brackets inside strings do not nest", []byte(`{"a":"` + strings.Repeat("[", 60_000) + `"}`), ""},
		{"32 levels, 7,000 objects wide", wide, ""},
		{"5,000 keys, one repeated", []byte(keys.String()), "appears more than once"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if len(tt.body) > maxBodyBytes {
				t.Fatalf("the body is %d bytes, over the %d the API reads", len(tt.body), maxBodyBytes)
			}
			var p *problem
			allocated := allocatedBy(func() { p = decodeStrict(tt.body, new(map[string]any), "") })
			t.Logf("%d bytes: %d bytes allocated", len(tt.body), allocated) // docs/security.md quotes these
			if allocated > 4<<20 {
				t.Errorf("parsing %d bytes allocated %.1f MB; want at most 4 MB", len(tt.body), float64(allocated)/(1<<20))
			}
			switch {
			case tt.detail == "" && p != nil:
				t.Errorf("refused: %+v", *p)
			case tt.detail != "" && (p == nil || p.Status != 400 || !strings.Contains(p.Errors[0].Detail, tt.detail)):
				t.Errorf("got %+v; want a 400 saying %q", p, tt.detail)
			}
		})
	}
}

// allocatedBy is how many bytes f allocates on the heap, as the
// runtime's counter sees it (other goroutines' allocations included, so
// run it where few run).
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// nestsDeeper counts exactly what encoding/json counts: it agrees with a
// walk of the decoder's tokens on every valid value. The fuzzer
// (FuzzJSONBody) looks for a value where they part.
func TestNestsDeeperAgreesWithTheDecoder(t *testing.T) {
	for _, v := range []string{`1`, `[]`, `[[]]`, `{"a":[{"b":{}}]}`, `"[[["`, `["\"[", {}]`, `[{"\\":[]}]`} {
		d := tokenDepth(t, []byte(v))
		for limit := range 5 {
			if got := nestsDeeper([]byte(v), limit); got != (d > limit) {
				t.Errorf("nestsDeeper(%s, %d) = %v; the value is %d deep", v, limit, got, d)
			}
		}
	}
}

// tokenDepth is the deepest nesting of the JSON value raw, by the
// decoder's own tokens: an oracle for nestsDeeper that shares none of its
// code.
func tokenDepth(t testing.TB, raw []byte) int {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	depth, deepest := 0, 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return deepest
		}
		switch tok {
		case json.Delim('['), json.Delim('{'):
			depth++
			deepest = max(deepest, depth)
		case json.Delim(']'), json.Delim('}'):
			depth--
		}
	}
}

// Any body the strict decoder is given, it answers without panicking,
// refuses with a 400 what nests deeper than maxJSONDepth and never
// decodes a value with a key repeated in one object, nor a key or string
// that PostgreSQL's text refuses (NUL). make test runs this briefly;
// make fuzz runs it longer.
func FuzzJSONBody(f *testing.F) {
	for _, seed := range []string{
		`{"a":1}`, `{"a":{"b":[1,2,{"c":"d"}]}}`, `{"a":1,"A":2}`, `[`, `{"a":"[[["}`,
		strings.Repeat("[", 40), `{"a":` + strings.Repeat("[", 31) + strings.Repeat("]", 31) + `}`,
		`{"a":[{"b":1,"b":2}]}`, `{"\u017f":1,"S":2}`,
		`{"a":"\u0000"}`, `{"a\u0000":1}`, `{"a":["b",{"c":"\ud800\u0000"}]}`, `{"a":"\ud800"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var v map[string]any
		p := decodeStrict(body, &v, "")
		if p != nil {
			if p.Status != 400 || len(p.Errors) != 1 || p.Errors[0].Detail == "" {
				t.Fatalf("problem %+v for %q", p, body)
			}
			return
		}
		if d := tokenDepth(t, body); d > maxJSONDepth {
			t.Fatalf("decoded %q, %d levels deep", body, d)
		}
		if a, b, ok := foldedRepeat(body); ok {
			t.Fatalf("decoded %q with keys %q and %q in one object", body, a, b)
		}
		if s, ok := unstorableString(v); ok {
			t.Fatalf("decoded %q with %q", body, s)
		}
	})
}

// unstorableString finds a key or string in v, as encoding/json decodes
// into any, that is not textrule.Storable: an oracle for firstFault's.
func unstorableString(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, !textrule.Storable(v)
	case []any:
		for _, e := range v {
			if s, ok := unstorableString(e); ok {
				return s, true
			}
		}
	case map[string]any:
		for k, e := range v {
			if !textrule.Storable(k) {
				return k, true
			}
			if s, ok := unstorableString(e); ok {
				return s, true
			}
		}
	}
	return "", false
}
