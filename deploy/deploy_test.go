// Package deploy_test keeps the monitoring files honest: every metric the
// dashboard and the alert rules use exists in the code, and the README
// lists every metric the code defines.
package deploy_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"go.yaml.in/yaml/v4"
)

var metricName = regexp.MustCompile(`sekali_[a-z_]+`)

// definedMetrics reads the metric names the Go code registers.
func definedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	defined := map[string]bool{}
	// A name in opts (Name:), a collector's description (NewDesc,
	// pace's desc), or internal/metric's constructors' second argument.
	def := regexp.MustCompile(`(?:Name:\s*|NewDesc\(|desc\(|metric\.[A-Za-z]+\([\w.]+,\s*)"(sekali_[a-z_]+)"`)
	err := filepath.WalkDir("../internal", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range def.FindAllStringSubmatch(string(b), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(defined) < 20 {
		t.Fatalf("found only %d metric definitions; is the pattern still right?", len(defined))
	}
	return defined
}

// base strips the series suffixes Prometheus adds to histograms.
func base(name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		name = strings.TrimSuffix(name, suffix)
	}
	return name
}

func TestDashboardAndAlertsUseExistingMetrics(t *testing.T) {
	defined := definedMetrics(t)

	raw, err := os.ReadFile("grafana/dashboards/sekali.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard is not valid JSON: %v", err)
	}
	if dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatal("dashboard has no uid or no panels")
	}
	var used []string
	for _, p := range dash.Panels {
		if p.Title == "" || len(p.Targets) == 0 {
			t.Errorf("panel %q has no title or no query", p.Title)
		}
		for _, tg := range p.Targets {
			used = append(used, metricName.FindAllString(tg.Expr, -1)...)
		}
	}
	alerts, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	used = append(used, metricName.FindAllString(string(alerts), -1)...)
	for _, name := range used {
		if !defined[base(name)] {
			t.Errorf("%s is used by the dashboard or the alerts but no code defines it", name)
		}
	}

	// The runbook's three signals are alerted on.
	for _, signal := range []string{"sekali_lock_expired_before_completion_total", "sekali_stale_processing_records", `outcome="failed"`} {
		if !strings.Contains(string(alerts), signal) {
			t.Errorf("no alert rule on %s", signal)
		}
	}
}

func TestReadmeListsEveryMetric(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for name := range definedMetrics(t) {
		if !strings.Contains(string(readme), name) {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("README.md does not document %v", missing)
	}
}

// ruleFile is what alerts.yml holds.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record      string            `yaml:"record"`
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

var recordedName = regexp.MustCompile(`sekali:[a-z_:]+`)

// Every alert says where the runbook deals with it, and a runbook_url
// names a section of docs/runbook.md that exists (the anchor GitHub
// makes of its heading); the pace alerts each have one. Every recorded
// series an expression reads is recorded by a rule of the file, before
// the rules of its group that read it (a group runs in order).
func TestAlertsNameTheirRunbookAndReadWhatIsRecorded(t *testing.T) {
	raw, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules ruleFile
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	runbook, err := os.ReadFile("../docs/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := markdownAnchors(string(runbook))
	recorded := map[string]bool{}
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			for _, name := range recordedName.FindAllString(r.Expr, -1) {
				if !recorded[name] {
					t.Errorf("%s%s reads %s, which no rule above it records", r.Alert, r.Record, name)
				}
			}
			if r.Record != "" {
				recorded[r.Record] = true
				continue
			}
			url := r.Annotations["runbook_url"]
			alerts[r.Alert] = url != ""
			if url == "" && !strings.Contains(strings.ToLower(r.Annotations["description"]), "runbook") {
				t.Errorf("%s names no runbook section", r.Alert)
			}
			if url == "" {
				continue
			}
			anchor, ok := strings.CutPrefix(url, "docs/runbook.md#")
			if !ok || !anchors[anchor] {
				t.Errorf("%s: runbook_url %q is no section of docs/runbook.md", r.Alert, url)
			}
		}
	}
	for _, name := range []string{"SekaliConfirmationsWillBeLate", "SekaliProviderPausedLong", "SekaliProviderThrottled"} {
		if !alerts[name] {
			t.Errorf("no alert %s with a runbook_url", name)
		}
	}
}

// markdownAnchors are the anchors GitHub makes of md's headings
// (outside code blocks): lower case, punctuation dropped, spaces as
// hyphens, a repeated one with -1, -2, ...
func markdownAnchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		heading, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if fenced || !strings.HasPrefix(line, "#") || !ok {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// Every link to a section of a document, in the README and docs/, lands
// on one of that document's headings (README's docs/providers.md#pace
// once pointed at a heading that made another anchor).
func TestDocsLinksLandOnSections(t *testing.T) {
	link := regexp.MustCompile(`\]\(([\w./-]*?\.md)?#([^)\s]+)\)`)
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]map[string]bool{}
	sections := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%v", err)
		}
		anchors[path] = markdownAnchors(string(b))
		return anchors[path]
	}
	for _, from := range append(docs, "../README.md") {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			to := from
			if m[1] != "" {
				to = filepath.Join(filepath.Dir(from), m[1])
			}
			if !sections(to)[m[2]] {
				t.Errorf("%s links to %s#%s, which is no heading there", from, m[1], m[2])
			}
		}
	}
}
