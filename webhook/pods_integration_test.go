//go:build integration

package webhook_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func runtimePodYAML(ns, name, unit, epoch, extraSpec string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
  labels: {holdfast.io/unit: %s, holdfast.io/epoch: "%s"}
spec:
%s  containers: [{name: runtime, image: holdfast.local/unit-runtime:dev}]
`, name, ns, unit, epoch, extraSpec)
}

const bindingJSON = `{"apiVersion":"v1","kind":"Binding","metadata":{"name":"%s","namespace":"%s"},"target":{"apiVersion":"v1","kind":"Node","name":"%s"}}`

func TestRuntimePodsArePlacedByHoldfastScheduler(t *testing.T) {
	ns := env.Namespace(t)
	k := env.Kubectl()
	sched := "  schedulerName: holdfast-scheduler\n"

	res := k.Run(t, runtimePodYAML(ns, "kiln-1-runtime-e3", "kiln-1", "3", sched+"  nodeName: edge-2\n"), "create", "-f", "-")
	refusal(t, "runtime-pod-node-name", res, "spec.nodeName: Forbidden: must be empty: holdfast-scheduler places runtime pods")
	res = k.Run(t, runtimePodYAML(ns, "kiln-1-runtime-e3", "kiln-1", "3", ""), "create", "-f", "-")
	refusal(t, "runtime-pod-other-scheduler", res, "spec.schedulerName: Forbidden: must be holdfast-scheduler")
	res = k.Run(t, runtimePodYAML(ns, "kiln-1-runtime", "kiln-1", "3", sched), "create", "-f", "-")
	refusal(t, "runtime-pod-name", res, `metadata.name: Invalid value: "kiln-1-runtime": a runtime pod of unit kiln-1 at epoch 3 is named kiln-1-runtime-e3`)

	allowed(t, k.Run(t, runtimePodYAML(ns, "kiln-1-runtime-e3", "kiln-1", "3", sched), "create", "-f", "-"))
	res = k.Run(t, "", "label", "-n", ns, "pod", "kiln-1-runtime-e3", "--overwrite", "holdfast.io/epoch=4")
	refusal(t, "runtime-pod-epoch-relabelled", res, "metadata.labels[holdfast.io/epoch]: Forbidden: is set when the runtime pod is created and never changes")

	// Only holdfast-scheduler binds it.
	raw := "/api/v1/namespaces/" + ns + "/pods/kiln-1-runtime-e3/binding"
	res = k.Run(t, fmt.Sprintf(bindingJSON, "kiln-1-runtime-e3", ns, "edge-2"), "create", "--raw", raw, "-f", "-")
	refusal(t, "runtime-pod-bound-by-admin", res, "only holdfast-scheduler (system:serviceaccount:holdfast-system:holdfast-scheduler) binds it")
	var p corev1.Pod
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "kiln-1-runtime-e3"}, &p); err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" {
		t.Fatalf("a refused binding placed the pod on %s", p.Spec.NodeName)
	}
	allowed(t, k.Run(t, fmt.Sprintf(bindingJSON, "kiln-1-runtime-e3", ns, "edge-2"), "--as="+schedulerUser, "create", "--raw", raw, "-f", "-"))
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "kiln-1-runtime-e3"}, &p); err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "edge-2" {
		t.Fatalf("holdfast-scheduler's binding did not place the pod: nodeName %q", p.Spec.NodeName)
	}

	// Ordinary pods are none of the webhook's business.
	allowed(t, k.Run(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: web, namespace: %s}
spec: {nodeName: edge-2, containers: [{name: web, image: nginx}]}
`, ns), "create", "-f", "-"))
}
