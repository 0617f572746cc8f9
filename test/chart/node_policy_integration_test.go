//go:build integration

package chart

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// nodePolicy is the chart's ValidatingAdmissionPolicy that keeps the node
// plugin on its own Node.
const nodePolicy = "holdfast-node-own-node"

// nodeChange is one write a compromised node plugin could make on a Node.
type nodeChange struct {
	what        string
	subresource string
	// patch is the merge patch; phase makes each phase's write a change.
	patch func(phase int) map[string]any
	// report: a holdfast node report, which the webhook also checks (fail
	// closed: refused on the plugin's own Node too while it is down).
	report bool
}

// nodeChanges touch every part of a Node: spec (cordon), taints, labels,
// annotations (a holdfast report among them) and status.
var nodeChanges = []nodeChange{
	{what: "cordon", patch: func(p int) map[string]any {
		return map[string]any{"spec": map[string]any{"unschedulable": p%2 == 0}}
	}},
	{what: "taint NoExecute", patch: func(p int) map[string]any {
		return map[string]any{"spec": map[string]any{"taints": []any{map[string]any{"key": fmt.Sprintf("example.com/evict-%d", p), "effect": "NoExecute"}}}}
	}},
	{what: "relabel topology.kubernetes.io/zone", patch: func(p int) map[string]any {
		return map[string]any{"metadata": map[string]any{"labels": map[string]any{"topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", p)}}}
	}},
	{what: "annotate", patch: func(p int) map[string]any {
		return map[string]any{"metadata": map[string]any{"annotations": map[string]any{"example.com/note": fmt.Sprint(p)}}}
	}},
	{what: "runtimes report (a runtime still running hidden from another node's hand-over)", patch: func(p int) map[string]any {
		return map[string]any{"metadata": map[string]any{"annotations": map[string]any{
			"holdfast.io/runtimes": fmt.Sprintf(`{"at":"2026-12-02T08:00:0%dZ","runtimes":[]}`, p)}}}
	}, report: true},
	{what: "status capacity", subresource: "status", patch: func(p int) map[string]any {
		return map[string]any{"status": map[string]any{"capacity": map[string]any{"example.com/widgets": fmt.Sprint(p + 1)}}}
	}},
}

