//go:build e2e

package e2e

import (
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/units"
	"github.com/holdfast-io/holdfast/test/cluster"
	"github.com/holdfast-io/holdfast/test/devicesim"
	"github.com/holdfast-io/holdfast/test/e2e/scenario"
)

// warmReady waits until every standby due a warm pod runs a ready one and
// returns them by standby.
func (d *drill) warmReady() map[string]corev1.Pod {
	d.t.Helper()
	pods, err := d.u.WaitWarmReady(d.ctx, 3*time.Minute)
	if err != nil {
		d.t.Fatal(err)
	}
	for n, p := range pods {
		if p.Spec.NodeName != n {
			d.t.Fatalf("warm pod %s for standby %s runs on %q", p.Name, n, p.Spec.NodeName)
		}
	}
	return pods
}

// requestsFrom are the device's logged requests sent from node's field
// address, in the device's order.
func (d *drill) requestsFrom(node string) []devicesim.Write {
	d.t.Helper()
	log, err := d.u.Writes(d.ctx)
	if err != nil {
		d.t.Fatal(err)
	}
	var out []devicesim.Write
	for _, w := range log {
		if host, _, err := net.SplitHostPort(w.Peer); err == nil && host == world.Nodes[node].FieldIP {
			out = append(out, w)
		}
	}
	return out
}

// eventAt is the first Event of the unit with reason after from.
func (d *drill) eventAt(reason string, from time.Time) time.Time {
	d.t.Helper()
	evs, err := d.u.Events(d.ctx)
	if err != nil {
		d.t.Fatal(err)
	}
	for _, e := range evs {
		if at := scenario.EventTime(e); e.Reason == reason && !at.Before(from) {
			return at
		}
	}
	d.t.Fatalf("no %s Event after %s", reason, from.Format(time.RFC3339Nano))
	return time.Time{}
}

// promotedWarm asserts that binding b promoted the warm pod kept on its
// node: the binding names that pod and its UID, and the pod carries the
// binding's epoch.
func (d *drill) promotedWarm(b *holdfastv1.RuntimeBinding, warm map[string]corev1.Pod) corev1.Pod {
	d.t.Helper()
	w, ok := warm[b.Node]
	if !ok || b.Pod != w.Name || b.PodUID != string(w.UID) {
		d.t.Fatalf("epoch %d on %s does not name that standby's warm pod %s (%s): %+v", b.Epoch, b.Node, w.Name, w.UID, b)
	}
	var p corev1.Pod
	if err := world.Client.Get(d.ctx, client.ObjectKeyFromObject(&w), &p); err != nil {
		d.t.Fatal(err)
	}
	if p.UID != w.UID || p.Labels[holdfastv1.LabelEpoch] != strconv.FormatInt(b.Epoch, 10) {
		d.t.Fatalf("the promoted pod %s: UID %s labels %v, want %s at epoch %d", p.Name, p.UID, p.Labels, w.UID, b.Epoch)
	}
	return p
}

// A warm runtime on each standby reads the plain device (no owner-epoch
// block: only the lease keeps it silent) before any failure. The primary's
// control link is cut with its field path open, so the old runtime still
// reaches the device until it fences. The device's log, read by true time
// and peer, shows that no standby sent a request before the failover, that
// the promoted runtime's first request comes after its binding (recorded
// after the old lease + margin, before its label and its grants) and at
// least the margin after the old runtime's last, and that the standby not
// promoted sends none at all: never two writers.
func TestAWarmStandbyNeverWritesBeforeItsEpoch(t *testing.T) {
	d := newDrillWith(t, "warm-quiet", 0, func(o *scenario.UnitOptions) {
		o.Device, o.WarmStandby = devicesim.Plain, true
	})
	b1, _ := d.heldPastHoldOff()
	warm := d.warmReady()
	// Long enough for every warm runtime to have scanned many times.
	if err := d.u.WaitWrites(d.ctx, b1.Epoch, 25, time.Minute); err != nil {
		t.Fatal(err)
	}
	for n := range warm {
		if r := d.requestsFrom(n); len(r) > 0 {
			t.Fatalf("the warm runtime on %s sent %d requests before any failover, the first at %s", n, len(r), r[0].Time.Format(time.RFC3339Nano))
		}
	}
	cutAt := time.Now()
	heal := d.partition(world.Nodes[b1.Node], cluster.Control)
	b2 := d.held(2)
	d.failoverTime(cutAt, b2)
	d.promotedWarm(b2, warm)
	rebound := d.eventAt(evRebound, cutAt)
	granted := d.eventAt(evLeaseReestablished, cutAt)
	first := d.requestsFrom(b2.Node)
	if len(first) == 0 {
		t.Fatalf("no request from %s's field address at epoch %d", b2.Node, b2.Epoch)
	}
	// The Rebound Event goes out before the binding's write, which comes
	// before the label and every grant: nothing from the warm runtime may
	// precede it. (LeaseReestablished is the controller's note of the
	// acknowledgement, which the runtime's first write may precede.)
	if at := first[0].Time; at.Before(rebound) {
		t.Fatalf("the promoted runtime on %s first wrote at %s, before its binding (Rebound %s)",
			b2.Node, at.Format(time.RFC3339Nano), rebound.Format(time.RFC3339Nano))
	}
	t.Logf("epoch %d: Rebound %s, first grant acknowledged %s, first request %s",
		b2.Epoch, rebound.Format(time.StampMilli), granted.Format(time.StampMilli), first[0].Time.Format(time.StampMilli))
	heal()
	d.oldRuntimeFenced(b1.Node, b1.Epoch)
	d.staleRuntimeStopped(b1.Node, b1.Epoch)
	d.staleRuntimeQuiet(b1.Node, b1.Epoch, b2.Epoch)
	d.oneWriter(b1.Epoch, b2.Epoch)
	for n := range warm {
		if n == b2.Node {
			continue
		}
		if r := d.requestsFrom(n); len(r) > 0 {
			t.Fatalf("the warm runtime on %s, never promoted, sent %d requests", n, len(r))
		}
	}
}

