//go:build e2e

package e2e

import (
	"syscall"
	"testing"
)

// TestRuntimeSIGSTOPFencesBeforeTheStandbyWrites: the primary's runtime
// process is frozen (its node, kubelet and link are fine). Renewals go
// unanswered; the grantor declares the lease expired, records the Hold and
// re-binds after the margin. When the frozen runtime wakes, past its
// deadline and its hold, it is fenced by its own clock before its next scan
// and writes nothing.
func TestRuntimeSIGSTOPFencesBeforeTheStandbyWrites(t *testing.T) {
	d := newDrill(t, "sigstop", 10)
	b1 := d.held(1)
	node := world.Nodes[b1.Node]
	pid, err := node.ContainerPID(d.ctx, d.u.Key.Namespace, b1.Pod, "runtime")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	continued := false
	cont := func() {
		if !continued {
			continued = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(cont)
	b2 := d.held(2)
	if b2.Node == b1.Node {
		t.Fatalf("epoch 2 bound to the node being left, %s", b2.Node)
	}
	d.events(evLeaseEstablished, evLeaseExpired, evHold, evRebound, evLeaseReestablished)
	cont()
	d.oldRuntimeFenced(b1.Node, 1)
	d.watchAfterMend()
	d.oneWriter(1, 2)
}
