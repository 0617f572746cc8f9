package units

import (
	"slices"
	"testing"
	"time"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// L6 on the manual path: a person's failover whose only fence evidence is
// the lease (an expiry past its margin, or no renewal ever acknowledged)
// waits out a new leader's hold-off, as the automatic path does: a
// predecessor may still be renewing. A certified fence does not wait
// (TestAConfirmedFenceBypassesTheHoldOff).
func TestTheManualPathHoldsOff(t *testing.T) {
	noHoldBefore := func(s *sim, until time.Time) {
		s.t.Helper()
		for s.now.Before(until) {
			if p := s.pass(); p.Record != nil {
				// The start-up verdict is recorded first, on a pass of its own.
				continue
			}
			for _, r := range s.records {
				if r.Reason == EventHold || r.Reason == EventManualRebind {
					s.t.Fatalf("%s at %v, during the hold-off (until %v)", r.Reason, s.now.Sub(t0), until.Sub(t0))
				}
			}
			if c := s.cond(holdfastv1.ConditionFailoverRequest); c == nil || c.Reason != holdfastv1.ReasonLeadershipHoldOff {
				s.t.Fatalf("at %v the wait is not shown: %+v", s.now.Sub(t0), c)
			}
			s.advance(time.Second)
		}
		s.pass()
		s.pass()
		if got := s.reasons(); !slices.Contains(got, EventHold) || got[len(got)-1] != EventManualRebind {
			s.t.Fatalf("after the hold-off: records %v, want the Hold and the manual re-bind", got)
		}
		if b := s.u.Status.RuntimeBinding; b.Epoch != 2 || b.Origin != holdfastv1.OriginManual {
			s.t.Fatalf("binding %+v", b)
		}
	}
	t.Run("an expiry past its margin", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		s.heldOffExpiry() // expired at 30s; the hold-off ends at 140s
		s.u.Annotations = map[string]string{holdfastv1.AnnotationFailoverTo: "standby-2"}
		s.advance(21 * time.Second) // past the margin
		noHoldBefore(s, t0.Add(140*time.Second))
	})
	t.Run("no renewal ever acknowledged", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		s.starting()
		s.holdOff = t0.Add(140 * time.Second)
		s.u.Annotations = map[string]string{holdfastv1.AnnotationFailoverTo: "standby-1"}
		noHoldBefore(s, t0.Add(140*time.Second))
	})
}
