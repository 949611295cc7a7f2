package order

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/notify"
)

// dataOf is the Go type of the data this package builds for each built-in
// template: what its schema.json (internal/mailtemplate/builtin/<name>/)
// describes by hand. A new built-in template the code sends gets a line
// here; one only the generic trigger sends, whose data comes from the
// shop, would be named in triggerOnly instead.
var dataOf = map[string]reflect.Type{
	TemplateConfirmation: reflect.TypeFor[confirmationData](),
	TemplateShipped:      reflect.TypeFor[shippedData](),
}

var triggerOnly = []string{}

// Every built-in template whose data the code builds is covered by
// dataOf, and dataOf names only built-in templates.
func TestEveryBuiltinTemplateHasItsData(t *testing.T) {
	t.Parallel()
	names := builtin(t).Names()
	for _, name := range names {
		if _, ok := dataOf[name]; !ok && !slices.Contains(triggerOnly, name) {
			t.Errorf("built-in template %s: add the Go type of its data to dataOf (or, if only the generic trigger sends it, to triggerOnly)", name)
		}
	}
	for name := range dataOf {
		if !slices.Contains(names, name) {
			t.Errorf("dataOf names %s, which is no built-in template", name)
		}
	}
}

// The data Place and Ship record for the built-in templates, read back
// as the worker reads it, satisfies the template's schema.json and
// renders in the order's language, for orders as varied as the checkout
// accepts: several lines, free ones, non-ASCII text, every bound reached.
// A field the schema requires that the code does not write, a json tag
// renamed, a type or a format that differs, a bound of the schema
// tighter than the checkout's: each would hold these deliveries at run
// time; here it fails.
func TestBuiltinTemplateDataSatisfiesItsSchema(t *testing.T) {
	t.Parallel()
	e := setup(t)
	atTheBounds := Checkout{
		CustomerEmail: "bounds@example.com", CustomerName: strings.Repeat("é", maxNameRunes), Currency: "KWD", Locale: "zh-hant-tw",
		Reference: strings.Repeat("号", MaxReferenceRunes),
		Items: append([]CheckoutItem{{SKU: "A", Name: "Satu", Quantity: 1, UnitPrice: price(MaxAmount)}},
			items(MaxItems-1, CheckoutItem{SKU: strings.Repeat("号", maxSKURunes), Name: strings.Repeat("名", maxNameRunes), Quantity: MaxQuantity, UnitPrice: price(0)})...),
	}
	for _, tt := range []struct {
		name     string
		checkout Checkout
		shipment Shipment
	}{
		{"several lines, one free, in Indonesian", Checkout{
			Reference: "INV/20261207/MPL/0042", CustomerEmail: "siti@example.co.id", CustomerName: "Siti Nurhaliza binti Ahmad", Currency: "IDR", Locale: "id-ID",
			Items: []CheckoutItem{
				{SKU: "KOPI-TRJ-200", Name: "Kopi Toraja – 200 g", Quantity: 2, UnitPrice: price(8500000)},
				{SKU: "CANGKIR-雪", Name: "Cangkir keramik «雪» & tatakan", Quantity: 1, UnitPrice: price(12500050)},
				{SKU: "SAMPEL", Name: "Sampel teh (gratis) ☕", Quantity: 3, UnitPrice: price(0)},
			},
		}, Shipment{Carrier: "J&T Express", TrackingNumber: "JT-0042 7781"}},
		{"in English, euros", Checkout{
			CustomerEmail: "sarah@example.ie", CustomerName: "Sarah O'Connor-Müller", Currency: "EUR", Locale: "en-GB",
			Items: []CheckoutItem{{SKU: "BK-Ω-1", Name: "Notizbuch „Tinte“ A5", Quantity: 4, UnitPrice: price(1299)}},
		}, Shipment{Carrier: "DHL", TrackingNumber: "00340434161094042557"}},
		{"every bound reached", atTheBounds, Shipment{Carrier: strings.Repeat("運", 100), TrackingNumber: strings.Repeat("9", 100)}},
		{"the least there is: a free order, no language", Checkout{
			CustomerEmail: "a@example.jp", CustomerName: "A", Currency: "JPY",
			Items: []CheckoutItem{{SKU: "S", Name: "N", Quantity: 1, UnitPrice: price(0)}},
		}, Shipment{Carrier: "X", TrackingNumber: "1"}},
	} {
		caller := keyed()
		p := e.place(t, tt.checkout, caller)
		if _, created, err := e.svc.Ship(t.Context(), p.ID, tt.shipment, caller); err != nil || !created {
			t.Fatalf("%s: ship: created %v, %v", tt.name, created, err)
		}
		ds, err := notify.ListByOrder(t.Context(), e.db.Pool, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		var seen []string
		for _, d := range ds {
			seen = append(seen, d.Template)
			if err := e.templates.Validate(d.Template, d.Data); err != nil {
				t.Errorf("%s: %s's data %s\n%v", tt.name, d.Template, clip(d.Data), err)
				continue
			}
			if _, err := e.templates.RenderLocale(d.Template, d.Data, d.Locale); err != nil {
				t.Errorf("%s: %s does not render its data: %v", tt.name, d.Template, err)
			}
		}
		if want := []string{TemplateConfirmation, TemplateShipped}; !slices.Equal(seen, want) {
			t.Errorf("%s: the order's deliveries are %v, want %v", tt.name, seen, want)
		}
	}
}

// Each built-in template's Go data and its schema.json name the same
// fields, all the way down, with the same JSON types and formats, and
// the code writes every field the schema requires: a field added to one
// and not the other is caught even when it is optional (the built-in
// schemas do not forbid other properties), and so is a field the code
// may leave out (omitempty) that the schema requires.
func TestBuiltinTemplateDataTypesMatchTheirSchemas(t *testing.T) {
	t.Parallel()
	for name, typ := range dataOf {
		file := filepath.Join("..", "mailtemplate", "builtin", name, "schema.json")
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var schema map[string]any
		if err := json.Unmarshal(raw, &schema); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		(&schemaWalk{t: t, file: file, root: schema}).check("", typ, schema)
	}
}

// schemaWalk compares a Go type with the schema of the JSON that
// encoding/json writes of it.
type schemaWalk struct {
	t    *testing.T
	file string
	root map[string]any
}

var (
	timeType = reflect.TypeFor[time.Time]()
	uuidType = reflect.TypeFor[uuid.UUID]()
)

func (w *schemaWalk) errorf(at, format string, args ...any) {
	w.t.Helper()
	if at == "" {
		at = "the top level"
	}
	w.t.Errorf("%s at %s: "+format, append([]any{w.file, at}, args...)...)
}

func (w *schemaWalk) check(at string, typ reflect.Type, schema map[string]any) {
	w.t.Helper()
	schema = w.resolve(at, schema)
	if schema == nil {
		return
	}
	// What encoding/json writes of typ: its JSON type and format.
	var jsonType, format string
	switch k := typ.Kind(); {
	case typ == timeType:
		jsonType, format = "string", "date-time"
	case typ == uuidType:
		jsonType, format = "string", "uuid"
	case k == reflect.String:
		jsonType = "string"
	case k >= reflect.Int && k <= reflect.Uint64:
		jsonType = "integer"
	case k == reflect.Float32 || k == reflect.Float64:
		jsonType = "number"
	case k == reflect.Bool:
		jsonType = "boolean"
	case k == reflect.Slice && typ.Elem().Kind() != reflect.Uint8:
		jsonType = "array"
	case k == reflect.Struct:
		jsonType = "object"
	default:
		w.errorf(at, "a Go %s: teach this test what JSON encoding/json writes of it", typ)
		return
	}
	types := schemaTypes(schema["type"])
	if !slices.Contains(types, jsonType) && !(jsonType == "integer" && slices.Contains(types, "number")) {
		w.errorf(at, "the Go data is a %s (%s), the schema says %v", jsonType, typ, types)
		return
	}
	if f, _ := schema["format"].(string); f != format {
		w.errorf(at, "the Go data (%s) is written in format %q, the schema asks %q", typ, format, f)
	}
	switch jsonType {
	case "array":
		items, ok := schema["items"].(map[string]any)
		if !ok {
			w.errorf(at, "the schema says nothing of the array's items")
			return
		}
		w.check(at+"/0", typ.Elem(), items)
	case "object":
		w.checkObject(at, typ, schema)
	}
}

func (w *schemaWalk) checkObject(at string, typ reflect.Type, schema map[string]any) {
	w.t.Helper()
	props, _ := schema["properties"].(map[string]any)
	fields := jsonFields(typ)
	for _, f := range fields {
		p, ok := props[f.name].(map[string]any)
		if !ok {
			w.errorf(at+"/"+f.name, "%s writes it (field %s), the schema has no such property", typ, f.goName)
			continue
		}
		w.check(at+"/"+f.name, f.typ, p)
	}
	for name := range props {
		if !slices.ContainsFunc(fields, func(f jsonField) bool { return f.name == name }) {
			w.errorf(at+"/"+name, "the schema has it, %s does not write it", typ)
		}
	}
	required, _ := schema["required"].([]any)
	for _, r := range required {
		name, _ := r.(string)
		i := slices.IndexFunc(fields, func(f jsonField) bool { return f.name == name })
		switch {
		case i < 0:
			w.errorf(at+"/"+name, "the schema requires it, %s does not write it", typ)
		case fields[i].optional:
			w.errorf(at+"/"+name, "the schema requires it, %s may leave it out (field %s is omitempty or omitzero)", typ, fields[i].goName)
		}
	}
}

// resolve follows a schema's local $ref ("#/$defs/amount").
func (w *schemaWalk) resolve(at string, schema map[string]any) map[string]any {
	w.t.Helper()
	for range 10 {
		ref, ok := schema["$ref"].(string)
		if !ok {
			return schema
		}
		ptr, ok := strings.CutPrefix(ref, "#/")
		if !ok {
			w.errorf(at, "$ref %q: only a reference inside the schema is followed", ref)
			return nil
		}
		var node any = w.root
		for _, tok := range strings.Split(ptr, "/") {
			m, _ := node.(map[string]any)
			node = m[strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)]
		}
		if schema, ok = node.(map[string]any); !ok {
			w.errorf(at, "$ref %q refers to nothing", ref)
			return nil
		}
	}
	w.errorf(at, "$ref followed ten times: a loop?")
	return nil
}

// schemaTypes is a schema's "type": one name or a list of them.
func schemaTypes(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, s := range v {
			if s, ok := s.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// jsonField is one field of a struct as encoding/json writes it.
type jsonField struct {
	name, goName string
	typ          reflect.Type
	optional     bool // omitempty or omitzero: may be left out
}

// jsonFields lists the fields encoding/json writes of struct type typ,
// those of embedded structs without a tag included.
func jsonFields(typ reflect.Type) []jsonField {
	var out []jsonField
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		optional := slices.ContainsFunc(strings.Split(opts, ","), func(o string) bool { return o == "omitempty" || o == "omitzero" })
		out = append(out, jsonField{name: name, goName: f.Name, typ: f.Type, optional: optional})
	}
	return out
}

// clip keeps a failure message readable: the data of an order of a
// hundred long lines is 60 kB.
func clip(data []byte) string {
	if r := []rune(string(data)); len(r) > 600 {
		return string(r[:600]) + "…"
	}
	return string(data)
}
