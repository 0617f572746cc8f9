package units

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// L13: what the runtime reports of a device holding a later owner epoch is
// on the Unit, a Warning Event each time it finds one, the condition
// cleared when it finds none; a decision of consequence in the same pass
// goes first.
func TestALaterOwnerAtADeviceIsOnTheUnit(t *testing.T) {
	s := newSim(t, failoverUnit())
	s.pass()
	s.schedule("edge-1")
	s.runtimePod("uid-1", true)
	s.loop()
	s.ack()
	s.pass()
	b := s.u.Status.RuntimeBinding
	if b.LeaseState != holdfastv1.LeaseHeld {
		t.Fatalf("binding %+v", b)
	}
	cond := func() *metav1.Condition {
		return meta.FindStatusCondition(s.u.Status.Conditions, holdfastv1.ConditionLaterEpochAtDevice)
	}

	s.devices = DeviceReport{Reported: true}
	if p := s.pass(); p.Record != nil || cond() != nil {
		t.Fatalf("a runtime that finds nothing: record %+v, condition %+v", p.Record, cond())
	}
	owner := lease.LaterOwner{Device: "coupler", Address: "10.0.0.9:502", OwnerEpoch: 1785000000123}
	s.devices.LaterOwners = []lease.LaterOwner{owner}
	p := s.pass()
	c := cond()
	if p.Record == nil || p.Record.Reason != EventLaterEpochAtDevice || p.Record.Type != "Warning" || c == nil ||
		c.Status != metav1.ConditionTrue || c.Reason != holdfastv1.ReasonWritesWithheld || p.Record.Message != c.Message {
		t.Fatalf("record %+v, condition %+v", p.Record, c)
	}
	for _, want := range []string{"device coupler at 10.0.0.9:502 holds owner epoch 1785000000123, later than epoch 1 of this unit's runtime on node edge-1",
		"Fix: stop whatever runtime holds epoch 1785000000123 at the device", "drawn above 1785000000123"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("the condition does not say %q: %s", want, c.Message)
		}
	}
	if p := s.pass(); p.Record != nil {
		t.Fatalf("the same report again: %+v", p.Record)
	}
	s.devices.LaterOwners = nil
	if p := s.pass(); p.Record != nil || cond().Status != metav1.ConditionFalse || cond().Reason != holdfastv1.ReasonNoLaterEpoch {
		t.Fatalf("cleared: record %+v, condition %+v", p.Record, cond())
	}

	// A manual failover's Hold takes the pass; the report waits for the
	// next.
	s.devices.LaterOwners = []lease.LaterOwner{owner}
	s.u.Annotations = map[string]string{holdfastv1.AnnotationFailoverTo: "standby-1", holdfastv1.AnnotationFailoverConfirmFenced: "breaker", holdfastv1.AnnotationFailoverConfirmEpoch: "1"}
	s.certifyRunning()
	if p := s.pass(); p.Record == nil || p.Record.Reason != EventHold || cond().Status != metav1.ConditionFalse {
		t.Fatalf("the Hold: record %+v, condition %+v", p.Record, cond())
	}
	// The person's failover goes above the device's epoch.
	if p := s.pass(); p.Record == nil || p.Record.Reason != EventManualRebind || s.u.Status.RuntimeBinding.Epoch != owner.OwnerEpoch+1 {
		t.Fatalf("the manual re-bind: record %+v, binding %+v", p.Record, s.u.Status.RuntimeBinding)
	}
}

// L13: a new binding's epoch is above the current one and the floor; only a
// person's failover also goes above a device's later owner epoch.
func TestTheNextEpoch(t *testing.T) {
	u := failoverUnit()
	u.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{Epoch: 1700000000000}
	dev := DeviceReport{Reported: true, LaterOwners: []lease.LaterOwner{{Device: "a", OwnerEpoch: 1800000000000}, {Device: "b", OwnerEpoch: 1750000000000}}}
	for _, tc := range []struct {
		name   string
		floor  int64
		origin holdfastv1.BindingOrigin
		want   int64
	}{
		{"the current epoch + 1", 0, holdfastv1.OriginAutomatic, 1700000000001},
		{"the floor", 1710000000000, holdfastv1.OriginAutomatic, 1710000000000},
		{"a person's failover above the device", 1710000000000, holdfastv1.OriginManual, 1800000000001},
	} {
		in := Inputs{Unit: u, EpochFloor: tc.floor, Devices: dev}
		if got := in.nextEpoch(tc.origin); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
