//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/leadership"
	plugin "github.com/holdfast-io/holdfast/kubectl-holdfast"
	"github.com/holdfast-io/holdfast/test/cluster"
	"github.com/holdfast-io/holdfast/test/devicesim"
	"github.com/holdfast-io/holdfast/test/e2e/scenario"
)

// TestAsymmetricPartitionFailsOverWithOneWriter: one direction of the
// primary's traffic is dropped with nftables inside its own network
// namespace, the other still flows.
//   - inbound dropped: the runtime never hears the grantor, but what it
//     sends still reaches the device on its open connection;
//   - outbound dropped: a renewal can still arrive on an open connection
//     but no acknowledgement leaves, so the grantor's acknowledged age only
//     grows (L1: the runtime dates its lease from that age, never from the
//     arrival, and fences no later than the grantor declares Expired).
//
// Either way the lease expires, the Hold is recorded, the next epoch holds
// on a standby after the margin, and when the direction is restored the old
// runtime is fenced and stopped and the device saw one writer at a time.
func TestAsymmetricPartitionFailsOverWithOneWriter(t *testing.T) {
	for _, dir := range []cluster.Direction{cluster.Inbound, cluster.Outbound} {
		t.Run(string(dir)+"-dropped", func(t *testing.T) {
			d := newDrill(t, "partition-"+string(dir), 0)
			d.failsOverAcross(func(n *cluster.Node) error { return n.Drop(dir) }, func(n *cluster.Node) error { return n.Heal() })
		})
	}
}

// runtimeView polls the runtime of epoch at node directly (no apiserver
// needed) and fails the drill if it ever leaves Held or fences within dur.
func (d *drill) runtimeView(node string, epoch int64, dur time.Duration) lease.Status {
	d.t.Helper()
	url := fmt.Sprintf("http://%s:9443%s", world.Nodes[node].IP, lease.Path)
	var st lease.Status
	var err error
	for end := time.Now().Add(dur); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if st, err = leaseStatus(world.HTTPClient(), url); err != nil {
			d.t.Fatalf("the epoch %d runtime on %s stopped answering: %v", epoch, node, err)
		}
		if st.Epoch != epoch || st.Fenced || st.State != lease.Held {
			d.t.Fatalf("the epoch %d runtime on %s left Held: %+v", epoch, node, st)
		}
	}
	return st
}

// oneHolder asserts that of every node's runtime, exactly one reports
// itself holding an unfenced lease, and that it is epoch at node.
func (d *drill) oneHolder(epoch int64, node string) {
	d.t.Helper()
	var holders []string
	for _, n := range world.NodeNames {
		st, err := leaseStatus(world.HTTPClient(), fmt.Sprintf("http://%s:9443%s", world.Nodes[n].IP, lease.Path))
		if err != nil {
			continue // nothing listens there
		}
		if st.State == lease.Held && !st.Fenced {
			holders = append(holders, fmt.Sprintf("%s epoch %d", n, st.Epoch))
			if n != node || st.Epoch != epoch {
				d.t.Fatalf("the runtime on %s holds a lease at epoch %d; want only epoch %d on %s", n, st.Epoch, epoch, node)
			}
		}
	}
	if len(holders) != 1 {
		d.t.Fatalf("runtimes holding a lease: %v; want exactly epoch %d on %s", holders, epoch, node)
	}
}

