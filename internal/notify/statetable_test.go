package notify_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sekali-dev/sekali/internal/notify"
)

// The state table lives once, as notify.Transitions; docs/architecture.md
// shows it between two markers, and this test fails, printing the table
// as it must read there, when the two differ. Every status is in the
// table, every status the table names exists, and every function it
// names is one of this package's.
func TestTheDocsShowTheStateTable(t *testing.T) {
	t.Parallel()
	seen := map[notify.Status]bool{}
	for _, tr := range notify.Transitions {
		for _, s := range append(slices.Clone(tr.From), tr.To) {
			if !slices.Contains(notify.Statuses, s) {
				t.Errorf("the table names status %q, which notify.Statuses does not list", s)
			}
			seen[s] = true
		}
	}
	for _, s := range notify.Statuses {
		if !seen[s] {
			t.Errorf("status %q is in no transition", s)
		}
	}

	funcs := packageFuncs(t)
	for _, tr := range notify.Transitions {
		for _, f := range tr.Funcs {
			if !funcs[f] {
				t.Errorf("the table names %s (%s → %s), which is no function of package notify", f, tr.From, tr.To)
			}
		}
	}

	const begin, end = "<!-- state table: notify.Transitions; TestTheDocsShowTheStateTable checks it -->\n", "<!-- end of the state table -->\n"
	raw, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	want := stateTable()
	if i < 0 || j < i {
		t.Fatalf("docs/architecture.md has no state table between %q and %q; put this there:\n%s", begin, end, want)
	}
	if got := doc[i+len(begin) : j]; got != want {
		t.Errorf("docs/architecture.md's state table is not notify.Transitions; it must read:\n%s", want)
	}
}

// stateTable is notify.Transitions as docs/architecture.md shows it.
func stateTable() string {
	var b strings.Builder
	names := make([]string, len(notify.Statuses))
	for i, s := range notify.Statuses {
		names[i] = "`" + string(s) + "`"
	}
	b.WriteString("\n" + strings.ToUpper(number(len(names))[:1]) + number(len(names))[1:] + " statuses: " + strings.Join(names, ", ") + ".\n\n")
	b.WriteString("| from | to | who | when | written by |\n| --- | --- | --- | --- | --- |\n")
	for _, tr := range notify.Transitions {
		from := "—"
		if len(tr.From) > 0 {
			fs := make([]string, len(tr.From))
			for i, s := range tr.From {
				fs[i] = "`" + string(s) + "`"
			}
			from = strings.Join(fs, ", ")
		}
		b.WriteString("| " + from + " | `" + string(tr.To) + "` | " + tr.Who + " | " + tr.When + " | `" + strings.Join(tr.Funcs, "`, `") + "` |\n")
	}
	b.WriteString("\n")
	return b.String()
}

func number(n int) string {
	if words := []string{"no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"}; n < len(words) {
		return words[n]
	}
	return "many"
}

// packageFuncs names the functions and methods (Type.Method) declared in
// package notify's own files.
func packageFuncs(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		parsed, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range parsed.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			name := fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				typ := fd.Recv.List[0].Type
				if star, ok := typ.(*ast.StarExpr); ok {
					typ = star.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					name = id.Name + "." + name
				}
			}
			out[name] = true
		}
	}
	return out
}
