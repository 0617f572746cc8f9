package chart

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// promtool finds the promtool make test builds (bin/tools/promtool-*, or
// $PROMTOOL).
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p
	}
	matches, _ := filepath.Glob(filepath.Join(repoRoot(t), "bin", "tools", "promtool-*"))
	if len(matches) == 0 {
		t.Fatal("promtool is missing: run make test (it builds bin/tools/promtool-*)")
	}
	return matches[len(matches)-1]
}

// The chart's alerts, as rendered, pass promtool's checks and fire on the
// series of testdata/alerts_test.yaml, each with its labels and summary, and
// stay silent where they must (a second release's metrics, one webhook pod
// of two down, a voters replica that does not lead). The descriptions and
// runbook links are prose: TestEveryAlertWatchesAMetricTheCodeDefines holds
// the links to docs/operations.md.
func TestTheAlertRulesPassPromtool(t *testing.T) {
	tool := promtool(t)
	var groups any
	for _, m := range renderMonitoring(t, APIVersions) {
		if m.Kind != "PrometheusRule" {
			continue
		}
		spec, _ := m.Object["spec"].(map[string]any)
		groups = spec["groups"]
		for _, g := range groups.([]any) {
			for _, r := range g.(map[string]any)["rules"].([]any) {
				ann := r.(map[string]any)["annotations"].(map[string]any)
				delete(ann, "description")
				delete(ann, "runbook_url")
			}
		}
	}
	if groups == nil {
		t.Fatal("no PrometheusRule rendered")
	}
	rules, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join("testdata", "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(tool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s\nrules.yaml:\n%s", strings.Join(args, " "), err, out, rules)
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// The scrape interval and the alerts' durations are Prometheus durations:
// the schema refuses what Prometheus refuses (a fraction, units out of
// order) and takes what it takes (days).
func TestAlertDurationsArePrometheusDurations(t *testing.T) {
	ch, err := Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path  []string
		value string
		ok    bool
	}{
		{[]string{"serviceMonitor", "interval"}, "30s", true},
		{[]string{"serviceMonitor", "interval"}, "1m30s", true},
		{[]string{"prometheusRule", "evenVotersFor"}, "1d", true},
		{[]string{"prometheusRule", "swapOverdueFor"}, "0", true},
		{[]string{"serviceMonitor", "interval"}, "1.5m", false},
		{[]string{"prometheusRule", "swapOverdueFor"}, "30s5m", false},
		{[]string{"prometheusRule", "evenVotersFor"}, "", false},
		{[]string{"prometheusRule", "evenVotersFor"}, "10", false},
	} {
		values := map[string]any{"metrics": map[string]any{tc.path[0]: map[string]any{"enabled": true, tc.path[1]: tc.value}}}
		_, _, err := RenderFor(ch, values, APIVersions)
		field := "metrics." + strings.Join(tc.path, ".")
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s=%q refused: %v", field, tc.value, err)
		case !tc.ok && err == nil:
			t.Errorf("%s=%q accepted; Prometheus refuses it", field, tc.value)
		case !tc.ok && !strings.Contains(err.Error(), tc.path[1]):
			t.Errorf("%s=%q: the refusal does not name the field: %v", field, tc.value, err)
		}
	}
}
