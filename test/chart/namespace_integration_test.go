//go:build integration

package chart

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
)

// The namespace's Pod Security level on the real apiserver with its
// PodSecurity admission: the Namespace the chart renders (namespace.create,
// applied as a GitOps tool applies the manifests) admits holdfast-node's
// pod; helm install into a namespace labelled with a stricter level is
// refused with the fix and records no release, and so is namespace.create
// into a namespace helm install did not make.
func TestTheNamespaceAdmitsTheNodePlugin(t *testing.T) {
	ctx := context.Background()
	ch, err := Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	const enforce = "pod-security.kubernetes.io/enforce"

	t.Run("rendered and applied", func(t *testing.T) {
		ns := fmt.Sprintf("psa-rendered-%d", time.Now().UnixNano())
		ms, _, err := RenderIn(ch, ns, map[string]any{"namespace": map[string]any{"create": true}}, APIVersions)
		if err != nil {
			t.Fatal(err)
		}
		applied := false
		for _, m := range ms {
			if m.Kind == "Namespace" {
				obj := &unstructured.Unstructured{Object: m.Object}
				if err := env.Client.Create(ctx, obj.DeepCopy()); err != nil {
					t.Fatalf("applying the rendered Namespace: %v", err)
				}
				t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })
				applied = true
			}
		}
		if !applied {
			t.Fatal("no Namespace rendered with namespace.create")
		}
		node := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "holdfast-node-psa"}, Spec: nodePodSpec(t, ms)}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, node, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("holdfast-node's pod in the rendered namespace %s: %v", ns, err)
		}
	})

	for _, tc := range []struct {
		name   string
		labels map[string]string
		values map[string]any
		want   string
	}{
		{"helm install into a stricter level", map[string]string{enforce: "baseline"}, map[string]any{},
			`label pod-security.kubernetes.io/enforce is "baseline"; holdfast-node (uid 0, host network, host paths) needs "privileged"`},
		{"helm install with namespace.create", nil, map[string]any{"namespace": map[string]any{"create": true}},
			"namespace.create: namespace "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
				GenerateName: "psa-install-", Labels: tc.labels}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ns := got.Name
			t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })
			cfg := helmConfigIn(t, ns)
			inst := newInstall(cfg)
			inst.ReleaseName, inst.Namespace, inst.Timeout = "holdfast", ns, time.Minute
			_, err = inst.Run(ch, tc.values)
			if err == nil {
				_, _ = newUninstall(cfg).Run("holdfast")
				t.Fatalf("helm install into %s with %v succeeded; want refused", ns, tc.values)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "kubectl label namespace "+ns+" "+enforce+"=privileged") {
				t.Errorf("helm install: %v\nwant the reason %q and the kubectl label fix", err, tc.want)
			}
			if rels, err := action.NewList(cfg).Run(); err != nil || len(rels) > 0 {
				t.Errorf("releases in %s after the refusal: %d (%v)", ns, len(rels), err)
			}
			if ds, err := cs.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{}); err != nil || len(ds.Items) > 0 {
				t.Errorf("DaemonSets in %s after the refusal: %v (%v)", ns, ds, err)
			}
		})
	}
}
