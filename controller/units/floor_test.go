package units

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

// L14: a Failover unit whose lease is below the floor of the grantor now
// installed (admitted before the floor was raised) is reported, once, with
// the arithmetic and the fix, and is run as it is: the pass decides on its
// own lease, and nothing holdfast writes changes the spec. Raising the
// lease, or an Autonomy unit, clears it.
func TestAUnitBelowARaisedFloorIsReportedAndRunAsItIs(t *testing.T) {
	u := failoverUnit()
	u.Spec.Availability.LeaseDurationSeconds = 20
	spec := u.Spec.DeepCopy()
	timings := policy.DefaultGrantorTimings()
	pass := func() Plan {
		p := Decide(Inputs{Unit: u, Now: t0, Timings: timings, FreeTargets: []string{"standby-1"}})
		u.Status = p.Status
		return p
	}
	cond := func() *metav1.Condition {
		return meta.FindStatusCondition(u.Status.Conditions, holdfastv1.ConditionLeaseBelowFloor)
	}
	if p := pass(); p.Record != nil || cond() != nil {
		t.Fatalf("the first pass only binds: %+v, %+v", p.Record, cond())
	}
	p := pass()
	c := cond()
	if p.Record == nil || p.Record.Reason != EventLeaseBelowFloor || p.Record.Type != "Warning" || c == nil || c.Status != metav1.ConditionTrue ||
		c.Reason != holdfastv1.ReasonBelowFloor || c.Message != p.Record.Message {
		t.Fatalf("record %+v, condition %+v", p.Record, c)
	}
	for _, want := range []string{"Lease 20s is below the lease floor 30s of the installed grantor",
		"lease - 2 x lease/6 = 13.333s", "hand-over takes up to 14.9s", "plus 5s to spare = 19.9s",
		"never changes its lease; raise spec.availability.leaseDurationSeconds to at least 30"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("the condition does not say %q: %s", want, c.Message)
		}
	}
	if p := pass(); p.Record != nil || p.RequeueAfter != leaseapi.RenewInterval(20*time.Second, 0) {
		t.Fatalf("reported twice, or not run on its own lease: record %+v, next pass in %v", p.Record, p.RequeueAfter)
	}
	if !equality.Semantic.DeepEqual(&u.Spec, spec) {
		t.Fatalf("the spec changed: %+v", u.Spec)
	}
	u.Spec.Availability.LeaseDurationSeconds = 30
	if p := pass(); p.Record != nil || cond().Status != metav1.ConditionFalse || cond().Reason != holdfastv1.ReasonAtOrAboveFloor {
		t.Fatalf("raised to the floor: %+v, %+v", p.Record, cond())
	}
	u.Spec.Availability.LeaseDurationSeconds = 20
	u.Spec.Availability.Mode = holdfastv1.Autonomy
	// The switch itself is a planned hand-over (L11), recorded as such.
	if p := pass(); (p.Record != nil && p.Record.Reason == EventLeaseBelowFloor) || cond().Status != metav1.ConditionFalse {
		t.Fatalf("an Autonomy unit holds no lease: %+v, %+v", p.Record, cond())
	}
}
