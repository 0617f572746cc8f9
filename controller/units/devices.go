package units

import (
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	corev1 "k8s.io/api/core/v1"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/grantor"
)

// EventLaterEpochAtDevice: the current binding's runtime writes nothing to
// a device whose owner epoch is later than its own (docs/design.md §3 L13).
const EventLaterEpochAtDevice = "LaterEpochAtDevice"

var laterEpochAtDevice = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "holdfast_unit_later_epoch_at_device",
	Help: "1 while the unit's runtime writes nothing to a device whose owner epoch is later than its own (condition LaterEpochAtDevice).",
}, []string{"namespace", "unit"})

func init() { metrics.Registry.MustRegister(laterEpochAtDevice) }

// DeviceReport is what the current binding's runtime last said of its
// devices: a Failover runtime in every acknowledged reply, an Autonomy
// runtime in its status, read every grantor.StatusInterval.
type DeviceReport struct {
	// Reported: the runtime at this binding has said anything yet.
	Reported bool
	// LaterOwners are the devices it writes nothing to.
	LaterOwners []lease.LaterOwner
}

// latestOwner is the latest owner epoch reported, zero when none.
func (d DeviceReport) latestOwner() int64 {
	var e int64
	for _, o := range d.LaterOwners {
		e = max(e, o.OwnerEpoch)
	}
	return e
}

// ensureWatch reads the status of a runtime whose promise is Autonomy,
// which no grant reaches; a Failover runtime reports in its replies.
func (r *Reconciler) ensureWatch(u *holdfastv1.Unit, pod *corev1.Pod) {
	key := types.NamespacedName{Namespace: u.Namespace, Name: u.Name}
	if b := u.Status.RuntimeBinding; b != nil && termsOf(u, b).mode != holdfastv1.Failover {
		if t, ok := runtimeTarget(u, pod); ok {
			r.Grantor.Watch(t)
			return
		}
	}
	r.Grantor.Unwatch(key)
}

// deviceReport is the current binding's runtime's last word on its devices.
func (r *Reconciler) deviceReport(u *holdfastv1.Unit, obs *grantor.Observation) DeviceReport {
	b := u.Status.RuntimeBinding
	if b == nil {
		return DeviceReport{}
	}
	if obs != nil && obs.Acked() {
		return DeviceReport{Reported: true, LaterOwners: obs.LaterOwners}
	}
	if rep, ok := r.Grantor.Report(types.NamespacedName{Namespace: u.Namespace, Name: u.Name}); ok && !rep.At.IsZero() && rep.Target.Epoch == b.Epoch {
		return DeviceReport{Reported: true, LaterOwners: rep.Status.LaterOwners}
	}
	return DeviceReport{}
}

// noteDevices keeps LaterEpochAtDevice to what the current binding's
// runtime reports, with a Warning Event each time it finds a device with a
// later owner epoch. It takes a pass with no other decision (the next pass
// comes at once after one) and a binding this pass did not replace.
func noteDevices(p *Plan, in *Inputs) {
	b := p.Status.RuntimeBinding
	if p.Record != nil || !in.Devices.Reported || b == nil || in.Unit.Status.RuntimeBinding == nil || b.Epoch != in.Unit.Status.RuntimeBinding.Epoch {
		return
	}
	u := in.Unit
	cur := meta.FindStatusCondition(p.Status.Conditions, holdfastv1.ConditionLaterEpochAtDevice)
	if len(in.Devices.LaterOwners) == 0 {
		if cur != nil && cur.Status == metav1.ConditionTrue {
			setCondition(&p.Status, metav1.Condition{Type: holdfastv1.ConditionLaterEpochAtDevice, Status: metav1.ConditionFalse,
				Reason:  holdfastv1.ReasonNoLaterEpoch,
				Message: fmt.Sprintf("The runtime at epoch %d on node %s finds no device with a later owner epoch", b.Epoch, nodeOrUnknown(b.Node))}, in.Now)
			laterEpochAtDevice.WithLabelValues(u.Namespace, u.Name).Set(0)
		}
		return
	}
	msg := laterOwnersMessage(u, b, in.Devices.LaterOwners)
	if cur != nil && cur.Status == metav1.ConditionTrue && cur.Message == msg {
		return
	}
	setCondition(&p.Status, metav1.Condition{Type: holdfastv1.ConditionLaterEpochAtDevice, Status: metav1.ConditionTrue,
		Reason: holdfastv1.ReasonWritesWithheld, Message: msg}, in.Now)
	r := warning(EventLaterEpochAtDevice)
	r.Message, r.Epoch, r.Node = msg, b.Epoch, b.Node
	r.count = func() { laterEpochAtDevice.WithLabelValues(u.Namespace, u.Name).Set(1) }
	p.Record = r
}

// laterOwnersMessage names each device and its owner epoch, the binding's
// epoch, and the fix.
func laterOwnersMessage(u *holdfastv1.Unit, b *holdfastv1.RuntimeBinding, owners []lease.LaterOwner) string {
	var devs []string
	latest := int64(0)
	for _, o := range owners {
		at := ""
		if o.Address != "" {
			at = " at " + o.Address
		}
		devs = append(devs, fmt.Sprintf("device %s%s holds owner epoch %d", o.Device, at, o.OwnerEpoch))
		latest = max(latest, o.OwnerEpoch)
	}
	slices.Sort(devs)
	return fmt.Sprintf("%s, later than epoch %d of this unit's runtime on node %s, which writes nothing to it: another binding has taken "+
		"the device since this one was made (another Unit or cluster drives it, or this unit's epochs restarted). Fix: stop whatever "+
		"runtime holds epoch %d at the device; then, for this unit to drive it, fail the unit over with a confirmed fence "+
		"(kubectl holdfast failover -n %s %s --to <standby> --confirm-fenced <how the other writer was stopped>), whose new epoch is "+
		"drawn above %d, or clear the device's owner-epoch registers, after which this runtime writes again",
		strings.Join(devs, "; "), b.Epoch, nodeOrUnknown(b.Node), latest, u.Namespace, u.Name, latest)
}
