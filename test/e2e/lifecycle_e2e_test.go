//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/holdfast-io/holdfast/api/lease"
)

// TestDeletedUnitsRuntimePodIsGarbageCollected: a Unit is deleted while its
// runtime runs, and nothing else is (no finalizer, no pod deleted by hand).
// kube-controller-manager's garbage collector deletes the runtime pod the
// Unit owns, its kubelet stops it, its host ports are free again (nothing
// answers at its lease port) and a new unit placed on the same node takes
// them and holds its lease.
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
	t.Logf("runtime pod %s (uid %s) garbage-collected %v after its Unit's deletion", pod.Name, pod.UID, time.Since(deletedAt).Round(100*time.Millisecond))
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
	var gone bool
	if err := world.Client.Get(d.ctx, client.ObjectKeyFromObject(u), u); err != nil {
		gone = client.IgnoreNotFound(err) == nil
	}
	if !gone {
		t.Fatalf("the Unit is still there: %+v", u.ObjectMeta)
	}
	next := newDrill(t, "gc-next", 0)
	if b := next.held(1); b.Node != b1.Node {
		t.Fatalf("the next unit held on %s, want the collected runtime's node %s", b.Node, b1.Node)
	}
}
