//go:build integration

package webhook_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

func warmPodYAML(ns, unit, node, extraLabels string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
  labels: {holdfast.io/unit: %s, holdfast.io/warm-standby: %s%s}
spec:
  schedulerName: holdfast-scheduler
  containers: [{name: runtime, image: holdfast.local/unit-runtime:dev}]
`, holdfastv1.WarmPodName(unit, node), ns, unit, node, extraLabels)
}

// A warm standby pod through the real apiserver: created by the controller
// alone, with no epoch, on a designated standby; bound by holdfast-scheduler
// alone; labelled once, by the controller, with the epoch of the binding
// that records it, and never again.
func TestAWarmPodIsTheControllersAndTakesItsEpochOnceFromTheBinding(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	k := env.Kubectl()
	kilnCluster(t)
	boundUnit(t, ns, holdfastv1.LeaseHeld)
	k.MustRun(t, unitYAML(ns, "kiln-1", "    mode: Failover\n    warmStandby: true\n    targets: {nodes: [edge-2, edge-3]}"), "apply", "-f", "-")
	name := holdfastv1.WarmPodName("kiln-1", "edge-2")
	asCtl := "--as=" + controllerUser

	refusal(t, "", k.Run(t, warmPodYAML(ns, "kiln-1", "edge-2", ""), "create", "-f", "-"),
		"metadata.labels[holdfast.io/warm-standby]: Forbidden: only the holdfast controller")
	refusal(t, "", k.Run(t, warmPodYAML(ns, "kiln-1", "edge-2", `, holdfast.io/epoch: "4"`), asCtl, "create", "-f", "-"),
		"metadata.labels[holdfast.io/epoch]: Forbidden: a warm standby pod is created without an epoch")
	refusal(t, "", k.Run(t, warmPodYAML(ns, "kiln-1", "edge-9", ""), asCtl, "create", "-f", "-"),
		"metadata.labels[holdfast.io/warm-standby]: Forbidden: node edge-9 is not a designated standby of unit kiln-1")
	allowed(t, k.Run(t, warmPodYAML(ns, "kiln-1", "edge-2", ""), asCtl, "create", "-f", "-"))

	// Only holdfast-scheduler binds it, as any runtime pod.
	raw := "/api/v1/namespaces/" + ns + "/pods/" + name + "/binding"
	refusal(t, "", k.Run(t, fmt.Sprintf(bindingJSON, name, ns, "edge-2"), "create", "--raw", raw, "-f", "-"),
		"only holdfast-scheduler (system:serviceaccount:holdfast-system:holdfast-scheduler) binds it")

	// Its epoch: not before the binding records it, then once, by the
	// controller, to that epoch.
	refusal(t, "", k.Run(t, "", asCtl, "label", "-n", ns, "pod", name, "holdfast.io/epoch=4"),
		"metadata.labels[holdfast.io/epoch]: Forbidden: may be set only to the epoch of unit kiln-1's binding that records this pod")
	var pod corev1.Pod
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pod); err != nil {
		t.Fatal(err)
	}
	var u holdfastv1.Unit
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kiln-1"}, &u); err != nil {
		t.Fatal(err)
	}
	u.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{Epoch: 4, Node: "edge-2", Pod: name, PodUID: string(pod.UID), LeaseState: holdfastv1.LeasePending, LeaseStateEpoch: 4}
	if err := env.ClientAs(t, controllerUser, nil).Status().Update(ctx, &u); err != nil {
		t.Fatalf("the controller recording the promotion: %v", err)
	}
	refusal(t, "", k.Run(t, "", "label", "-n", ns, "pod", name, "holdfast.io/epoch=4"),
		"metadata.labels[holdfast.io/epoch]: Forbidden: only the holdfast controller")
	refusal(t, "", k.Run(t, "", asCtl, "label", "-n", ns, "pod", name, "holdfast.io/epoch=5"),
		"may be set only to the epoch of unit kiln-1's binding that records this pod")
	refusal(t, "", k.Run(t, "", asCtl, "label", "-n", ns, "pod", name, "--overwrite", "holdfast.io/epoch=4", "holdfast.io/warm-standby=edge-3"),
		"metadata.labels[holdfast.io/warm-standby]: Forbidden: is set when the runtime pod is created and never changes")
	allowed(t, k.Run(t, "", asCtl, "label", "-n", ns, "pod", name, "holdfast.io/epoch=4"))
	refusal(t, "", k.Run(t, "", asCtl, "label", "-n", ns, "pod", name, "--overwrite", "holdfast.io/epoch=5"),
		"metadata.labels[holdfast.io/epoch]: Forbidden: is set when the runtime pod is created and never changes")
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pod); err != nil {
		t.Fatal(err)
	}
	if pod.Labels[holdfastv1.LabelEpoch] != "4" || pod.Labels[holdfastv1.LabelWarmStandby] != "edge-2" {
		t.Fatalf("the promoted pod's labels are %v, want epoch 4 on edge-2", pod.Labels)
	}
}
