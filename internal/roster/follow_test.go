package roster_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"

	"github.com/sekali-dev/sekali/api"
	"github.com/sekali-dev/sekali/internal/roster"
)

// What follows the roster: a provider is its package and a line in All,
// and these tests say what else that line asks for, by name, rather than
// leaving it to a review. Each check is a function of the lists it
// compares, so that a test can also hand it a wrong list.

const module = "github.com/sekali-dev/sekali"

// listed are the import paths of the packages whose Descriptor All
// lists, read from this package's source: All's elements must be
// <package>.Descriptor.
func listed(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "roster.go", nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string]string{} // name in the file → path
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		name := path.Base(p)
		if im.Name != nil {
			name = im.Name.Name
		}
		imports[name] = p
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "All" || len(vs.Values) != 1 {
			return true
		}
		lit, ok := vs.Values[0].(*ast.CompositeLit)
		if !ok {
			t.Fatalf("All is not a composite literal")
		}
		for _, e := range lit.Elts {
			sel, _ := e.(*ast.SelectorExpr)
			var pkg *ast.Ident
			if sel != nil {
				pkg, _ = sel.X.(*ast.Ident)
			}
			if pkg == nil || sel.Sel.Name != "Descriptor" || imports[pkg.Name] == "" {
				t.Fatalf("%s: All lists %T, want <package>.Descriptor", fset.Position(e.Pos()), e)
			}
			out = append(out, imports[pkg.Name])
		}
		return false
	})
	if len(out) != len(roster.All) {
		t.Fatalf("read %d packages in All, it has %d descriptors", len(out), len(roster.All))
	}
	return out
}

// This package imports, of ours, the contract, envconfig and the
// packages it lists: nothing above it. (depguard cannot say "the
// provider packages": it matches import paths by prefix, and they share
// none.)
func TestImportsOnlyWhatItLists(t *testing.T) {
	t.Parallel()
	allowed := append([]string{module + "/internal/mail", module + "/internal/envconfig"}, listed(t)...)
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if strings.HasPrefix(p, module+"/") && !slices.Contains(allowed, p) {
				t.Errorf("%s imports %s, whose Descriptor All does not list: the roster imports mail, envconfig and its providers", e.Name(), p)
			}
		}
	}
}

// golangci is what these tests read of .golangci.yml.
type golangci struct {
	Linters struct {
		Settings struct {
			Depguard struct {
				Rules map[string]depguardRule `yaml:"rules"`
			} `yaml:"depguard"`
		} `yaml:"settings"`
	} `yaml:"linters"`
}

type depguardRule struct {
	ListMode string      `yaml:"list-mode"`
	Files    []string    `yaml:"files"`
	Allow    []string    `yaml:"allow"`
	Deny     []denyEntry `yaml:"deny"`
}

type denyEntry struct {
	Pkg string `yaml:"pkg"`
}

// allows reports whether r, a lax rule, lets a file import pkg, as
// depguard decides: refused by a matching deny entry unless a longer
// allow entry matches too; an entry is a prefix, or exact with a
// trailing $.
func (r depguardRule) allows(pkg string) bool {
	match := func(entry string) bool {
		if exact, ok := strings.CutSuffix(entry, "$"); ok {
			return pkg == exact
		}
		return strings.HasPrefix(pkg, entry)
	}
	longest := func(entries []string) int {
		n := -1
		for _, e := range entries {
			if match(e) {
				n = max(n, len(e))
			}
		}
		return n
	}
	var deny []string
	for _, d := range r.Deny {
		deny = append(deny, d.Pkg)
	}
	d := longest(deny)
	return d < 0 || longest(r.Allow) > d
}

// ruleFor is the rule of the non-test files of dir (internal/resend),
// and its name.
func (g golangci) ruleFor(dir string) (string, depguardRule, bool) {
	glob := "**/" + dir + "/*.go"
	for name, r := range g.Linters.Settings.Depguard.Rules {
		if slices.Contains(r.Files, glob) && slices.Contains(r.Files, "!$test") {
			return name, r, true
		}
	}
	return "", depguardRule{}, false
}

// stores are what no provider, and not the roster, may touch.
var stores = []string{"github.com/jackc/pgx/v5", "github.com/hibiken/asynq", "github.com/redis/go-redis/v9"}

