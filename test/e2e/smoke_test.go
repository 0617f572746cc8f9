//go:build integration || e2e

package e2e

import (
	"testing"

	"github.com/holdfast-io/holdfast/test/cluster"
)

// The smoke drill: it runs in make test (integration tag) on a cluster of
// two real kubelets, and in the matrix (make test-e2e).

// TestPrimaryNodeCutFailsOverToAStandby: the primary node's link goes down
// (it loses the apiserver, the grantor and the device at once). The lease
// expires, the Hold is recorded, the unit is re-bound with a new epoch to a
// standby after the margin, the standby's runtime holds the lease and
// drives the device. When the link comes back the old runtime is fenced,
// then stopped (L7: by holdfast-node as stale, from its fence audit, or by
// the kubelet once the old pod's deletion reaches it), and the device saw
// one writer at a time.
func TestPrimaryNodeCutFailsOverToAStandby(t *testing.T) {
	d := newDrill(t, "node-cut", 0)
	d.failsOverAcross(func(n *cluster.Node) error { return n.Cut() }, func(n *cluster.Node) error { return n.Mend() })
}
