package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// VnuVersion is the Nu Html Checker the tests run: the npm package
// vnu-jar, which `make vnu` installs into bin/vnu (keep the two equal).
const VnuVersion = "26.9.27"

// allowedHTMLWarnings are the checker's warnings that e-mail HTML needs.
// Outlook for Windows lays mail out with Word, which ignores CSS
// border-spacing, padding on tables and max-width: a table says it has
// no spacing with cellpadding, cellspacing and border, and a container
// is kept to 600 px there by width="600" (which CSS makes fluid
// elsewhere); a cell centres what it holds with align. The HTML
// standard calls these attributes obsolete; every client still honours
// them. Nothing else is allowed, and no error at all.
var allowedHTMLWarnings = []*regexp.Regexp{
	regexp.MustCompile(`^The “(cellpadding|cellspacing|border|width)” attribute on the “table” element is obsolete\.`),
	regexp.MustCompile(`^The “align” attribute on the “td” element is obsolete\.`),
}

// CheckHTML checks each document of docs (a name: its HTML) with the Nu
// Html Checker (vnu.jar, the W3C's validator), in one run, and fails the
// test for each error and each warning not in allowedHTMLWarnings, at
// its document and line. Its plain notes ("Trailing slash on void
// elements has no effect", which is how Go's HTML renderer writes
// <br/>) pass. The checker needs Java; the test fails, saying how to
// install both, without them.
func CheckHTML(t testing.TB, docs map[string]string) {
	t.Helper()
	jar, java := vnuJar(t)
	dir := t.TempDir()
	var files []string
	for _, name := range slices.Sorted(maps.Keys(docs)) {
		file := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(name)+".html")
		WriteFile(t, file, docs[name])
		files = append(files, file)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, java, append([]string{"-Xss4m", "-jar", jar, "--format", "json", "--stdout", "--exit-zero-always"}, files...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s -jar %s: %v\n%s", java, jar, err, stderr.String())
	}
	var report struct {
		Messages []struct {
			Type, SubType, URL, Message, Extract string
			LastLine                             int
		}
	}
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("the Nu Html Checker's report: %v\n%s", err, out)
	}
	names := map[string]string{}
	for name := range docs {
		names[filepath.Base(strings.NewReplacer("/", "_", " ", "_").Replace(name)+".html")] = name
	}
	for _, m := range report.Messages {
		warning := m.Type == "info" && m.SubType == "warning"
		if m.Type == "info" && !warning {
			continue
		}
		if warning && slices.ContainsFunc(allowedHTMLWarnings, func(re *regexp.Regexp) bool { return re.MatchString(m.Message) }) {
			continue
		}
		kind := m.Type
		if warning {
			kind = "warning"
		}
		t.Errorf("%s:%d: the Nu Html Checker: %s: %s\n    %s", names[filepath.Base(m.URL)], m.LastLine, kind, m.Message, strings.TrimSpace(m.Extract))
	}
}

// vnuJar finds the checker and Java: $VNU_JAR, else the one `make vnu`
// installs in bin/vnu; $JAVA, else java on PATH.
func vnuJar(t testing.TB) (jar, java string) {
	t.Helper()
	root := filepath.Clean(moduleRoot(t))
	jar = os.Getenv("VNU_JAR")
	if jar == "" {
		jar = filepath.Join(root, "bin", "vnu", "node_modules", "vnu-jar", "build", "dist", "vnu.jar")
	}
	err := func() error {
		if _, err := os.Stat(jar); err != nil {
			return err
		}
		if os.Getenv("VNU_JAR") != "" {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(filepath.Dir(jar), "..", "..", "package.json"))
		if err != nil {
			return err
		}
		var pkg struct{ Version string }
		if err := json.Unmarshal(b, &pkg); err != nil {
			return err
		}
		if pkg.Version != VnuVersion {
			return fmt.Errorf("bin/vnu has vnu-jar %s", pkg.Version)
		}
		return nil
	}()
	if err != nil {
		t.Fatalf("the HTML tests need the Nu Html Checker %s (%v): install it with `make vnu` "+
			"(npm install --prefix bin/vnu vnu-jar@%[1]s, and Debian's default-jre-headless if there is no java), or point VNU_JAR at a vnu.jar",
			VnuVersion, err)
	}
	java = os.Getenv("JAVA")
	if java == "" {
		var err error
		if java, err = exec.LookPath("java"); err != nil {
			t.Fatalf("the Nu Html Checker needs Java, and there is none on PATH: `make vnu` installs Debian's default-jre-headless, or point JAVA at one")
		}
	}
	return jar, java
}