// depguardProblems says what .golangci.yml (g) lacks for the roster
// listing providers (import paths): its own rule must let it import
// each, and each must have a rule of its own that keeps the domain and
// the stores out, as every provider's does.
func depguardProblems(g golangci, providers []string) []string {
	var problems []string
	name, own, ok := g.ruleFor("internal/roster")
	if !ok {
		problems = append(problems, `no depguard rule for internal/roster: add one whose files are "**/internal/roster/*.go" and "!$test"`)
	}
	for _, s := range stores {
		if ok && own.allows(s) {
			problems = append(problems, fmt.Sprintf("depguard rule %s lets internal/roster import %s: deny it", name, s))
		}
	}
	for _, p := range providers {
		if ok && !own.allows(p) {
			problems = append(problems, fmt.Sprintf("depguard rule %s refuses internal/roster's import of %s, which All lists: allow it", name, p))
		}
		dir := strings.TrimPrefix(p, module+"/")
		pname, r, found := g.ruleFor(dir)
		if !found {
			problems = append(problems, fmt.Sprintf("no depguard rule for %s, which All lists; add one as the other providers have:\n%s", dir, providerRule(dir)))
			continue
		}
		for _, bad := range append([]string{module + "/internal/notify", module + "/internal/dbsqlc"}, stores...) {
			if r.ListMode != "lax" || r.allows(bad) {
				problems = append(problems, fmt.Sprintf("depguard rule %s (lax) lets %s import %s: a provider imports the contract, not the domain; deny %s and the stores, as in:\n%s",
					pname, dir, bad, module+"/internal", providerRule(dir)))
				break
			}
		}
	}
	return problems
}

// providerRule is the depguard rule of a provider at dir, as the others
// read: what of ours it may import, and what it must not touch.
func providerRule(dir string) string {
	name := path.Base(dir)
	var b strings.Builder
	fmt.Fprintf(&b, "        %s:\n          list-mode: lax\n          files:\n            - \"**/%s/*.go\"\n            - \"!$test\"\n          allow:\n", name, dir)
	for _, p := range []string{"mail", "envconfig", "httpprovider"} {
		fmt.Fprintf(&b, "            - \"%s/internal/%s$\"\n", module, p)
	}
	fmt.Fprintf(&b, "          deny:\n            - pkg: \"%s/internal\"\n              desc: \"%s may import only mail, envconfig, httpprovider of ours (docs/architecture.md): a provider imports the contract, not the domain\"\n", module, name)
	for _, s := range []string{"github.com/jackc/pgx", "github.com/hibiken/asynq", "github.com/redis/go-redis"} {
		fmt.Fprintf(&b, "            - pkg: \"%s\"\n              desc: \"not in %s: a provider imports the contract, not the domain\"\n", s, name)
	}
	return b.String()
}

func readGolangci(t *testing.T) golangci {
	t.Helper()
	b, err := os.ReadFile("../../.golangci.yml")
	if err != nil {
		t.Fatal(err)
	}
	var g golangci
	if err := yaml.Unmarshal(b, &g); err != nil {
		t.Fatalf(".golangci.yml: %v", err)
	}
	return g
}

// depguard holds the roster to its imports and every provider it lists
// to the contract, whatever All lists.
func TestDepguardFollowsTheRoster(t *testing.T) {
	t.Parallel()
	for _, p := range depguardProblems(readGolangci(t), listed(t)) {
		t.Errorf(".golangci.yml: %s", p)
	}
}

// The check names what a new provider's package asks of .golangci.yml.
// (These tests hand the checks lists that are wrong on purpose, and look
// for what they must say among whatever else they say.)
func TestDepguardCheckNamesWhatToAdd(t *testing.T) {
	t.Parallel()
	g := readGolangci(t)
	problems := depguardProblems(g, append(listed(t), module+"/internal/newprovider"))
	if !slices.ContainsFunc(problems, func(p string) bool {
		return strings.Contains(p, "no depguard rule for internal/newprovider") && strings.Contains(p, `- "**/internal/newprovider/*.go"`)
	}) {
		t.Errorf("with newprovider listed: %q, want the rule to add for internal/newprovider", problems)
	}
	// A rule that no longer keeps a provider from the domain.
	name, r, _ := g.ruleFor("internal/resend")
	r.Deny = slices.DeleteFunc(slices.Clone(r.Deny), func(d denyEntry) bool { return d.Pkg == module+"/internal" })
	g.Linters.Settings.Depguard.Rules = map[string]depguardRule{name: r}
	problems = depguardProblems(g, []string{module + "/internal/resend"})
	want := "lets internal/resend import " + module + "/internal/notify"
	if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, want) }) {
		t.Errorf("resend's rule without its deny of internal: %q, want %q", problems, want)
	}
}

