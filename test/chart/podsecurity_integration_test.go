//go:build integration

package chart

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The Pod Security levels docs/operations.md names for the release
// namespace, checked by the apiserver's PodSecurity admission on a pod of
// each rendered workload: holdfast-node (host network, host paths, root)
// needs privileged and baseline refuses it; every other component meets
// restricted.
func TestThePodSecurityLevelsTheChartNeeds(t *testing.T) {
	ctx := context.Background()
	_, _, ms := renderDefaults(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	namespace := func(level string) string {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "psa-" + level + "-",
			Labels: map[string]string{"pod-security.kubernetes.io/enforce": level}}}
		got, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(ctx, got.Name, metav1.DeleteOptions{}) })
		return got.Name
	}
	restricted, baseline, privileged := namespace("restricted"), namespace("baseline"), namespace("privileged")
	admitted := func(m Manifest, ns string) error {
		spec, _ := m.Object["spec"].(map[string]any)
		tmpl, _ := spec["template"].(map[string]any)
		data, err := json.Marshal(tmpl)
		if err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{}
		if err := json.Unmarshal(data, pod); err != nil {
			t.Fatal(err)
		}
		pod.Name = m.Name
		_, err = cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	seen := 0
	for _, m := range ms {
		if m.Kind != "Deployment" && m.Kind != "StatefulSet" && m.Kind != "DaemonSet" {
			continue
		}
		seen++
		if m.Name != "holdfast-node" {
			if err := admitted(m, restricted); err != nil {
				t.Errorf("%s %s: refused at Pod Security restricted: %v", m.Kind, m.Name, err)
			}
			continue
		}
		if err := admitted(m, baseline); err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
			t.Errorf("holdfast-node at Pod Security baseline: %v; want the refusal (docs/operations.md says it needs privileged)", err)
		}
		if err := admitted(m, privileged); err != nil {
			t.Errorf("holdfast-node at Pod Security privileged: %v", err)
		}
	}
	if seen < 4 {
		t.Fatalf("rendered %d workloads", seen)
	}
}
