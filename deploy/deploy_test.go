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
	"strings"
	"testing"
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
