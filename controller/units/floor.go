package units

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// EventLeaseBelowFloor: a Failover unit's lease is below the floor of the
// grantor now installed (docs/design.md §3 L14).
const EventLeaseBelowFloor = "LeaseBelowFloor"

// noteLeaseFloor reports a Failover unit whose lease is below the floor of
// this grantor's timings: one admitted before the floor was raised. The
// unit runs as it is; holdfast never changes a running unit's lease, and
// the webhook refuses any edit of its spec that leaves the lease below the
// floor. Like noteDevices it takes a pass with no other decision.
func noteLeaseFloor(p *Plan, in *Inputs) {
	if p.Record != nil {
		return
	}
	a := &in.Unit.Spec.Availability
	floor, ok := in.Timings.LeaseFloor()
	cur := meta.FindStatusCondition(p.Status.Conditions, holdfastv1.ConditionLeaseBelowFloor)
	if !ok || a.Mode != holdfastv1.Failover || a.LeaseDuration() >= floor {
		if cur != nil && cur.Status == metav1.ConditionTrue {
			setCondition(&p.Status, metav1.Condition{Type: holdfastv1.ConditionLeaseBelowFloor, Status: metav1.ConditionFalse,
				Reason:  holdfastv1.ReasonAtOrAboveFloor,
				Message: fmt.Sprintf("The lease of %v is kept through a leader change (floor %v), or the unit holds none", a.LeaseDuration(), floor)}, in.Now)
		}
		return
	}
	msg := fmt.Sprintf("Lease %v is below the lease floor %v of the installed grantor: a leader change may fence this unit's healthy runtime (%s). "+
		"holdfast runs the unit as it is and never changes its lease; raise spec.availability.leaseDurationSeconds to at least %d "+
		"(the webhook refuses any other edit of this unit's spec until then)",
		a.LeaseDuration(), floor, in.Timings.Arithmetic(a.LeaseDuration()), int(floor/time.Second))
	if cur != nil && cur.Status == metav1.ConditionTrue && cur.Message == msg {
		return
	}
	setCondition(&p.Status, metav1.Condition{Type: holdfastv1.ConditionLeaseBelowFloor, Status: metav1.ConditionTrue,
		Reason: holdfastv1.ReasonBelowFloor, Message: msg}, in.Now)
	r := warning(EventLeaseBelowFloor)
	r.Message = msg
	if b := p.Status.RuntimeBinding; b != nil {
		r.Epoch, r.Node = b.Epoch, b.Node
	}
	p.Record = r
}
