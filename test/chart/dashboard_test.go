package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The Grafana dashboard renders only when asked, as a ConfigMap the sidecar
// loads, its JSON parses, and every metric it queries is one the code
// defines (docs/reference.md's metric list, generated from the
// definitions): a renamed or removed metric fails here, not on a blank panel.
func TestTheGrafanaDashboardQueriesMetricsTheCodeDefines(t *testing.T) {
	root := repoRoot(t)
	ch, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	ms, _, err := Render(ch, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Kind == "ConfigMap" && m.Name == "holdfast-grafana-dashboard" {
			t.Fatal("the dashboard renders by default; metrics.grafanaDashboard.enabled is false")
		}
	}
	ms, _, err = Render(ch, map[string]any{"metrics": map[string]any{"grafanaDashboard": map[string]any{"enabled": true}}})
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	for _, m := range ms {
		if m.Kind != "ConfigMap" || m.Name != "holdfast-grafana-dashboard" {
			continue
		}
		meta, _ := m.Object["metadata"].(map[string]any)
		labels, _ := meta["labels"].(map[string]any)
		if labels["grafana_dashboard"] != "1" {
			t.Errorf("the dashboard ConfigMap's labels %v lack grafana_dashboard: \"1\", which the sidecar selects", labels)
		}
		data, _ = m.Object["data"].(map[string]any)
	}
	if data == nil {
		t.Fatal("no ConfigMap holdfast-grafana-dashboard rendered with metrics.grafanaDashboard.enabled")
	}
	raw, _ := data["holdfast.json"].(string)
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal([]byte(raw), &dash); err != nil {
		t.Fatalf("the dashboard's JSON: %v", err)
	}
	ref, err := os.ReadFile(filepath.Join(root, "docs", "reference.md"))
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`holdfast_[a-z0-9_]+`)
	queried := 0
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			metrics := name.FindAllString(tg.Expr, -1)
			if len(metrics) == 0 {
				t.Errorf("panel %q: %q reads no holdfast metric", p.Title, tg.Expr)
			}
			for _, n := range metrics {
				queried++
				if !strings.Contains(string(ref), "| `"+n+"` |") {
					t.Errorf("panel %q queries %s, which docs/reference.md does not list (no code defines it)", p.Title, n)
				}
			}
		}
	}
	if queried == 0 {
		t.Fatal("the dashboard queries no metric")
	}
}
