//go:build integration

package chart

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// With the chart installed (its RBAC, its webhook configuration, the real
// holdfast-webhook with the chart's args), the node plugin's service
// account, through a token bound to its DaemonSet pod, may set on its own
// Node what the node plugin reports there: the observed role label and the
// actuator, provisioned, tombstone and fitness annotations. On another Node,
// without a pod-bound token, or on a key only the controller writes, it is
// refused with the field and the reason.
func TestWebhookLetsTheNodePluginWriteOnlyItsOwnNode(t *testing.T) {
	ctx := context.Background()
	root, _, ms := renderDefaults(t)
	vwc := installForComponents(t)
	bin := buildBinary(t, root, "./cmd/holdfast-webhook")
	wh := serveChartWebhook(t, vwc, bin, serviceAccountKubeconfig(ctx, t, "holdfast-webhook"), containerArgs(t, ms, "webhook"))

	for _, name := range []string{"own-edge-1", "own-edge-2"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := env.Client.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(ctx, n) })
	}
	// The node plugin's pod on own-edge-1, as its DaemonSet places it.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: "holdfast-node-own"},
		Spec: corev1.PodSpec{ServiceAccountName: "holdfast-node", NodeName: "own-edge-1",
			Containers: []corev1.Container{{Name: "node", Image: "holdfast.local/holdfast-node:dev"}}},
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, pod) })

	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	token := func(bound bool) *kubernetes.Clientset {
		t.Helper()
		spec := authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}
		if bound {
			spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
		}
		tr, err := cs.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, "holdfast-node", &authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := kubernetes.NewForConfig(&rest.Config{Host: env.Config.Host, BearerToken: tr.Status.Token,
			TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	podBound, unbound := token(true), token(false)

	report := map[string]any{"metadata": map[string]any{
		"labels": map[string]any{holdfastv1.LabelRole: holdfastv1.RoleAgent},
		"annotations": map[string]any{
			holdfastv1.AnnotationActuator:    `{"phase":"Idle"}`,
			holdfastv1.AnnotationProvisioned: "true",
			holdfastv1.AnnotationTombstone:   `{"member":"8e9e05c52164694d","cluster":"cdf818194e3a8c32"}`,
			holdfastv1.AnnotationFitness:     `{"disk":"ok"}`,
		},
	}}
	patch := func(c *kubernetes.Clientset, node string, body map[string]any) error {
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, data, metav1.PatchOptions{})
		return err
	}

	// Its own Node: every key it reports is let through, and lands.
	if err := patch(podBound, "own-edge-1", report); err != nil {
		t.Fatalf("the node plugin writing its report on its own Node: %v", err)
	}
	got, err := cs.CoreV1().Nodes().Get(ctx, "own-edge-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels[holdfastv1.LabelRole] != holdfastv1.RoleAgent || got.Annotations[holdfastv1.AnnotationProvisioned] != "true" ||
		got.Annotations[holdfastv1.AnnotationTombstone] == "" || got.Annotations[holdfastv1.AnnotationFitness] == "" ||
		got.Annotations[holdfastv1.AnnotationActuator] == "" {
		t.Errorf("own Node after the report: labels %v annotations %v", got.Labels, got.Annotations)
	}
	// Clearing a key (a tombstone the member no longer needs) is a write too.
	if err := patch(podBound, "own-edge-1", map[string]any{"metadata": map[string]any{
		"annotations": map[string]any{holdfastv1.AnnotationTombstone: nil}}}); err != nil {
		t.Errorf("the node plugin clearing its tombstone on its own Node: %v", err)
	}

	refused := func(what string, err error, by string, want ...string) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v; want 403 Forbidden from %s", what, err, by)
			return
		}
		for _, w := range append(want, by) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: the refusal does not name %q:\n%v", what, w, err)
			}
		}
	}
	awaitNodePolicy(ctx, t, podBound, "own-edge-2")
	// Another Node, or a token not bound to its pod (which names no node):
	// the chart's node policy refuses in the apiserver before the webhook
	// is called (TestTheNodePluginChangesOnlyItsOwnNode holds every field).
	err = patch(podBound, "own-edge-2", report)
	refused("the node plugin on own-edge-1 writing on own-edge-2", err, "ValidatingAdmissionPolicy '"+nodePolicy+"'", "may change only its own Node, not own-edge-2")
	refused("the node plugin with an unbound token", patch(unbound, "own-edge-1", map[string]any{"metadata": map[string]any{
		"annotations": map[string]any{holdfastv1.AnnotationFitness: `{"disk":"full"}`}}}), "ValidatingAdmissionPolicy '"+nodePolicy+"'", "pod-bound service account token")
	// The desired role and the role steps are the controller's, even on its own Node.
	refused("the node plugin setting its own desired role", patch(podBound, "own-edge-1", map[string]any{"metadata": map[string]any{
		"labels": map[string]any{holdfastv1.LabelDesiredRole: holdfastv1.RoleServer}}}), "nodes.holdfast.io", "metadata.labels["+holdfastv1.LabelDesiredRole+"]", "only the holdfast voter controller (system:serviceaccount:"+Namespace+":holdfast-controller-voters)")

	after, err := cs.CoreV1().Nodes().Get(ctx, "own-edge-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Annotations) > 0 && after.Annotations[holdfastv1.AnnotationFitness] != "" {
		t.Errorf("a refused write changed own-edge-2: %v", after.Annotations)
	}
	wh.stop(t)
}
