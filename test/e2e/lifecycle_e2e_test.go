//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// TestDeletedUnitsRuntimePodIsGarbageCollected: a Unit is deleted while its
// runtime runs, and nothing else is (no pod deleted by hand). The Unit keeps
// its name (the holdfast.io/runtime-stopped finalizer) while the controller
// retires its runtime: the runtime pod it owns is deleted, its kubelet stops
// it, its host ports are free again (nothing answers at its lease port), and
// once the runtime has provably stopped the Unit is gone, with nothing of it
// left for kube-controller-manager's garbage collector to find. A new unit
// placed on the same node takes the ports and holds its lease.
func TestDeletedUnitsRuntimePodIsGarbageCollected(t *testing.T) {
	d := newDrill(t, "gc", 0)
	b1 := d.held(1)
	pod, err := d.u.RuntimePod(d.ctx, b1.Epoch)
	if err != nil || pod == nil {
		t.Fatalf("the runtime pod of epoch %d: %v, %v", b1.Epoch, pod, err)
	}
	u, err := d.u.Get(d.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := world.Client.Delete(d.ctx, u); err != nil {
		t.Fatal(err)
	}
	deletedAt := time.Now()
	if err := d.u.WaitPodsGone(d.ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("runtime pod %s (uid %s) deleted and stopped %v after its Unit's deletion", pod.Name, pod.UID, time.Since(deletedAt).Round(100*time.Millisecond))
	if n, err := world.Nodes[b1.Node].RunningContainers(d.ctx, d.u.Key.Namespace, pod.Name, "runtime"); err != nil || n != 0 {
		t.Fatalf("%d runtime containers of %s still run on %s (%v)", n, pod.Name, b1.Node, err)
	}
	url := fmt.Sprintf("http://%s:9443%s", world.Nodes[b1.Node].IP, lease.Path)
	if err := poll(d.ctx, time.Minute, func() bool {
		_, err := leaseStatus(world.HTTPClient(), url)
		return err != nil && errors.Is(err, syscall.ECONNREFUSED)
	}); err != nil {
		t.Fatalf("something still answers at %s after the pod was collected", url)
	}
	// Retired once its node's plugin lists no container of it, or its
	// lease and margin have run out.
	if err := poll(d.ctx, 3*time.Minute, func() bool {
		err := world.Client.Get(d.ctx, client.ObjectKeyFromObject(u), u)
		return err != nil && client.IgnoreNotFound(err) == nil
	}); err != nil {
		t.Fatalf("the Unit is still there %v after its deletion: %+v", time.Since(deletedAt).Round(time.Second), u.ObjectMeta)
	}
	t.Logf("the Unit retired and gone %v after its deletion", time.Since(deletedAt).Round(100*time.Millisecond))
	var left corev1.PodList
	if err := world.Client.List(d.ctx, &left, client.InNamespace(d.u.Key.Namespace), client.MatchingLabels{holdfastv1.LabelUnit: d.u.Key.Name}); err != nil || len(left.Items) != 0 {
		t.Fatalf("pods of the deleted unit left behind: %d (%v)", len(left.Items), err)
	}
	next := newDrill(t, "gc-next", 0)
	if b := next.held(1); b.Node != b1.Node {
		t.Fatalf("the next unit held on %s, want the collected runtime's node %s", b.Node, b1.Node)
	}
}