// The failover creates no pod: the binding names the warm pod's UID, and no
// pod of the unit is created or scheduled between the cut and the new
// epoch's lease. Afterwards a warm pod that is lost (evicted) on a standby
// still due one is replaced by a ready one.
func TestAWarmStandbyIsPromotedWithoutAPod(t *testing.T) {
	d := newDrillWith(t, "warm-nopod", 0, func(o *scenario.UnitOptions) { o.WarmStandby = true })
	b1, _ := d.heldPastHoldOff()
	warm := d.warmReady()
	cutAt := time.Now()
	heal := d.partition(world.Nodes[b1.Node], cluster.Control)
	b2 := d.held(2)
	d.failoverTime(cutAt, b2)
	promoted := d.promotedWarm(b2, warm)
	d.events(evLeaseEstablished, evLeaseExpired, evHold, evRebound, evLeaseReestablished)
	granted := d.eventAt(evLeaseReestablished, cutAt)
	if p, err := d.u.RuntimePod(d.ctx, b2.Epoch); err != nil || p != nil {
		t.Fatalf("a runtime pod of epoch %d exists (%v): the promotion must create none", b2.Epoch, err)
	}
	var pods corev1.PodList
	if err := world.Client.List(d.ctx, &pods, client.InNamespace(d.u.Key.Namespace), client.MatchingLabels{holdfastv1.LabelUnit: d.u.Key.Name}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		// Creation times are whole seconds.
		if c := p.CreationTimestamp.Time; !c.Before(cutAt.Truncate(time.Second)) && !c.After(granted) {
			t.Fatalf("pod %s was created at %s, during the failover (cut %s, first grant %s)", p.Name, c, cutAt.Format(time.RFC3339Nano), granted.Format(time.RFC3339Nano))
		}
	}
	pevs, err := d.u.PodEvents(d.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range pevs {
		if at := scenario.EventTime(e); e.Reason == "Scheduled" && at.After(cutAt) && !at.After(granted) {
			t.Fatalf("pod %s was scheduled at %s, during the failover", e.Regarding.Name, at.Format(time.RFC3339Nano))
		}
	}
	if ph, err := d.u.FailoverPhases(d.ctx, cutAt, b1.Epoch, b2.Epoch); err != nil || !ph.Warm {
		t.Fatalf("phases (warm %v): %v", ph.Warm, err)
	} else {
		t.Logf("phases: %s", ph)
	}
	heal()
	d.oldRuntimeFenced(b1.Node, b1.Epoch)
	d.staleRuntimeStopped(b1.Node, b1.Epoch)
	d.staleRuntimeQuiet(b1.Node, b1.Epoch, b2.Epoch)
	d.oneWriter(b1.Epoch, b2.Epoch)

	// The standbys due a warm pod now: every target but the promoted
	// one's node. One is evicted and replaced.
	var due []string
	for _, n := range world.NodeNames[1:] {
		if n != b2.Node {
			due = append(due, n)
		}
	}
	after := d.warmReady()
	var on []string
	for n := range after {
		on = append(on, n)
	}
	slices.Sort(on)
	if !slices.Equal(on, due) {
		t.Fatalf("warm pods on %v after the failover, want %v (not on %s, which runs epoch %d in %s)", on, due, b2.Node, b2.Epoch, promoted.Name)
	}
	lost := after[due[0]]
	if err := world.Client.SubResource("eviction").Create(d.ctx, &lost, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Namespace: lost.Namespace, Name: lost.Name},
	}); err != nil {
		t.Fatalf("evicting warm pod %s: %v", lost.Name, err)
	}
	if err := poll(d.ctx, 3*time.Minute, func() bool {
		got, err := d.u.WarmPods(d.ctx)
		if err != nil {
			return false
		}
		p, ok := got[due[0]]
		return ok && p.UID != lost.UID && units.PodReady(&p)
	}); err != nil {
		t.Fatalf("warm pod %s evicted on %s was not replaced by a ready one", lost.Name, due[0])
	}
	u, err := d.u.WaitConditionStatus(d.ctx, holdfastv1.ConditionWarmStandby, metav1.ConditionTrue, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("WarmStandby after the replacement: %s", meta.FindStatusCondition(u.Status.Conditions, holdfastv1.ConditionWarmStandby).Message)
}
