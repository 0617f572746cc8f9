package chart

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// generatedCRDs reads the CRDs make generate writes, by name.
func generatedCRDs(t *testing.T, root string) map[string]map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(Dir(root), "files", "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no generated CRDs under files/crds (run make generate): %v", err)
	}
	out := map[string]map[string]any{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := yaml.Unmarshal(data, &obj); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[obj["metadata"].(map[string]any)["name"].(string)] = obj
	}
	return out
}

func renderedCRDs(t *testing.T, values map[string]any) map[string]Manifest {
	t.Helper()
	ch, err := Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	ms, _, err := Render(ch, values)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Manifest{}
	for _, m := range ms {
		if m.Kind == "CustomResourceDefinition" {
			out[m.Name] = m
		}
	}
	return out
}

// The chart renders holdfast's CRDs as templates (helm upgrade updates
// them; Helm never upgrades crds/), each the generated file exactly but for
// the chart's labels and, with crds.keep (the default), the annotation
// that keeps it through helm uninstall; crds.enabled=false renders none.
func TestTheChartRendersTheGeneratedCRDs(t *testing.T) {
	root := repoRoot(t)
	ch, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	if crds := ch.CRDObjects(); len(crds) > 0 {
		t.Errorf("the chart has a crds/ directory (%s): helm installs it once and never upgrades it", crds[0].Filename)
	}
	want := generatedCRDs(t, root)
	for _, tc := range []struct {
		name   string
		values map[string]any
		keep   bool
		none   bool
	}{
		{name: "defaults", values: map[string]any{}, keep: true},
		{name: "crds.keep=false", values: map[string]any{"crds": map[string]any{"keep": false}}},
		{name: "crds.enabled=false", values: map[string]any{"crds": map[string]any{"enabled": false}}, none: true},
	} {
		got := renderedCRDs(t, tc.values)
		if tc.none {
			if len(got) != 0 {
				t.Errorf("%s: %d CRDs rendered, want none", tc.name, len(got))
			}
			continue
		}
		if len(got) != len(want) {
			t.Errorf("%s: %d CRDs rendered, %d generated", tc.name, len(got), len(want))
		}
		for name, gen := range want {
			m, ok := got[name]
			if !ok {
				t.Errorf("%s: CRD %s is generated but not rendered", tc.name, name)
				continue
			}
			if m.Source != "holdfast/templates/crds.yaml" {
				t.Errorf("%s: CRD %s comes from %s", tc.name, name, m.Source)
			}
			md := m.Object["metadata"].(map[string]any)
			ann, _ := md["annotations"].(map[string]any)
			if keep := ann["helm.sh/resource-policy"] == "keep"; keep != tc.keep {
				t.Errorf("%s: CRD %s annotations %v: keep=%v, want %v", tc.name, name, ann, keep, tc.keep)
			}
			labels, _ := md["labels"].(map[string]any)
			if labels["app.kubernetes.io/managed-by"] != "Helm" || labels["app.kubernetes.io/name"] != "holdfast" {
				t.Errorf("%s: CRD %s labels %v lack the chart's", tc.name, name, labels)
			}
			// The rest is the generated file, value for value.
			rendered := deepCopyJSON(t, m.Object)
			rmd := rendered["metadata"].(map[string]any)
			delete(rmd, "labels")
			delete(rmd["annotations"].(map[string]any), "helm.sh/resource-policy")
			if !reflect.DeepEqual(rendered, gen) {
				a, _ := yaml.Marshal(rendered)
				b, _ := yaml.Marshal(gen)
				t.Errorf("%s: CRD %s differs from files/crds:\n%s", tc.name, name, firstDifference(string(a), string(b)))
			}
		}
	}
}

func deepCopyJSON(t *testing.T, obj map[string]any) map[string]any {
	t.Helper()
	data, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := yaml.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func firstDifference(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return "rendered: " + al[i] + "\ngenerated: " + bl[i]
		}
	}
	return "lengths differ"
}

// helm uninstall runs the guard first: a pre-delete Job running
// holdfast-controller --role=uninstall-guard under a ServiceAccount whose
// only grant is list Units, all four hooks; uninstall.force=true renders
// none.
func TestTheUninstallGuardHookRendersUnlessForced(t *testing.T) {
	ch, err := Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	hooks, err := RenderHooks(ch, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, h := range hooks {
		kinds = append(kinds, h.Kind+"/"+h.Name)
		ann, _ := h.Object["metadata"].(map[string]any)["annotations"].(map[string]any)
		if ann["helm.sh/hook"] != "pre-delete" {
			t.Errorf("%s %s: helm.sh/hook %v, want pre-delete", h.Kind, h.Name, ann["helm.sh/hook"])
		}
	}
	slices.Sort(kinds)
	want := []string{"ClusterRole/holdfast-uninstall-guard", "ClusterRoleBinding/holdfast-uninstall-guard", "Job/holdfast-uninstall-guard", "ServiceAccount/holdfast-uninstall-guard"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("hooks %v, want %v", kinds, want)
	}
	args := containerArgs(t, hooks, "uninstall-guard")
	for _, a := range []string{"--role=uninstall-guard", "--release=holdfast", "--leader-election-namespace=" + Namespace} {
		if !slices.Contains(args, a) {
			t.Errorf("the guard's args %v lack %s", args, a)
		}
	}
	for _, h := range hooks {
		if h.Kind != "ClusterRole" {
			continue
		}
		rules, _ := h.Object["rules"].([]any)
		if len(rules) != 1 || !reflect.DeepEqual(rules[0].(map[string]any)["verbs"], []any{"list"}) {
			t.Errorf("the guard's grants %v, want list Units only", rules)
		}
	}

	forced, err := RenderHooks(ch, map[string]any{"uninstall": map[string]any{"force": true}})
	if err != nil {
		t.Fatal(err)
	}
	if len(forced) != 0 {
		t.Errorf("uninstall.force=true renders %d hooks, want none", len(forced))
	}
}