// The node plugin, through a token bound to its pod on n2, changes n2 and
// nothing of n1: cordon, taint, label, annotation and status, each refused
// by the chart's ValidatingAdmissionPolicy naming itself and the node. The
// apiserver enforces it, so it holds with holdfast-webhook serving and with
// it stopped. The chart grants no nodes/status; the test grants it apart so
// that the status write reaches admission (a wider grant added by someone
// else does not widen the node plugin's reach).
func TestTheNodePluginChangesOnlyItsOwnNode(t *testing.T) {
	ctx := context.Background()
	root, _, ms := renderDefaults(t)
	vwc := installForComponents(t)
	wh := serveChartWebhook(t, vwc, buildBinary(t, root, "./cmd/holdfast-webhook"),
		serviceAccountKubeconfig(ctx, t, "holdfast-webhook"), containerArgs(t, ms, "webhook"))

	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"n1", "n2"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"topology.kubernetes.io/zone": "a"}}}
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}) })
	}
	pod, err := cs.CoreV1().Pods(Namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "holdfast-node-n2"},
		Spec: corev1.PodSpec{ServiceAccountName: "holdfast-node", NodeName: "n2",
			Containers: []corev1.Container{{Name: "node", Image: "holdfast.local/holdfast-node:dev"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Pods(Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}) })
	onN2, unbound := podClient(ctx, t, "holdfast-node", pod), podClient(ctx, t, "holdfast-node", nil)
	apply := func(c *kubernetes.Clientset, node string, ch nodeChange, phase int, dryRun bool) error {
		data, err := json.Marshal(ch.patch(phase))
		if err != nil {
			t.Fatal(err)
		}
		opts := metav1.PatchOptions{}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		var sub []string
		if ch.subresource != "" {
			sub = []string{ch.subresource}
		}
		_, err = c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, data, opts, sub...)
		return err
	}

	status := nodeChanges[len(nodeChanges)-1]
	if err := apply(onN2, "n2", status, 0, true); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "nodes/status") {
		t.Errorf("the chart's RBAC lets the node plugin write nodes/status (%v); it reports through metadata only", err)
	}
	grantNodeStatus(ctx, t, cs)

	awaitNodePolicy(ctx, t, onN2, "n1")
	eventually(t, "the test's nodes/status grant in force", func() bool { return apply(onN2, "n2", status, 0, true) == nil })

	before, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for phase, webhook := range []string{"serving", "stopped"} {
		if webhook == "stopped" {
			wh.stop(t) // its configuration stays installed: an outage
		}
		for _, ch := range nodeChanges {
			err := apply(onN2, "n1", ch, phase, false)
			if !refusedByPolicy(err, "holdfast-node of node n2 may change only its own Node, not n1") {
				t.Errorf("webhook %s: the node plugin of n2: %s on n1: %v; want the refusal of ValidatingAdmissionPolicy %s naming n1", webhook, ch.what, err, nodePolicy)
			} else {
				t.Logf("webhook %s: %s on n1 refused: %v", webhook, ch.what, err)
			}
			switch err := apply(onN2, "n2", ch, phase, false); {
			case ch.report && webhook == "stopped":
				if err == nil {
					t.Errorf("webhook stopped: the node plugin of n2: %s on its own Node admitted; the webhook's checks of holdfast reports fail closed", ch.what)
				}
			case err != nil:
				t.Errorf("webhook %s: the node plugin of n2: %s on its own Node: %v", webhook, ch.what, err)
			}
			if err := apply(unbound, "n2", ch, phase, false); !refusedByPolicy(err, "pod-bound service account token") {
				t.Errorf("webhook %s: the node plugin with an unbound token: %s on n2: %v; want the policy's refusal naming the pod-bound token", webhook, ch.what, err)
			}
		}
	}

	after, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("refused writes changed n1: spec %+v labels %v annotations %v capacity %v", after.Spec, after.Labels, after.Annotations, after.Status.Capacity)
	}
	n2, err := cs.CoreV1().Nodes().Get(ctx, "n2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n2.Spec.Unschedulable || n2.Labels["topology.kubernetes.io/zone"] != "zone-1" || n2.Annotations["example.com/note"] != "1" ||
		len(n2.Spec.Taints) != 1 || n2.Spec.Taints[0].Key != "example.com/evict-1" {
		t.Errorf("n2 after its node plugin's writes: spec %+v labels %v annotations %v", n2.Spec, n2.Labels, n2.Annotations)
	}
	if q := n2.Status.Capacity["example.com/widgets"]; q.String() != "2" {
		t.Errorf("n2's status after its node plugin's write: capacity %v", n2.Status.Capacity)
	}
}

func refusedByPolicy(err error, want string) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+nodePolicy+"'") &&
		strings.Contains(err.Error(), want)
}

// awaitNodePolicy returns once the apiserver refuses, with the chart's node
// policy, a dry-run change of another Node by the node plugin's client c:
// helm install does not wait for the policy to reach the admission cache.
func awaitNodePolicy(ctx context.Context, t *testing.T, c *kubernetes.Clientset, other string) {
	t.Helper()
	eventually(t, "the chart's node policy in force", func() bool {
		_, err := c.CoreV1().Nodes().Patch(ctx, other, types.MergePatchType, []byte(`{"metadata":{"annotations":{"example.com/probe":"x"}}}`),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return refusedByPolicy(err, "not "+other)
	})
}

// podClient is a client with a token of the service account sa bound to
// pod (nil: unbound).
func podClient(ctx context.Context, t *testing.T, sa string, pod *corev1.Pod) *kubernetes.Clientset {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", podKubeconfig(ctx, t, sa, pod))
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// grantNodeStatus lets holdfast-node patch nodes/status for the test, beyond
// the chart's RBAC.
func grantNodeStatus(ctx context.Context, t *testing.T, cs *kubernetes.Clientset) {
	t.Helper()
	const name = "test-holdfast-node-status"
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}}}}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{}) })
	b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "holdfast-node", Namespace: Namespace}}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{}) })
}
