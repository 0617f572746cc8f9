//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/leadership"
	"github.com/holdfast-io/holdfast/test/cluster"
	"github.com/holdfast-io/holdfast/test/devicesim"
	"github.com/holdfast-io/holdfast/test/e2e/scenario"
)

// TestGrantorLeaderPartitionedFromTheRuntimesLetsOneWrite: the standby
// units-role replica is partitioned from every node (the runtimes) but not
// from the apiserver; then the leading replica loses the apiserver but not
// the runtimes. The election moves to the replica that cannot reach the
// runtime, while the old leader, standing down (design L6), still reaches
// it and goes on renewing: the runtime stays Held meanwhile, its last
// grantor the old leader. The new leader reads no expiry as a fence before
// its hold-off (its acquisition + stand-down + lease + margin), so the first
// Hold comes after it, when the old leader has stopped renewing and the
// runtime has fenced by its own clock. The new leader re-binds to the
// standbys it cannot reach either, each misses its start-up grace, and the
// unit is suspended; nothing but epoch 1 ever reaches the device. Healed,
// the current epoch's runtime takes its lease and the device saw one writer
// at a time, the new one at least the margin after epoch 1's last.
func TestGrantorLeaderPartitionedFromTheRuntimesLetsOneWrite(t *testing.T) {
	d := newDrill(t, "leader-partition", 0)
	b1, a := d.heldPastHoldOff()
	old, others, err := world.GrantorLeader(d.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(others) == 0 {
		t.Fatal("one units-role replica: no leader to move to")
	}
	next := others[0]
	var nodeIPs []string
	for _, n := range world.NodeNames {
		nodeIPs = append(nodeIPs, world.Nodes[n].IP)
	}
	healNext, err := world.IsolateController(d.ctx, next, nodeIPs, 0)
	if err != nil {
		t.Fatal(err)
	}
	healedNext := false
	t.Cleanup(func() {
		if !healedNext {
			_ = healNext()
		}
	})
	cutAt := time.Now()
	healOld, err := world.IsolateController(d.ctx, old, []string{cluster.HubIP}, cluster.APIServerPort)
	if err != nil {
		t.Fatal(err)
	}
	healedOld := false
	t.Cleanup(func() {
		if !healedOld {
			_ = healOld()
		}
	})
	t.Logf("%s (leading) cut from the apiserver, %s cut from the runtimes", old.Identity, next.Identity)

	// The election moves to the replica that cannot reach the runtime, and
	// the runtime is still renewed by the old leader standing down.
	var el coordinationv1.Lease
	if err := poll(d.ctx, 3*time.Minute, func() bool {
		if world.Client.Get(d.ctx, client.ObjectKey{Namespace: cluster.HoldfastNamespace, Name: scenario.GrantorElection}, &el) != nil {
			return false
		}
		return el.Spec.HolderIdentity != nil && strings.HasPrefix(*el.Spec.HolderIdentity, next.Identity+"_")
	}); err != nil {
		t.Fatalf("the election never moved to %s: %+v", next.Identity, el.Spec)
	}
	acquired := el.Spec.AcquireTime.Time
	st, err := leaseStatus(world.HTTPClient(), fmt.Sprintf("http://%s:9443%s", world.Nodes[b1.Node].IP, lease.Path))
	if err != nil || st.Epoch != b1.Epoch || st.State != lease.Held || st.Fenced || st.LastGrantor != old.Identity {
		t.Fatalf("when %s took the election the runtime reported %+v (%v): want Held, renewed by the old leader %s", next.Identity, st, err, old.Identity)
	}
	t.Logf("%s leads since %s (%v after the cuts); the runtime Held, last renewed by %s", next.Identity,
		acquired.Format(time.StampMilli), acquired.Sub(cutAt).Round(100*time.Millisecond), st.LastGrantor)

	// No expiry is read as a fence before the new leader's hold-off; the
	// standbys it cannot reach either are tried and the unit suspended.
	sus, err := d.u.WaitCondition(d.ctx, holdfastv1.ConditionFailoverSuspended, 6*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	holdOff := leadership.HoldOffDeadline(acquired, scenario.DefaultLeaseStandDown, a.LeaseDuration(), a.RebindMargin())
	evs, err := d.u.Events(d.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if at := scenario.EventTime(e); (e.Reason == evHold || e.Reason == evRebound) && at.Before(holdOff.Add(-time.Second)) {
			t.Fatalf("%s at %s, inside the new leader's hold-off (until %s): %s", e.Reason, at.Format(time.StampMilli), holdOff.Format(time.StampMilli), e.Note)
		}
	}
	c := meta.FindStatusCondition(sus.Status.Conditions, holdfastv1.ConditionFailoverSuspended)
	last := sus.Status.RuntimeBinding.Epoch
	t.Logf("suspended at epoch %d (%s: %s)", last, c.Reason, c.Message)
	turns, err := d.u.Turns(d.ctx)
	if err != nil {
		t.Fatalf("%v; turns %s", err, scenario.TurnsString(turns))
	}
	for _, tn := range turns {
		if tn.Writer.Epoch != b1.Epoch {
			t.Fatalf("%s reached the device while no runtime after epoch %d could be granted: turns %s", tn.Writer.Name, b1.Epoch, scenario.TurnsString(turns))
		}
	}

	// Healed: the new leader reaches the runtimes and the current epoch
	// takes its lease.
	healedOld, healedNext = true, true
	if err := healOld(); err != nil {
		t.Fatal(err)
	}
	if err := healNext(); err != nil {
		t.Fatal(err)
	}
	bn := d.heldAt(last)
	if o, _ := devicesim.Of(turns, b1.Epoch); o.Accepted == 0 {
		t.Fatalf("epoch %d never wrote: %s", b1.Epoch, scenario.TurnsString(turns))
	}
	d.oldRuntimeFenced(b1.Node, b1.Epoch)
	d.staleRuntimeQuiet(b1.Node, b1.Epoch, last)
	d.oneWriter(b1.Epoch, last)
	d.oneHolder(last, bn.Node)
}
