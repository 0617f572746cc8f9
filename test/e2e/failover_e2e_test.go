//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/cluster"
	"github.com/holdfast-io/holdfast/test/devicesim"
	"github.com/holdfast-io/holdfast/test/e2e/scenario"
)

// TestRuntimeSIGSTOPFencesBeforeTheStandbyWrites: the primary's runtime
// process is frozen (its node, kubelet and link are fine). Renewals go
// unanswered; the grantor declares the lease expired, records the Hold and
// re-binds after the margin. When the frozen runtime wakes, past its
// deadline and its hold, it is fenced by its own clock before its next scan
// and writes nothing.
func TestRuntimeSIGSTOPFencesBeforeTheStandbyWrites(t *testing.T) {
	d := newDrill(t, "sigstop", 0)
	b1 := d.held(1)
	node := world.Nodes[b1.Node]
	pid, err := node.ContainerPID(d.ctx, d.u.Key.Namespace, b1.Pod, "runtime")
	if err != nil {
		t.Fatal(err)
	}
	stoppedAt := time.Now()
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
	d.failoverTime(stoppedAt, b2)
	if b2.Node == b1.Node {
		t.Fatalf("epoch %d bound to the node being left, %s", b2.Epoch, b2.Node)
	}
	d.events(evLeaseEstablished, evLeaseExpired, evHold, evRebound, evLeaseReestablished)
	cont()
	d.oldRuntimeFenced(b1.Node, b1.Epoch)
	d.staleRuntimeQuiet(b1.Node, b1.Epoch, b2.Epoch)
	d.oneWriter(b1.Epoch, b2.Epoch)
}

// watchHeld fails the drill if, for the next d, the binding leaves epoch
// or Held, or the runtime's own view (its lease endpoint at its node)
// leaves Held or reports itself fenced. It returns the runtime's last view.
func (d *drill) watchHeld(epoch int64, node string, dur time.Duration) lease.Status {
	d.t.Helper()
	url := fmt.Sprintf("http://%s:9443%s", world.Nodes[node].IP, lease.Path)
	var st lease.Status
	end := time.Now().Add(dur)
	for time.Now().Before(end) {
		b, err := d.u.Get(d.ctx)
		if err != nil {
			d.t.Fatal(err)
		}
		if bd := b.Status.RuntimeBinding; bd == nil || bd.Epoch != epoch || bd.LeaseState != holdfastv1.LeaseHeld {
			d.t.Fatalf("the binding left epoch %d Held: %+v", epoch, bd)
		}
		if st, err = leaseStatus(world.HTTPClient(), url); err != nil {
			d.t.Fatalf("the runtime stopped answering: %v", err)
		}
		if st.Fenced || st.State != lease.Held {
			d.t.Fatalf("the runtime left Held: %+v", st)
		}
		time.Sleep(time.Second)
	}
	return st
}

// noFailoverEvents fails the drill on any Event of a lost lease.
func (d *drill) noFailoverEvents() {
	d.t.Helper()
	reasons, err := d.u.EventReasons(d.ctx)
	if err != nil {
		d.t.Fatal(err)
	}
	for _, r := range reasons {
		if r == evLeaseExpired || r == evHold || r == evRebound {
			d.t.Fatalf("unit events %v: the lease was lost", reasons)
		}
	}
}

// writesSince asserts the device took epoch's writes after t.
func (d *drill) writesSince(epoch int64, t time.Time) {
	d.t.Helper()
	log, err := d.u.Writes(d.ctx)
	if err != nil {
		d.t.Fatal(err)
	}
	for _, w := range devicesim.ByEpoch(log)[epoch] {
		if w.Time.After(t) {
			return
		}
	}
	d.t.Fatalf("no accepted write of epoch %d after %s: the runtime stopped driving", epoch, t.Format(time.RFC3339Nano))
}

// TestKubeletStoppedKeepsTheLease: the primary's kubelet stops; its
// runtime keeps running and the grantor reaches it over the node's network.
// A stopped kubelet is no lost lease: the binding stays at its epoch and
// Held for three lease durations, the runtime never holds or fences, and the
// device keeps taking its writes. The kubelet starts again and the same
// runtime goes on.
func TestKubeletStoppedKeepsTheLease(t *testing.T) {
	d := newDrill(t, "kubelet-stopped", 0)
	b1 := d.held(1)
	lease := time.Duration(world.LeaseFloor()) * time.Second
	node := world.Nodes[b1.Node]
	stoppedAt := time.Now()
	node.StopKubelet()
	restarted := false
	restart := func() {
		if !restarted {
			restarted = true
			if err := node.StartKubelet(); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(restart)
	st := d.watchHeld(b1.Epoch, b1.Node, 3*lease)
	d.noFailoverEvents()
	d.writesSince(b1.Epoch, stoppedAt.Add(2*lease))
	restart()
	after := d.watchHeld(b1.Epoch, b1.Node, lease)
	if after.Incarnation != st.Incarnation {
		t.Fatalf("the kubelet's return replaced the runtime: %+v, was %+v", after, st)
	}
	d.noFailoverEvents()
}

// TestGrantorLeaderSIGKILLedNeverFences: the holdfast-controller leading
// the grantor is SIGKILLed. The other replica takes the election and renews
// from its cache before the runtime's lease runs out: the runtime never
// holds or fences, no lease is lost, and the device keeps taking epoch 1's
// writes. The killed replica is started again for the next drill.
func TestGrantorLeaderSIGKILLedNeverFences(t *testing.T) {
	d := newDrill(t, "leader-kill", 10)
	b1 := d.held(1)
	var el coordinationv1.Lease
	if err := world.Client.Get(d.ctx, client.ObjectKey{Namespace: cluster.HoldfastNamespace, Name: "holdfast-grantor"}, &el); err != nil {
		t.Fatal(err)
	}
	leader := -1
	ctls := world.ControllerList()
	for i, c := range ctls {
		if el.Spec.HolderIdentity != nil && strings.HasPrefix(*el.Spec.HolderIdentity, c.Identity+"_") {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatalf("no controller holds the grantor's election: %v", el.Spec.HolderIdentity)
	}
	other := ctls[1-leader].Identity
	killedAt := time.Now()
	world.KillController(leader)
	t.Cleanup(func() {
		if err := world.RestartController(context.Background(), leader); err != nil {
			t.Error(err)
		}
	})
	st := d.watchHeld(1, b1.Node, 30*time.Second)
	if st.LastGrantor != other {
		t.Fatalf("the runtime's last grantor is %q, want the other replica %s", st.LastGrantor, other)
	}
	d.noFailoverEvents()
	d.writesSince(1, killedAt.Add(20*time.Second))
	d.oneWriterSoFar()
}

// oneWriterSoFar asserts the device's log holds no two writers.
func (d *drill) oneWriterSoFar() {
	d.t.Helper()
	log, err := d.u.Writes(d.ctx)
	if err != nil {
		d.t.Fatal(err)
	}
	if err := scenario.CheckNoTwoWriters(log); err != nil {
		d.t.Fatal(err)
	}
}
