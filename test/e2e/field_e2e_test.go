//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/cluster"
	"github.com/holdfast-io/holdfast/test/e2e/scenario"
)

// driverGrace is the drill's runtime's --driver-grace: how long every field
// driver may be gone before its readiness fails.
const driverGrace = 15 * time.Second

// fieldLeases is how long the field-only partition lasts, in leases: past
// the driver grace, and long enough that a lease the partition touched would
// have expired and been failed over.
const fieldLeases = 3

// TestFieldPartitionKeepsTheLeaseAndShowsTheDeviceLost: the primary's node
// is cut from the field network only (cluster.Node.Partition(Field)); its
// control link stays up. The runtime keeps its lease (the grantor reaches
// it: nothing to fail over, and a standby could not reach a device the
// plant's field network lost either) and loses its device. What the
// operator sees: the runtime's coupler driver disconnected
// (holdfast_runtime_driver_connected 0) at once, and once every driver has
// been gone its --driver-grace, its readiness NOT_SERVING (L9), so its pod
// goes NotReady and the Unit's RuntimeReady False (PodNotReady) while the
// binding stays
// epoch 1, Held, with no Hold and no lost-lease Event: a lease held is never
// a Hold. Nothing reaches the device. Healed, the same runtime reconnects,
// is ready again and drives the device, and the device saw one writer.
func TestFieldPartitionKeepsTheLeaseAndShowsTheDeviceLost(t *testing.T) {
	d := newDrillWith(t, "field-cut", 0, func(o *scenario.UnitOptions) {
		o.RuntimeArgs = []string{"--driver-grace=" + driverGrace.String()}
	})
	b1 := d.held(1)
	node := world.Nodes[b1.Node]
	before := d.runtimeView(b1.Node, b1.Epoch, time.Second)
	metrics := fmt.Sprintf("http://%s:9441/metrics", node.IP)
	cutAt := time.Now()
	heal := d.partition(node, cluster.Field)

	// The operator's view while the device is away.
	var lost time.Duration
	if err := poll(d.ctx, time.Minute, func() bool {
		v, err := scrape(world.HTTPClient(), metrics, "holdfast_runtime_driver_connected", map[string]string{"driver": "coupler"})
		lost = time.Since(cutAt)
		return err == nil && v == 0
	}); err != nil {
		t.Fatalf("the runtime never reported its coupler disconnected")
	}
	u, err := d.u.WaitConditionStatus(d.ctx, holdfastv1.ConditionRuntimeReady, metav1.ConditionFalse, driverGrace+time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	rr := meta.FindStatusCondition(u.Status.Conditions, holdfastv1.ConditionRuntimeReady)
	notReady := time.Since(cutAt)
	if rr.Reason != holdfastv1.ReasonPodNotReady || !strings.Contains(rr.Message, b1.Pod) {
		t.Fatalf("RuntimeReady while the device is away: %+v, want False PodNotReady naming %s", rr, b1.Pod)
	}
	pod, err := d.u.RuntimePod(d.ctx, b1.Epoch)
	if err != nil || pod == nil || podCondition(pod, corev1.PodReady) != corev1.ConditionFalse {
		t.Fatalf("the runtime pod while the device is away: %v (%v), want Ready False", pod, err)
	}
	t.Logf("field link of %s partitioned: driver disconnected after %v, RuntimeReady False (%s: %s) after %v",
		b1.Node, lost.Round(100*time.Millisecond), rr.Reason, rr.Message, notReady.Round(100*time.Millisecond))
	// The lease, watched at the runtime and in the Unit, is untouched for
	// three leases, and nothing reaches the device.
	d.leaseUntouched(b1.Epoch, b1.Node, time.Until(cutAt.Add(fieldLeases*u.Spec.Availability.LeaseDuration())))
	d.noFailoverEvents()
	if held := meta.FindStatusCondition(u.Status.Conditions, holdfastv1.ConditionHeld); held != nil && held.Status == metav1.ConditionTrue {
		t.Fatalf("the unit is in Hold with its lease held: %+v", held)
	}
	turns, err := d.u.Turns(d.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if last := turns[len(turns)-1].Last; last.After(cutAt.Add(time.Second)) {
		t.Fatalf("the device took a request at %s, after its field link was cut at %s", last.Format(time.StampMilli), cutAt.Format(time.StampMilli))
	}

	healedAt := heal()
	if _, err := d.u.WaitConditionStatus(d.ctx, holdfastv1.ConditionRuntimeReady, metav1.ConditionTrue, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("healed: RuntimeReady True again after %v", time.Since(healedAt).Round(100*time.Millisecond))
	if err := d.u.WaitWrites(d.ctx, b1.Epoch, 5, time.Minute); err != nil {
		t.Fatal(err)
	}
	d.writesSince(b1.Epoch, healedAt)
	after := d.runtimeView(b1.Node, b1.Epoch, time.Second)
	if after.Incarnation != before.Incarnation {
		t.Fatalf("the runtime was replaced: %+v, was %+v", after, before)
	}
	d.noFailoverEvents()
	d.oneWriterSoFar()
}

// leaseUntouched fails the drill if, for dur, the binding leaves epoch on
// node Held or the runtime there leaves Held or fences; readiness may come
// and go.
func (d *drill) leaseUntouched(epoch int64, node string, dur time.Duration) {
	d.t.Helper()
	url := fmt.Sprintf("http://%s:9443%s", world.Nodes[node].IP, lease.Path)
	for end := time.Now().Add(dur); time.Now().Before(end); time.Sleep(time.Second) {
		u, err := d.u.Get(d.ctx)
		if err != nil {
			d.t.Fatal(err)
		}
		if b := u.Status.RuntimeBinding; b == nil || b.Epoch != epoch || b.Node != node || b.LeaseState != holdfastv1.LeaseHeld {
			d.t.Fatalf("the binding left epoch %d Held on %s: %+v", epoch, node, b)
		}
		st, err := leaseStatus(world.HTTPClient(), url)
		if err != nil {
			d.t.Fatalf("the runtime on %s stopped answering: %v", node, err)
		}
		if st.Epoch != epoch || st.Fenced || st.State != lease.Held {
			d.t.Fatalf("the runtime on %s left Held: %+v", node, st)
		}
	}
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}
