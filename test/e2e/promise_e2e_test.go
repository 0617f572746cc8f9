//go:build e2e

package e2e

import (
	"testing"
	"time"

	"k8s.io/client-go/util/retry"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/cluster"
	"github.com/holdfast-io/holdfast/test/devicesim"
	"github.com/holdfast-io/holdfast/test/e2e/scenario"
)

// L11 on real kubelets with a device that accepts every write: the lease of
// a Held unit is shortened from 48s to the floor, and at once, while the
// runtime still holds grants of 48s, its node is cut from the control
// network with its field link open. The controller judges the expiry on the
// recorded 48s, not the spec's 30s, so the device's own log shows the next
// epoch writing only after the old runtime's last write plus the margin.
func TestALeaseShortenedOnAHeldUnitThenCutKeepsOneWriter(t *testing.T) {
	d := newDrillWith(t, "promise-shortened", 48, func(o *scenario.UnitOptions) { o.Device = devicesim.Plain })
	b1, _ := d.heldPastHoldOff()
	d.editAvailability(func(a *holdfastv1.Availability) {
		a.LeaseDurationSeconds, a.RuntimeStartupGraceSeconds = 30, 30
	})
	if err := poll(d.ctx, time.Minute, func() bool {
		u, err := d.u.Get(d.ctx)
		if err != nil {
			return false
		}
		pr := u.Status.RuntimeBinding.Promise
		return pr != nil && pr.LeaseDurationSeconds == 48 && pr.ShorterLease != nil && pr.ShorterLease.LeaseDurationSeconds == 30
	}); err != nil {
		d.t.Fatal("the shorter lease was never recorded as pending beside the 48s one")
	}
	d.cutUntilTheNextEpochHolds(b1)
}

// L11 on real kubelets with a device that accepts every write: an Autonomy
// unit switched to Failover is handed over to a new runtime process (the
// Autonomy runtime, which never fences, is stopped first), and then the
// Failover runtime's node is cut from the control network with its field
// link open. The device's own log shows one writer at a time across both
// changes.
func TestAnAutonomyUnitSwitchedToFailoverThenCutKeepsOneWriter(t *testing.T) {
	d := newDrillWith(t, "promise-mode", 0, func(o *scenario.UnitOptions) {
		o.Device, o.Mode = devicesim.Plain, holdfastv1.Autonomy
	})
	b1, err := d.u.WaitBinding(d.ctx, 1, 3*time.Minute)
	if err != nil {
		d.t.Fatal(err)
	}
	d.writing(b1)
	d.editAvailability(func(a *holdfastv1.Availability) { a.Mode = holdfastv1.Failover })
	b2 := d.writing(d.laterEpochHeld(b1.Epoch, 3*time.Minute))
	if b2.Origin != holdfastv1.OriginHandOver || b2.Node != b1.Node {
		d.t.Fatalf("after the switch: %+v, want a hand-over on %s", b2, b1.Node)
	}
	d.turnsInOrder(b1.Epoch, b2.Epoch)
	d.pastHoldOff()
	d.cutUntilTheNextEpochHolds(b2)
}

// editAvailability changes the live Unit's availability as a person does.
func (d *drill) editAvailability(f func(*holdfastv1.Availability)) {
	d.t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := d.u.Get(d.ctx)
		if err != nil {
			return err
		}
		f(&u.Spec.Availability)
		return world.Client.Update(d.ctx, u)
	}); err != nil {
		d.t.Fatalf("editing the unit's availability: %v", err)
	}
}

// cutUntilTheNextEpochHolds cuts b's node from the control network (its
// field link open), waits until a later epoch holds on another node, heals,
// and reads the device's log: one writer at a time, the old runtime fenced
// and stopped.
func (d *drill) cutUntilTheNextEpochHolds(b *holdfastv1.RuntimeBinding) {
	d.t.Helper()
	cutAt := time.Now()
	heal := d.partition(world.Nodes[b.Node], cluster.Control)
	next := d.writing(d.laterEpochHeld(b.Epoch, 5*time.Minute))
	if next.Node == b.Node {
		d.t.Fatalf("epoch %d bound to the cut node %s", next.Epoch, next.Node)
	}
	d.failoverTime(cutAt, next)
	heal()
	d.oldRuntimeFenced(b.Node, b.Epoch)
	d.staleRuntimeStopped(b.Node, b.Epoch)
	d.oneWriter(b.Epoch, next.Epoch)
}

// turnsInOrder reads the device's log by true time and connection, each
// connection named by the runtime process seen holding it: writers never
// interleaved, and epoch new first wrote after epoch old's last write. A
// hand-over starts the new epoch once the old runtime is confirmed
// stopped, not after a margin.
func (d *drill) turnsInOrder(old, new int64) {
	d.t.Helper()
	o, n := d.twoTurns(old, new)
	if !n.First.After(o.Last) {
		d.t.Fatalf("epoch %d first wrote at %s on %s, not after epoch %d's last write at %s on %s", new, n.First.Format(time.StampMilli), n.Peer,
			old, o.Last.Format(time.StampMilli), o.Peer)
	}
	d.t.Logf("%s device: epoch %d last wrote at %s on %s, epoch %d first at %s on %s (%v later)", d.u.Device, old, o.Last.Format(time.StampMilli),
		o.Peer, new, n.First.Format(time.StampMilli), n.Peer, n.First.Sub(o.Last).Round(time.Millisecond))
}