// openAPIProblems says where the OpenAPI document (doc) and the
// providers disagree: the {provider} of POST /v1/webhooks/{provider}
// names the providers that report through a webhook, and any other enum
// that names a provider names all of one kind (the webhooks, the
// senders, or every provider).
func openAPIProblems(doc []byte, webhooks, senders, all []string) ([]string, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, err
	}
	var problems []string
	found := false
	walkEnums(&root, "", func(where string, enum []string) {
		if !slices.ContainsFunc(enum, func(v string) bool { return slices.Contains(all, v) }) {
			return
		}
		if strings.HasPrefix(where, "paths./v1/webhooks/{provider}.post.parameters") {
			found = true
			problems = append(problems, differs("the {provider} of POST /v1/webhooks/{provider}", enum, webhooks, "a provider whose webhook the API takes")...)
			return
		}
		for _, kind := range [][]string{webhooks, senders, all} {
			if len(differs("", enum, kind, "")) == 0 {
				return
			}
		}
		problems = append(problems, differs("the enum at "+where, enum, all, "a provider in the roster")...)
	})
	if !found {
		problems = append(problems, "POST /v1/webhooks/{provider} has no enum of the providers whose webhooks the API takes: give its {provider} parameter one")
	}
	return problems, nil
}

// differs says what enum (at where) lacks of want, and holds beyond it.
func differs(where string, enum, want []string, what string) []string {
	var out []string
	for _, w := range want {
		if !slices.Contains(enum, w) {
			out = append(out, fmt.Sprintf("%s does not name %s, %s: add it", where, w, what))
		}
	}
	for _, v := range enum {
		if !slices.Contains(want, v) {
			out = append(out, fmt.Sprintf("%s names %s, which is not %s: remove it", where, v, what))
		}
	}
	return out
}

// walkEnums calls f with each enum of strings under n, and where it is
// (its keys joined with dots; a parameter by its name).
func walkEnums(n *yaml.Node, where string, f func(where string, enum []string)) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			walkEnums(c, where, f)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			walkEnums(c, fmt.Sprintf("%s[%d]", where, i), f)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, v := n.Content[i].Value, n.Content[i+1]
			at := strings.TrimPrefix(where+"."+key, ".")
			if key == "enum" && v.Kind == yaml.SequenceNode {
				var enum []string
				for _, e := range v.Content {
					enum = append(enum, e.Value)
				}
				f(at, enum)
				continue
			}
			walkEnums(v, at, f)
		}
	}
}

// kinds are the names of the providers in the roster: those whose
// webhooks the API takes, those that send, all.
func kinds() (webhooks, senders, all []string) {
	for _, d := range roster.All {
		if d.Webhook != nil {
			webhooks = append(webhooks, d.Name)
		}
		all = append(all, d.Name)
	}
	return webhooks, roster.Senders(), all
}

// The OpenAPI document names the providers as the roster does.
func TestOpenAPIFollowsTheRoster(t *testing.T) {
	t.Parallel()
	webhooks, senders, all := kinds()
	problems, err := openAPIProblems(api.OpenAPI, webhooks, senders, all)
	if err != nil {
		t.Fatalf("api/openapi.yaml: %v", err)
	}
	for _, p := range problems {
		t.Errorf("api/openapi.yaml: %s", p)
	}
}

// The check names what a new provider with a webhook asks of the
// document, and what a removed one leaves behind.
func TestOpenAPICheckNamesWhatToAdd(t *testing.T) {
	t.Parallel()
	webhooks, senders, all := kinds()
	says := func(problems []string, want ...string) bool {
		return slices.ContainsFunc(problems, func(p string) bool {
			for _, w := range want {
				if !strings.Contains(p, w) {
					return false
				}
			}
			return true
		})
	}
	problems, err := openAPIProblems(api.OpenAPI, append(webhooks, "newprovider"), senders, append(all, "newprovider"))
	if err != nil || !says(problems, "{provider} of POST /v1/webhooks/{provider} does not name newprovider", "add it") {
		t.Errorf("with newprovider's webhook: %q, %v; want newprovider named to add", problems, err)
	}
	problems, _ = openAPIProblems(api.OpenAPI, webhooks[1:], senders, all)
	if !says(problems, "names "+webhooks[0]+",", "remove it") {
		t.Errorf("without %s's webhook: %q; want it named to remove", webhooks[0], problems)
	}
	// Another enum of provider names must name all of its kind.
	doc := append(append([]byte{}, api.OpenAPI...), []byte("x-example:\n  schema:\n    enum: [smtp, resend]\n")...)
	problems, _ = openAPIProblems(doc, webhooks, senders, all)
	if !says(problems, "the enum at x-example.schema.enum does not name", "add it") {
		t.Errorf("an enum of some providers: %q", problems)
	}
}
