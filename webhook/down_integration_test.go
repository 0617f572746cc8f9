//go:build integration

package webhook_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// With the webhook down (failurePolicy Fail), ordinary traffic and
// holdfast's own routine writes still go through, because the configuration
// never sends them; every guarded change is refused.
func TestNeverBricksTheCluster(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	k := env.Kubectl()
	member := map[string]string{holdfastv1.LabelEtcdRole: "true", holdfastv1.LabelVoterEligible: "true", holdfastv1.LabelDesiredRole: "server"}
	makeNode(t, "cp-1", member, map[string]string{holdfastv1.AnnotationFitness: `{"fsyncP99Millis":3}`}, true)
	heldSwapLease(t, "20261129T195900Z-cp-3-edge-7", "cp-3,edge-7")
	kilnCluster(t)
	boundUnit(t, ns, holdfastv1.LeaseHeld)
	k.MustRun(t, runtimePodYAML(ns, "kiln-1-runtime-e3", "kiln-1", "3", "  schedulerName: holdfast-scheduler\n"), "create", "-f", "-")

	stopServer()
	t.Cleanup(func() {
		if err := startServer(); err != nil {
			t.Fatalf("restarting the webhook server: %v", err)
		}
	})
	// Prove it is down: a guarded change fails calling it.
	res := k.Run(t, "", "label", "node", "cp-1", "--overwrite", "holdfast.io/desired-role=agent")
	refusal(t, "", res, `failed calling webhook "nodes.holdfast.io"`)

	// A kubelet heartbeat on a node that carries every guarded label.
	n := getNode(t, "cp-1")
	n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(time.Now())
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resourceQuantity("2")}
	if err := env.Client.Status().Update(ctx, n); err != nil {
		t.Errorf("a kubelet-style node status update with the webhook down: %v", err)
	}
	// Ordinary node changes: another label, a cordon, another taint.
	allowed(t, k.Run(t, "", "label", "node", "cp-1", "topology.kubernetes.io/zone=hall-2"))
	allowed(t, k.Run(t, "", "cordon", "cp-1"))
	allowed(t, k.Run(t, "", "taint", "node", "cp-1", "example.com/maintenance=true:NoSchedule"))
	// A new node registering without holdfast labels.
	allowed(t, k.Run(t, `{"apiVersion":"v1","kind":"Node","metadata":{"name":"edge-new","labels":{"kubernetes.io/hostname":"edge-new"}}}`, "create", "-f", "-"))
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-new"}})
	})
	// Ordinary pods, and the kubelet's status writes of a runtime pod.
	allowed(t, k.Run(t, fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"%s"},"spec":{"containers":[{"name":"web","image":"nginx"}]}}`, ns), "create", "-f", "-"))
	var pod corev1.Pod
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kiln-1-runtime-e3"}, &pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := env.Client.Status().Update(ctx, &pod); err != nil {
		t.Errorf("the kubelet's runtime pod status update with the webhook down: %v", err)
	}
	// Node heartbeat and leader-election Leases.
	for _, l := range []*coordinationv1.Lease{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-node-lease", Name: "cp-1"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("cp-1"), LeaseDurationSeconds: ptr.To[int32](40)}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-scheduler"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a"), LeaseDurationSeconds: ptr.To[int32](15)}},
	} {
		if err := env.Client.Create(ctx, l); err != nil {
			t.Errorf("creating Lease %s/%s with the webhook down: %v", l.Namespace, l.Name, err)
			continue
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), l) })
		l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		if err := env.Client.Update(ctx, l); err != nil {
			t.Errorf("renewing Lease %s/%s with the webhook down: %v", l.Namespace, l.Name, err)
		}
	}
	// holdfast's own routine writes: the voters role renews the swap Lease
	// and the grantor (units role) writes a Unit's status.
	voters := env.ClientAs(t, votersUser, nil)
	l := getSwapLease(t)
	l.Spec.RenewTime = &metav1.MicroTime{Time: epoch0}
	if err := voters.Update(ctx, l); err != nil {
		t.Errorf("the controller renewing the swap Lease with the webhook down: %v", err)
	}
	var u holdfastv1.Unit
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kiln-1"}, &u); err != nil {
		t.Fatal(err)
	}
	u.Status.RuntimeBinding.LastAcknowledgedRenewal = &metav1.MicroTime{Time: time.Now()}
	if err := env.ClientAs(t, controllerUser, nil).Status().Update(ctx, &u); err != nil {
		t.Errorf("the grantor's Unit status write with the webhook down: %v", err)
	}

	// Every guarded change is refused while it is down.
	for _, g := range []struct {
		name  string
		stdin string
		args  []string
	}{
		{"node desired-role", "", []string{"label", "node", "cp-1", "holdfast.io/desired-role-"}},
		{"node etcd label", "", []string{"label", "node", "cp-1", "node-role.kubernetes.io/etcd-"}},
		{"node holdfast annotation", "", []string{"annotate", "node", "cp-1", "holdfast.io/fitness-"}},
		{"out-of-service taint", "", []string{"taint", "node", "edge-9", "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"}},
		{"swap Lease holder", "", []string{"patch", "-n", "kube-system", "lease", "holdfast-voter-swap", "--type=merge", "-p", `{"spec":{"holderIdentity":"x"}}`}},
		{"unit failover", "", []string{"annotate", "-n", ns, "unit", "kiln-1", "holdfast.io/failover-to=edge-2"}},
		{"voter swap", secondSwap, []string{"create", "-f", "-"}},
		{"runtime pod", runtimePodYAML(ns, "kiln-1-runtime-e4", "kiln-1", "4", "  schedulerName: holdfast-scheduler\n"), []string{"create", "-f", "-"}},
	} {
		res := k.Run(t, g.stdin, g.args...)
		if res.ExitCode == 0 || !strings.Contains(res.Stderr, "failed calling webhook") {
			t.Errorf("%s with the webhook down: want a refusal for failing to call it, got\n%s", g.name, res)
		}
	}
}

func resourceQuantity(s string) resource.Quantity { return resource.MustParse(s) }
