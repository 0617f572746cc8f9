package chart

import (
	"strings"
	"testing"
)

// The chart labels its namespace with the Pod Security level holdfast-node
// needs when it renders the Namespace (namespace.create, for tools that
// apply the rendered manifests): pod-security.kubernetes.io/enforce:
// privileged, which namespace.labels cannot lower; by default it renders no
// Namespace (helm install keeps its release in it) and its notes say how to
// label one.
func TestTheChartLabelsItsNamespaceWithThePodSecurityLevelItNeeds(t *testing.T) {
	ch, err := Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	const enforce = "pod-security.kubernetes.io/enforce"
	for _, tc := range []struct {
		name   string
		values map[string]any
		// labels the Namespace must carry; nil: no Namespace rendered.
		labels map[string]string
	}{
		{"defaults", map[string]any{}, nil},
		{"created", map[string]any{"namespace": map[string]any{"create": true}},
			map[string]string{enforce: "privileged", "app.kubernetes.io/name": "holdfast"}},
		{"created with labels, one trying a stricter level", map[string]any{"namespace": map[string]any{"create": true,
			"labels": map[string]any{enforce: "baseline", "pod-security.kubernetes.io/warn": "restricted", "team": "plant"}}},
			map[string]string{enforce: "privileged", "pod-security.kubernetes.io/warn": "restricted", "team": "plant"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms, notes, err := Render(ch, tc.values)
			if err != nil {
				t.Fatal(err)
			}
			var found []Manifest
			for _, m := range ms {
				if m.Kind == "Namespace" {
					found = append(found, m)
				}
			}
			if tc.labels == nil {
				if len(found) > 0 {
					t.Fatalf("rendered %d Namespaces by default; helm install keeps its release in the namespace and cannot own it", len(found))
				}
				if want := "kubectl label namespace " + Namespace + " " + enforce + "=privileged"; !strings.Contains(notes, want) {
					t.Errorf("the notes do not say how to label the namespace (%q):\n%s", want, notes)
				}
				return
			}
			if len(found) != 1 || found[0].Name != Namespace {
				t.Fatalf("rendered Namespaces %v; want the release namespace %s", found, Namespace)
			}
			meta, _ := found[0].Object["metadata"].(map[string]any)
			labels, _ := meta["labels"].(map[string]any)
			for k, v := range tc.labels {
				if labels[k] != v {
					t.Errorf("Namespace label %s: %v; want %q (all: %v)", k, labels[k], v, labels)
				}
			}
			if strings.Contains(notes, "kubectl label namespace") {
				t.Errorf("the notes ask to label a namespace the chart labels:\n%s", notes)
			}
		})
	}
}