// TestAPIServerRestartWhileHoldingFencesNothing: the kube-apiserver stops
// (SIGTERM), stays down 5s and is started again while the first binding
// holds; on
// this machine it answers again about a minute after the stop. The grantor
// loses its election (its Lease cannot be renewed) and, by L6, keeps
// renewing what it holds through its stand-down (the shipped 90s, set for
// this drill; the other drills run 20s), so the
// runtime, watched directly at its node throughout, never leaves Held or
// fences, the same incarnation goes on, the binding is the same epoch Held
// afterwards with no lost-lease Event, the device kept taking its writes,
// and only that runtime holds a lease.
func TestAPIServerRestartWhileHoldingFencesNothing(t *testing.T) {
	if err := world.SetLeaseStandDown(context.Background(), leadership.DefaultLeaseStandDown); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := world.SetLeaseStandDown(context.Background(), scenario.DefaultLeaseStandDown); err != nil {
			t.Error(err)
		}
	})
	d := newDrill(t, "apiserver-holding", 0)
	b1 := d.held(1)
	before := d.runtimeView(b1.Node, b1.Epoch, time.Second)
	restarted := make(chan error, 1)
	stoppedAt := time.Now()
	go func() { restarted <- world.RestartAPIServer(d.ctx, 5*time.Second) }()
	var err error
	for back := false; !back; {
		d.runtimeView(b1.Node, b1.Epoch, time.Second)
		select {
		case err = <-restarted:
			back = true
		default:
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	backAt := time.Now()
	t.Logf("kube-apiserver back after %v; holdfast-scheduler restarts so far: %d", backAt.Sub(stoppedAt).Round(time.Millisecond), world.SchedulerRestarts())
	after := d.runtimeView(b1.Node, b1.Epoch, 15*time.Second)
	if after.Incarnation != before.Incarnation {
		t.Fatalf("the runtime was replaced across the restart: %+v, was %+v", after, before)
	}
	d.watchHeld(b1.Epoch, b1.Node, 5*time.Second)
	d.noFailoverEvents()
	d.writesSince(b1.Epoch, backAt)
	d.oneWriterSoFar()
	d.oneHolder(b1.Epoch, b1.Node)
}

// TestAPIServerRestartDuringARebindEndsWithOneHolder: the primary's link is
// cut; as soon as the controller has re-bound the unit to a new epoch the
// kube-apiserver stops, stays down 5s and is started again (about a minute
// away in all here). holdfast-scheduler, which exits on losing its election,
// is started again as its Deployment would be. The re-bind completes: the
// unit ends held at one epoch on a standby (a replacement whose start-up
// grace ran out while nobody could grant it may be judged StartupFailed, a
// verdict and never a fence, design L4), the device saw one writer at a
// time with the new epoch writing at least the margin after the first's last,
// and once the link is mended exactly one runtime in the cluster holds a
// lease.
func TestAPIServerRestartDuringARebindEndsWithOneHolder(t *testing.T) {
	d := newDrill(t, "apiserver-rebind", 0)
	b1 := d.held(1)
	node := world.Nodes[b1.Node]
	if err := node.Cut(); err != nil {
		t.Fatal(err)
	}
	mended := false
	t.Cleanup(func() {
		if !mended {
			_ = node.Mend()
		}
	})
	if _, err := d.u.WaitBinding(d.ctx, 2, 4*time.Minute); err != nil {
		t.Fatal(err)
	}
	stoppedAt := time.Now()
	if err := world.RestartAPIServer(d.ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("epoch %d authorised; kube-apiserver restarted, back after %v", d.u.Epoch(2), time.Since(stoppedAt).Round(time.Millisecond))
	bn := d.laterEpochHeld(b1.Epoch, 5*time.Minute)
	t.Logf("epoch %d holds on %s; holdfast-scheduler restarts so far: %d", bn.Epoch, bn.Node, world.SchedulerRestarts())
	if bn.Node == b1.Node || !contains(world.NodeNames[1:], bn.Node) {
		t.Fatalf("epoch %d bound to %s, not a standby", bn.Epoch, bn.Node)
	}
	if err := d.u.WaitWrites(d.ctx, bn.Epoch, 5, time.Minute); err != nil {
		t.Fatal(err)
	}
	reasons, _ := d.u.EventReasons(d.ctx)
	t.Logf("unit events: %v", reasons)
	mended = true
	if err := node.Mend(); err != nil {
		t.Fatal(err)
	}
	d.oldRuntimeFenced(b1.Node, b1.Epoch)
	d.staleRuntimeStopped(b1.Node, b1.Epoch)
	d.staleRuntimeQuiet(b1.Node, b1.Epoch, bn.Epoch)
	d.oneWriter(b1.Epoch, bn.Epoch)
	d.oneHolder(bn.Epoch, bn.Node)
}

// TestEveryStandbyFailingSuspendsFailover: the primary's link is cut and
// both standbys run their runtimes but the grantor cannot reach them (their
// lease port dropped inbound, and the grantor's replicas cut from it
// wherever they run: installed by the chart, on the standbys themselves,
// scenario.World.DropLeasePort). Each is tried once and misses its start-up
// grace (StartupFailed, never a fence); with every free standby tried the
// controller suspends (L5): FailoverSuspended True (AllTargetsTried), a
// BudgetExhausted Event, holdfast_unit_budget_exhausted 1, and no fourth
// binding. No writer touches the device after the first binding's fence,
// not even when the
// primary's link comes back. Suspension never stops recovery: once the
// standbys are reachable the current runtime's first acknowledged renewal
// clears it.
func TestEveryStandbyFailingSuspendsFailover(t *testing.T) {
	d := newDrill(t, "suspension", 0)
	b1 := d.held(1)
	standbys := world.NodeNames[1:]
	heal, err := world.DropLeasePort(d.ctx, standbys, 9443)
	healStandbys := func() {
		if err := heal(); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(healStandbys)
	if err != nil {
		t.Fatal(err)
	}
	primary := world.Nodes[b1.Node]
	if err := primary.Cut(); err != nil {
		t.Fatal(err)
	}
	mended := false
	t.Cleanup(func() {
		if !mended {
			_ = primary.Mend()
		}
	})

	u, err := d.u.WaitCondition(d.ctx, holdfastv1.ConditionFailoverSuspended, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(u.Status.Conditions, holdfastv1.ConditionFailoverSuspended)
	if c.Reason != holdfastv1.ReasonAllTargetsTried {
		t.Fatalf("FailoverSuspended: %+v", c)
	}
	bd := u.Status.RuntimeBinding
	last := bd.Epoch
	if last <= b1.Epoch {
		t.Fatalf("suspended at epoch %d, not above the first binding's %d: %+v", last, b1.Epoch, bd)
	}
	for _, n := range standbys {
		if !contains(bd.UnsettledRebinds, n) {
			t.Fatalf("unsettledRebinds %v lacks the tried standby %s", bd.UnsettledRebinds, n)
		}
	}
	d.events(evLeaseEstablished, evLeaseExpired, evHold, evRebound, evLeaseExpired, evRebound, evLeaseExpired, "BudgetExhausted")
	d.metric("holdfast_unit_budget_exhausted", map[string]string{"namespace": d.u.Key.Namespace, "unit": d.u.Key.Name}, 1)
	d.metric("holdfast_unit_budget_exhaustions_total", map[string]string{"namespace": d.u.Key.Namespace, "unit": d.u.Key.Name}, 1)
	d.metric("holdfast_unit_lease_expiries_total", map[string]string{"namespace": d.u.Key.Namespace, "unit": d.u.Key.Name, "verdict": "StartupFailed"}, float64(len(standbys)))

	// Suspended, nothing more is re-bound; the fenced first runtime comes
	// back to its device and must not write.
	mended = true
	if err := primary.Mend(); err != nil {
		t.Fatal(err)
	}
	d.oldRuntimeFenced(b1.Node, b1.Epoch)
	d.staleRuntimeQuiet(b1.Node, b1.Epoch, 0)
	if u, err = d.u.Get(d.ctx); err != nil {
		t.Fatal(err)
	}
	if u.Status.RuntimeBinding.Epoch != last {
		t.Fatalf("re-bound while suspended: %+v", u.Status.RuntimeBinding)
	}
	fence := b1ExpiryFence(t, d, b1.Epoch)
	turns, err := d.u.Turns(d.ctx)
	if err != nil {
		t.Fatalf("%v; turns %s", err, scenario.TurnsString(turns))
	}
	// Suspended, no higher epoch ever wrote, so the device (either mode)
	// would take whatever the first epoch sent. Its runtime reset every
	// device connection with an unanswered write when it fenced (runtime
	// L3), and its link was down from the cut until long after the fence
	// (segments in the neighbour queue are dropped within
	// NeighbourQueueWindow): not one request of the first epoch may reach
	// the device after the fence, accepted or not, and no other epoch may
	// have sent any.
	for _, tn := range turns {
		if tn.Writer.Epoch != b1.Epoch {
			t.Fatalf("the device took requests of %s while the unit was suspended: turns %s", tn.Writer.Name, scenario.TurnsString(turns))
		}
		if tn.Last.After(fence) {
			t.Fatalf("epoch %d sent a request at %s, after its fence (%s): a fenced runtime's request reached the device; turns %s",
				b1.Epoch, tn.Last.Format(time.RFC3339Nano), fence.Format(time.RFC3339Nano), scenario.TurnsString(turns))
		}
	}

	// Recovery: the standbys become reachable; the current pod's first
	// acknowledged renewal lifts the suspension.
	healStandbys()
	d.heldAt(last)
	if u, err = d.u.Get(d.ctx); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(u.Status.Conditions, holdfastv1.ConditionFailoverSuspended); c == nil || c.Status != "False" {
		t.Fatalf("FailoverSuspended after the runtime took its lease: %+v", c)
	}
	d.metric("holdfast_unit_lease_established_total", map[string]string{"namespace": d.u.Key.Namespace, "unit": d.u.Key.Name}, 2)
	d.oneWriter(b1.Epoch, last)
}

// b1ExpiryFence is when the runtime at epoch had certainly fenced: its
// lease's expiry as the grantor recorded it plus the hold bound (L1, L3).
func b1ExpiryFence(t *testing.T, d *drill, epoch int64) time.Time {
	t.Helper()
	var lost time.Time
	evs, err := d.u.Events(d.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Reason == evLeaseExpired && strings.Contains(e.Note, fmt.Sprintf("epoch %d ", epoch)) {
			lost = scenario.EventTime(e)
			break
		}
	}
	if lost.IsZero() {
		t.Fatalf("no LeaseExpired Event for epoch %d", epoch)
	}
	u, err := d.u.Get(d.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return lost.Add(u.Spec.Availability.HoldBound())
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestManualFailoverThroughKubectlHoldfast: the primary's link is cut with
// a 30s lease, so the binding still reads Held. A person runs the real
// `kubectl holdfast failover` (kubectl finding the plugin on its PATH):
// without --confirm-fenced it is refused (exit 1) with the webhook's reason
// and the Unit is unchanged; with --confirm-fenced and --wait it proceeds
// (exit 0): a new epoch on the named node, origin Manual, a ManualRebind Event,
// the manual re-bind metric. The link is mended only after the old
// runtime's own lease and hold have run out (a confirmed fence stays a
// fence), and the device saw one writer at a time.
func TestManualFailoverThroughKubectlHoldfast(t *testing.T) {
	d := newDrill(t, "manual", 30)
	b1 := d.held(1)
	pluginBin, err := world.Binary("cmd/kubectl-holdfast")
	if err != nil {
		t.Fatal(err)
	}
	dirs := []string{filepath.Dir(pluginBin)}
	target := world.NodeNames[len(world.NodeNames)-1]
	primary := world.Nodes[b1.Node]
	cutAt := time.Now()
	if err := primary.Cut(); err != nil {
		t.Fatal(err)
	}
	mended := false
	t.Cleanup(func() {
		if !mended {
			_ = primary.Mend()
		}
	})
	ns := d.u.Key.Namespace
	r, err := world.Kubectl(d.ctx, "", dirs, "holdfast", "failover", "-n", ns, d.u.Key.Name, "--to", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("without --confirm-fenced: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	if r.Code != plugin.ExitRefused {
		t.Fatalf("kubectl holdfast failover without --confirm-fenced: exit %d, want %d (refused)", r.Code, plugin.ExitRefused)
	}
	for _, want := range []string{"still holds its control lease", holdfastv1.AnnotationFailoverConfirmFenced} {
		if !strings.Contains(r.Stderr, want) {
			t.Fatalf("the refusal does not say %q: %s", want, r.Stderr)
		}
	}
	u, err := d.u.Get(d.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := u.Annotations[holdfastv1.AnnotationFailoverTo]; ok || u.Status.RuntimeBinding.Epoch != b1.Epoch {
		t.Fatalf("the refused request changed the unit: annotations %v, binding %+v", u.Annotations, u.Status.RuntimeBinding)
	}

	r, err = world.Kubectl(d.ctx, "", dirs, "holdfast", "failover", "-n", ns, d.u.Key.Name, "--to", target,
		"--confirm-fenced", "link of "+b1.Node+" pulled at the switch", "--wait", "--timeout", "3m")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("with --confirm-fenced: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	if r.Code != plugin.ExitOK {
		t.Fatalf("kubectl holdfast failover --confirm-fenced --wait: exit %d, want %d", r.Code, plugin.ExitOK)
	}
	b2 := d.held(2)
	if b2.Node != target || b2.Origin != holdfastv1.OriginManual {
		t.Fatalf("binding after the manual failover: %+v, want the next epoch on %s, origin Manual", b2, target)
	}
	d.events(evLeaseEstablished, "ManualRebind")
	d.metric("holdfast_unit_rebinds_total", map[string]string{"namespace": ns, "unit": d.u.Key.Name, "path": "manual"}, 1)

	// The old runtime fences on its own clock: its lease and hold bound
	// after the last acknowledged renewal (at most cutAt).
	hold := holdfastv1.HoldBound(30 * time.Second)
	if wait := time.Until(cutAt.Add(30*time.Second + hold + 2*time.Second)); wait > 0 {
		time.Sleep(wait) // the cut runtime cannot be read: wait out its lease and hold bound
	}
	mended = true
	if err := primary.Mend(); err != nil {
		t.Fatal(err)
	}
	d.oldRuntimeFenced(b1.Node, b1.Epoch)
	d.staleRuntimeStopped(b1.Node, b1.Epoch)
	d.staleRuntimeQuiet(b1.Node, b1.Epoch, b2.Epoch)
	turns, err := d.u.Turns(d.ctx)
	if err != nil {
		t.Fatalf("two writers on the device: %v; turns %s", err, scenario.TurnsString(turns))
	}
	if t2, ok := devicesim.Of(turns, b2.Epoch); !ok || t2.Accepted == 0 {
		t.Fatalf("epoch %d never wrote: turns %s", b2.Epoch, scenario.TurnsString(turns))
	}
	d.oneHolder(b2.Epoch, target)
}

// TestCouplerUnreachableAtStartupHoldsTheLeaseAndWritesLater: the unit's
// device (its Modbus coupler) is down when the runtime starts. Start-up
// never waits on the network (L8): the runtime opens its lease endpoint and
// takes its lease at its first epoch all the same, and holds it, never
// fencing, while the device stays away; nothing is written anywhere. When the
// device comes up the failed dial, still watched, is retried and the runtime
// drives it; no
// lease was lost on the way and the device saw one writer.
func TestCouplerUnreachableAtStartupHoldsTheLeaseAndWritesLater(t *testing.T) {
	d := newDrillWith(t, "coupler-down", 0, func(o *scenario.UnitOptions) { o.DeviceDown = true })
	b1, err := d.u.WaitHeld(d.ctx, 1, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	d.runtimeView(b1.Node, b1.Epoch, 20*time.Second)
	d.watchHeld(b1.Epoch, b1.Node, 3*time.Second)
	startedAt := time.Now()
	if err := d.u.StartDevice(d.ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.u.WaitWrites(d.ctx, b1.Epoch, 5, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("epoch %d drove the device %v after it came up", b1.Epoch, time.Since(startedAt).Round(time.Millisecond))
	d.watchHeld(b1.Epoch, b1.Node, 3*time.Second)
	d.noFailoverEvents()
	d.oneWriterSoFar()
}
