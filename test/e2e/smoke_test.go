//go:build integration || e2e

package e2e

import (
	"slices"
	"testing"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// The smoke drill: it runs in make test (integration tag) on a cluster of
// two real kubelets, and in the matrix (make test-e2e).

// TestPrimaryNodeCutFailsOverToAStandby: the primary node's link goes down
// (it loses the apiserver, the grantor and the device at once). The lease
// expires, the Hold is recorded, the unit is re-bound with epoch 2 to a
// standby after the margin, the standby's runtime holds the lease and
// drives the device. When the link comes back the old runtime is fenced,
// then stopped (L7: by holdfast-node as stale, from its fence audit, or by
// the kubelet once the old pod's deletion reaches it), and the device saw
// one writer at a time.
func TestPrimaryNodeCutFailsOverToAStandby(t *testing.T) {
	d := newDrill(t, "node-cut", 10)
	b1 := d.held(1)
	node := world.Nodes[b1.Node]
	if err := node.Cut(); err != nil {
		t.Fatal(err)
	}
	mended := false
	mend := func() {
		if !mended {
			mended = true
			if err := node.Mend(); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(mend)
	b2 := d.held(2)
	if b2.Node == b1.Node {
		t.Fatalf("epoch 2 bound to the cut node %s", b2.Node)
	}
	if !slices.Contains(world.NodeNames[1:], b2.Node) {
		t.Fatalf("epoch 2 bound to %s, not a target", b2.Node)
	}
	if b2.Expiry == nil || b2.Expiry.Epoch != 1 || b2.Expiry.Verdict != holdfastv1.VerdictSelfFenced {
		t.Fatalf("expiry record after the re-bind: %+v", b2.Expiry)
	}
	d.events(evLeaseEstablished, evLeaseExpired, evHold, evRebound, evLeaseReestablished)
	d.metric("holdfast_unit_rebinds_total", map[string]string{"namespace": d.u.Key.Namespace, "unit": d.u.Key.Name, "path": "automatic"}, 1)
	d.metric("holdfast_unit_lease_expiries_total", map[string]string{"namespace": d.u.Key.Namespace, "unit": d.u.Key.Name, "verdict": "SelfFenced"}, 1)

	// The link comes back: the old runtime reconnects to its device fenced.
	mend()
	d.oldRuntimeFenced(b1.Node, 1)
	d.staleRuntimeStopped(b1.Node, 1)
	d.watchAfterMend()
	d.oneWriter(1, 2)
}
