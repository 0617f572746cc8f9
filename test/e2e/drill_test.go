//go:build integration || e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/fence"
	"github.com/holdfast-io/holdfast/test/cluster"
	"github.com/holdfast-io/holdfast/test/devicesim"
	"github.com/holdfast-io/holdfast/test/e2e/scenario"
)

// The controller's Event reasons (controller/units) the drills expect.
const (
	evLeaseEstablished   = "LeaseEstablished"
	evLeaseExpired       = "LeaseExpired"
	evHold               = "Hold"
	evRebound            = "Rebound"
	evLeaseReestablished = "LeaseReestablished"
)

// drill is one drill's unit on the shared cluster.
type drill struct {
	t   *testing.T
	ctx context.Context
	u   *scenario.Unit
}

// newDrill creates the drill's unit with a lease of leaseSeconds, 0 for the
// installed grantor's floor (the least the webhook admits).
func newDrill(t *testing.T, name string, leaseSeconds int32) *drill {
	t.Helper()
	return newDrillWith(t, name, leaseSeconds, func(*scenario.UnitOptions) {})
}

// newDrillWith is newDrill with the unit's options changed by opt.
func newDrillWith(t *testing.T, name string, leaseSeconds int32, opt func(*scenario.UnitOptions)) *drill {
	t.Helper()
	// Long enough for a ten-minute partition and what follows it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	t.Cleanup(cancel)
	nodes := world.NodeNames
	o := scenario.UnitOptions{Namespace: "drill-" + name, Name: "kiln", LeaseSeconds: leaseSeconds,
		Primary: nodes[0], Targets: nodes[1:]}
	opt(&o)
	u, err := world.CreateUnit(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	d := &drill{t: t, ctx: ctx, u: u}
	t.Cleanup(func() {
		if t.Failed() {
			d.dump()
		}
		// The next drill's runtimes use the same host ports.
		if err := u.Delete(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return d
}

// within gives the drill's steps until dur from now, for a drill longer
// than newDrill's ten minutes.
func (d *drill) within(dur time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	d.t.Cleanup(cancel)
	d.ctx = ctx
}

func (d *drill) dump() {
	u, err := d.u.Get(d.ctx)
	if err == nil {
		d.t.Logf("unit status: %+v", u.Status)
		if b := u.Status.RuntimeBinding; b != nil {
			d.t.Logf("binding: %+v", *b)
		}
	}
	if evs, err := d.u.Events(d.ctx); err == nil {
		for _, e := range evs {
			d.t.Logf("event %s %s by %s: %s", e.EventTime.Format(time.RFC3339Nano), e.Reason, e.ReportingController, e.Note)
		}
	}
	if turns, err := d.u.Turns(d.ctx); turns != nil {
		d.t.Logf("%s device: turns %s (judgement: %v)", d.u.Device, scenario.TurnsString(turns), err)
	}
	if evs, err := d.u.PodEvents(d.ctx); err == nil {
		for _, e := range evs {
			d.t.Logf("pod event %s %s %s by %s: %s", scenario.EventTime(e).Format(time.RFC3339Nano), e.Regarding.Name, e.Reason, e.ReportingController, e.Note)
		}
	}
	d.t.Logf("units role: %d supervisor restarts", world.ControllerRestarts())
	for _, c := range world.ControllerList() {
		d.t.Logf("%s log tail:\n%s", c.Identity, world.ControllerLog(c, 20))
	}
	d.t.Logf("holdfast-scheduler (%d restarts) log tail:\n%s", world.SchedulerRestarts(), world.SchedulerLog(30))
}

// held waits until the unit's n-th binding (1 for the first) holds its
// lease and its runtime writes, and returns the binding.
func (d *drill) held(n int) *holdfastv1.RuntimeBinding {
	d.t.Helper()
	b, err := d.u.WaitHeld(d.ctx, n, 3*time.Minute)
	if err != nil {
		d.t.Fatal(err)
	}
	return d.writing(b)
}

// heldAt is held for the binding at epoch.
func (d *drill) heldAt(epoch int64) *holdfastv1.RuntimeBinding {
	d.t.Helper()
	b, err := d.u.WaitHeldAt(d.ctx, epoch, 3*time.Minute)
	if err != nil {
		d.t.Fatal(err)
	}
	return d.writing(b)
}

// writing waits until the binding's runtime has written to its device.
func (d *drill) writing(b *holdfastv1.RuntimeBinding) *holdfastv1.RuntimeBinding {
	d.t.Helper()
	if err := d.u.WaitWrites(d.ctx, b.Epoch, 5, time.Minute); err != nil {
		d.t.Fatal(err)
	}
	return b
}

// failsOverAcross holds the first binding on the primary, breaks its node,
// and asserts the automatic failover from the outside: the second binding
// holds on a target (never the broken node) with the expiry verdict
// SelfFenced, the Events LeaseEstablished, LeaseExpired, Hold, Rebound,
// LeaseReestablished in that order, the rebind and expiry metrics; once
// mended, the old runtime is fenced then stopped (L7) and the device saw one
// writer at a time, the second epoch first writing at least the margin
// after the first's last.
func (d *drill) failsOverAcross(breakNode, mendNode func(*cluster.Node) error) (b1, b2 *holdfastv1.RuntimeBinding) {
	d.t.Helper()
	b1 = d.held(1)
	node := world.Nodes[b1.Node]
	d.t.Logf("at the fault of %s the grantor's leader is %s", b1.Node, world.GrantorLeaderPlace(d.ctx))
	brokeAt := time.Now()
	if err := breakNode(node); err != nil {
		d.t.Fatal(err)
	}
	mended := false
	mend := func() {
		if !mended {
			mended = true
			if err := mendNode(node); err != nil {
				d.t.Error(err)
			}
		}
	}
	d.t.Cleanup(mend)
	b2 = d.held(2)
	d.failoverTime(brokeAt, b2)
	if b2.Node == b1.Node {
		d.t.Fatalf("epoch %d bound to the broken node %s", b2.Epoch, b2.Node)
	}
	if !slices.Contains(world.NodeNames[1:], b2.Node) {
		d.t.Fatalf("epoch %d bound to %s, not a target", b2.Epoch, b2.Node)
	}
	if b2.Expiry == nil || b2.Expiry.Epoch != b1.Epoch || b2.Expiry.Verdict != holdfastv1.VerdictSelfFenced {
		d.t.Fatalf("expiry record after the re-bind: %+v", b2.Expiry)
	}
	d.events(evLeaseEstablished, evLeaseExpired, evHold, evRebound, evLeaseReestablished)
	d.scheduledBy(b2.Epoch, b2.Node)
	d.metric("holdfast_unit_rebinds_total", map[string]string{"namespace": d.u.Key.Namespace, "unit": d.u.Key.Name, "path": "automatic"}, 1)
	d.metric("holdfast_unit_lease_expiries_total", map[string]string{"namespace": d.u.Key.Namespace, "unit": d.u.Key.Name, "verdict": "SelfFenced"}, 1)

	// Mended: the old runtime reconnects to its device fenced.
	mend()
	d.oldRuntimeFenced(b1.Node, b1.Epoch)
	d.staleRuntimeStopped(b1.Node, b1.Epoch)
	d.staleRuntimeQuiet(b1.Node, b1.Epoch, b2.Epoch)
	d.oneWriter(b1.Epoch, b2.Epoch)
	return b1, b2
}

// failoverTime logs how long after the fault the new binding was seen
// holding and writing (held's polls included), against lease + hold bound. A figure for
// the report, never asserted: docs/benchmarks.md has the distribution.
func (d *drill) failoverTime(faultAt time.Time, b2 *holdfastv1.RuntimeBinding) {
	u, err := d.u.Get(d.ctx)
	if err != nil {
		return
	}
	a := u.Spec.Availability
	d.t.Logf("failover: epoch %d holding and writing on %s %v after the fault (lease %v + hold bound %v = %v)",
		b2.Epoch, b2.Node, time.Since(faultAt).Round(100*time.Millisecond), a.LeaseDuration(), a.HoldBound(), a.LeaseDuration()+a.HoldBound())
}

// scheduledBy waits for holdfast-scheduler's Scheduled Event placing the
// runtime pod of epoch on node: the real scheduler, not the controller,
// chose the node.
func (d *drill) scheduledBy(epoch int64, node string) {
	d.t.Helper()
	pod := holdfastv1.RuntimePodName(d.u.Key.Name, epoch)
	var seen []string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		evs, _ := d.u.PodEvents(d.ctx)
		seen = seen[:0]
		for _, e := range evs {
			if e.Regarding.Name != pod {
				continue
			}
			seen = append(seen, e.ReportingController+" "+e.Reason+": "+e.Note)
			if e.Reason == "Scheduled" && e.ReportingController == holdfastv1.SchedulerName && strings.Contains(e.Note, " to "+node) {
				return
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	d.t.Fatalf("no Scheduled Event of %s placing %s on %s; its Events: %v", holdfastv1.SchedulerName, pod, node, seen)
}

// oneWriter asserts from the device's own log, read by true time and
// connection in either device mode (devicesim.Turns), that there was one
// writer at a time, and that the new epoch's first write came at least the
// re-bind margin after the old epoch's last request.
func (d *drill) oneWriter(old, new int64) {
	d.t.Helper()
	o, n := d.twoTurns(old, new)
	u, err := d.u.Get(d.ctx)
	if err != nil {
		d.t.Fatal(err)
	}
	if m := u.Spec.Availability.RebindMargin(); m < scenario.NeighbourQueueWindow {
		d.t.Fatalf("re-bind margin %v is shorter than the neighbour-queue window %v: the one-writer check cannot tell a late segment from a stale writer", m, scenario.NeighbourQueueWindow)
	}
	gap := n.First.Sub(o.Last)
	if gap < u.Spec.Availability.RebindMargin() {
		d.t.Fatalf("epoch %d first wrote %v after epoch %d's last request, inside the re-bind margin %v", new, gap, old, u.Spec.Availability.RebindMargin())
	}
	d.t.Logf("%s %s device: epoch %d wrote %d times until %s, epoch %d from %s (%v later)", d.u.Protocol, d.u.Device, old, o.Accepted,
		o.Last.Format(time.StampMilli), new, n.First.Format(time.StampMilli), gap.Round(time.Millisecond))
}

// twoTurns reads the device's log (devicesim.Turns), fails on any sign of
// two writers, and returns the turns of epochs old and new, each of which
// must have written.
func (d *drill) twoTurns(old, new int64) (o, n devicesim.Turn) {
	d.t.Helper()
	turns, err := d.u.Turns(d.ctx)
	if err != nil {
		d.t.Fatalf("two writers on the %s device: %v; turns %s", d.u.Device, err, scenario.TurnsString(turns))
	}
	o, okOld := devicesim.Of(turns, old)
	n, okNew := devicesim.Of(turns, new)
	if !okOld || !okNew || o.Accepted == 0 || n.Accepted == 0 {
		d.t.Fatalf("want writes of epochs %d and %d, the device saw %s", old, new, scenario.TurnsString(turns))
	}
	return o, n
}

// staleRuntimeStopped waits until the unit's runtime of epoch is stopped on
// node (L7: a runtime behind its unit's binding does not keep running once
// its node hears of the new binding). Two roads get there, and which comes
// first is a race on a busy machine: holdfast-node audits a
// StaleRuntimeStopped for it, or the controller's deletion of the old pod
// reaches the kubelet, which stops it (the pod gone or terminating, no
// container of it running).
func (d *drill) staleRuntimeStopped(node string, epoch int64) {
	d.t.Helper()
	var last []fence.Action
	pod := holdfastv1.RuntimePodName(d.u.Key.Name, epoch)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		acts, err := world.FenceActions(node)
		if err != nil {
			d.t.Fatal(err)
		}
		last = acts
		for _, a := range acts {
			if a.Reason == fence.ReasonStaleEpoch && a.Namespace == d.u.Key.Namespace && a.Unit == d.u.Key.Name && a.Epoch == epoch {
				if a.BindingEpoch <= epoch {
					d.t.Fatalf("holdfast-node on %s stopped epoch %d for a binding at %d: %+v", node, epoch, a.BindingEpoch, a)
				}
				d.t.Logf("holdfast-node on %s: %s %s at %s (binding epoch %d)", node, a.Reason, a.Pod, a.At.Format(time.RFC3339Nano), a.BindingEpoch)
				return
			}
		}
		p, err := d.u.RuntimePod(d.ctx, epoch)
		if err == nil && (p == nil || !p.DeletionTimestamp.IsZero()) {
			if n, err := world.Nodes[node].RunningContainers(d.ctx, d.u.Key.Namespace, pod, "runtime"); err == nil && n == 0 {
				d.t.Logf("the kubelet on %s stopped %s: its pod was deleted", node, pod)
				return
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	d.t.Fatalf("the epoch %d runtime on %s still runs a minute after the link came back; holdfast-node's fence audit: %+v", epoch, node, last)
}

// staleScans is how many chances to write a stale runtime that came back
// is watched for: scans of its own with its device connected again (200ms
// apart), and as many accepted writes of the current epoch on the device.
const staleScans = 25

// staleRuntimeQuiet waits, counting rather than sleeping, until the stale
// runtime of epoch on node has had its chances to write: it is gone
// (nothing answers at its node, or another epoch does), or it reports
// itself fenced with its device driver connected again and has scanned
// staleScans times since. Then, with current > 0, it waits for staleScans
// more accepted writes of the current epoch, so the device has served
// whatever reached it meanwhile. Nothing the stale runtime sent may be on
// the device: the caller's one-writer check reads the log after this, once
// node's kernel holds nothing unacknowledged for the device either.
func (d *drill) staleRuntimeQuiet(node string, epoch, current int64) {
	d.t.Helper()
	base := fmt.Sprintf("http://%s:", world.Nodes[node].IP)
	gone := func(err error) bool { return err != nil && errors.Is(err, syscall.ECONNREFUSED) }
	var last string
	from := -1.0
	err := poll(d.ctx, 2*time.Minute, func() bool {
		st, err := leaseStatus(world.HTTPClient(), base+"9443"+lease.Path)
		switch {
		case gone(err):
			last = "gone"
			return true
		case err != nil:
			last = err.Error()
			return false
		case st.Epoch != epoch:
			last = fmt.Sprintf("epoch %d answers there now", st.Epoch)
			return true
		case !st.Fenced:
			last = fmt.Sprintf("not fenced: %+v", st)
			return false
		}
		conn, err := scrape(world.HTTPClient(), base+"9441/metrics", "holdfast_runtime_driver_connected", map[string]string{"driver": "coupler"})
		if gone(err) {
			last = "gone"
			return true
		}
		scans, err2 := scrape(world.HTTPClient(), base+"9441/metrics", "holdfast_runtime_scan_duration_seconds", nil)
		if err != nil || err2 != nil || conn != 1 {
			last = fmt.Sprintf("fenced, driver connected %v (%v, %v)", conn, err, err2)
			return false
		}
		if from < 0 {
			from = scans
		}
		last = fmt.Sprintf("fenced, device connected, %v scans since it reconnected", scans-from)
		return scans-from >= staleScans
	})
	if err != nil {
		d.t.Fatalf("the stale epoch %d runtime on %s neither went away nor scanned %d times fenced with its device connected: %s", epoch, node, staleScans, last)
	}
	d.t.Logf("the stale epoch %d runtime on %s: %s", epoch, node, last)
	// Nor may its node's kernel still hold a request for the device: a
	// socket closed gracefully keeps retransmitting what was unanswered
	// after its process is gone, and delivers it once the link is back
	// (the runtime resets such a connection at its fence, L3).
	var held []string
	if err := poll(d.ctx, 2*time.Minute, func() bool {
		held, err = world.Nodes[node].Unsent(d.u.Plant.Address)
		if err != nil {
			d.t.Fatal(err)
		}
		return len(held) == 0
	}); err != nil {
		d.t.Fatalf("%s still holds unacknowledged data for the device at %s: %v", node, d.u.Plant.Address, held)
	}
	if current == 0 {
		return
	}
	turns, _ := d.u.Turns(d.ctx) // judged by the caller
	sofar, _ := devicesim.Of(turns, current)
	if err := d.u.WaitWrites(d.ctx, current, sofar.Accepted+staleScans, time.Minute); err != nil {
		d.t.Fatal(err)
	}
}

// events waits until the Unit's Events of the reasons in want, in time
// order, begin with want. Events of other reasons (the node plugin's
// StaleRuntimeStopped, for one) may come between.
func (d *drill) events(want ...string) {
	d.t.Helper()
	var got []string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		all, _ := d.u.EventReasons(d.ctx)
		got = slices.DeleteFunc(all, func(r string) bool { return !slices.Contains(want, r) })
		if len(got) >= len(want) && slices.Equal(got[:len(want)], want) {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	d.t.Fatalf("unit events %v, want them to begin %v", got, want)
}

// metric waits until some controller's metric with the labels reaches at
// least min.
func (d *drill) metric(name string, labels map[string]string, min float64) {
	d.t.Helper()
	var last string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var sum float64
		for _, c := range world.ControllerList() {
			v, err := scrape(world.HTTPClient(), c.Metrics+"/metrics", name, labels)
			if err != nil {
				last = err.Error()
				continue
			}
			sum += v
		}
		if sum >= min {
			return
		}
		last = fmt.Sprintf("%s%v = %v", name, labels, sum)
		time.Sleep(500 * time.Millisecond)
	}
	d.t.Fatalf("metric %s%v never reached %v: %s", name, labels, min, last)
}

// oldRuntimeFenced waits until the old epoch's runtime, reached at its
// node's address, reports itself fenced, or is gone (stopped by the node
// plugin, or its pod deleted).
func (d *drill) oldRuntimeFenced(node string, epoch int64) {
	d.t.Helper()
	url := fmt.Sprintf("http://%s:9443%s", world.Nodes[node].IP, lease.Path)
	var last string
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		st, err := leaseStatus(world.HTTPClient(), url)
		switch {
		case err != nil && errors.Is(err, syscall.ECONNREFUSED):
			return // nothing listens there: the runtime is gone
		case err != nil:
			last = err.Error()
		case st.Epoch != epoch:
			return // another runtime answers there now
		case st.Fenced:
			return
		default:
			last = fmt.Sprintf("%+v", st)
		}
		time.Sleep(500 * time.Millisecond)
	}
	d.t.Fatalf("the epoch %d runtime on %s never reported itself fenced: %s", epoch, node, last)
}

// heldPastHoldOff waits until epoch 1 holds its lease and the grantor's
// leader reads an expiry as a fence again (scenario.World.WaitHoldOffOver),
// so a fault the drill injects next is answered by a failover. It returns
// epoch 1's binding and the unit's availability.
func (d *drill) heldPastHoldOff() (*holdfastv1.RuntimeBinding, holdfastv1.Availability) {
	d.t.Helper()
	b1 := d.held(1)
	return b1, d.pastHoldOff()
}

// pastHoldOff waits until the grantor's leader reads an expiry of the unit
// as it is now as a fence again, and returns its availability.
func (d *drill) pastHoldOff() holdfastv1.Availability {
	d.t.Helper()
	u, err := d.u.Get(d.ctx)
	if err != nil {
		d.t.Fatal(err)
	}
	a := u.Spec.Availability
	if err := world.WaitHoldOffOver(d.ctx, a.LeaseDuration(), a.RebindMargin()); err != nil {
		d.t.Fatal(err)
	}
	return a
}

// partition cuts node from link l both ways and returns the heal, which
// heals once however often it is called (the drill's cleanup calls it too,
// a timer may) and returns when it healed.
func (d *drill) partition(node *cluster.Node, l cluster.Link) (heal func() time.Time) {
	d.t.Helper()
	if err := node.Partition(l); err != nil {
		d.t.Fatal(err)
	}
	var once sync.Once
	var at time.Time
	heal = func() time.Time {
		once.Do(func() {
			at = time.Now()
			if err := node.Heal(); err != nil {
				d.t.Error(err)
			}
		})
		return at
	}
	d.t.Cleanup(func() { heal() })
	return heal
}

// laterEpochHeld waits until an epoch after old holds its lease and
// returns its binding.
func (d *drill) laterEpochHeld(old int64, timeout time.Duration) *holdfastv1.RuntimeBinding {
	d.t.Helper()
	var bn *holdfastv1.RuntimeBinding
	if err := poll(d.ctx, timeout, func() bool {
		u, err := d.u.Get(d.ctx)
		if err != nil {
			return false
		}
		bn = u.Status.RuntimeBinding
		return bn != nil && bn.Epoch > old && bn.LeaseState == holdfastv1.LeaseHeld && bn.LeaseStateEpoch == bn.Epoch
	}); err != nil {
		d.t.Fatalf("no epoch after %d holds its lease: %+v", old, bn)
	}
	return bn
}

// poll is cluster.Poll for a condition that cannot fail.
func poll(ctx context.Context, timeout time.Duration, f func() bool) error {
	return cluster.Poll(ctx, timeout, func() (bool, error) { return f(), nil })
}
