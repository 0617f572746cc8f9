package units

import (
	"slices"
	"strings"
	"testing"
	"time"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// A person's fence confirmation certifies the runtime of one epoch: the
// one its holdfast.io/failover-confirm-epoch names, while the binding is
// at it. A confirmation re-applied after that runtime was replaced (a
// GitOps tool, a copied manifest), or one naming no epoch, must not end a
// later wait for the runtime now bound: it is ignored, removed, and said
// so. Each caller of the confirmation (the leadership hold-off, a manual
// failover of a runtime holding its lease, the hand-over's stop: see
// TestAPodGoneIsNotAStoppedWriter) is checked with a valid confirmation
// (the fixture) and each stale one.
func TestAStaleFenceConfirmationCertifiesNothing(t *testing.T) {
	stale := []struct {
		name  string
		epoch *string
		why   string
	}{
		{"naming no epoch", nil, "names no epoch"},
		{"of an earlier epoch", ptrTo("1"), "certifies the runtime of epoch 1, but the binding is at epoch 2"},
		{"of a later epoch", ptrTo("3"), "certifies the runtime of epoch 3, but the binding is at epoch 2"},
		{"not an epoch", ptrTo("two"), `"two" is not an epoch`},
	}
	// Both callers run at epoch 2: the unit failed over once before.
	callers := []struct {
		name string
		// setup brings the unit to the point where only a confirmation
		// lets the request go on now.
		setup func(s *sim)
		// carried is the records of the request carried out.
		carried []string
		// waits is the records while it waits (or is refused).
		waits []string
	}{
		{"the leadership hold-off", func(s *sim) {
			s.failedOver()
			s.heldOffExpiry()
			s.advance(time.Second)
		}, []string{EventLeaseExpired, EventManualRebind}, []string{EventLeaseExpired, EventInvalidRequest}},
		{"a runtime holding its lease", func(s *sim) {
			s.failedOver()
			s.held()
		}, []string{EventManualRebind}, []string{EventManualFailoverRefused}},
	}
	for _, c := range callers {
		confirm := func(s *sim, epoch *string) {
			s.u.Annotations = map[string]string{holdfastv1.AnnotationFailoverTo: "standby-2",
				holdfastv1.AnnotationFailoverConfirmFenced: "edge-1 powered off at the breaker"}
			if epoch != nil {
				s.u.Annotations[holdfastv1.AnnotationFailoverConfirmEpoch] = *epoch
			}
		}
		t.Run(c.name+": the binding's own epoch", func(t *testing.T) {
			s := newSim(t, failoverUnit())
			c.setup(s)
			confirm(s, ptrTo("2"))
			s.pass()
			s.pass()
			if got := s.reasons(); !slices.Equal(got, c.carried) || s.u.Status.RuntimeBinding.Epoch != 3 {
				t.Fatalf("records %v epoch %d, want %v and epoch 3", got, s.u.Status.RuntimeBinding.Epoch, c.carried)
			}
		})
		for _, st := range stale {
			t.Run(c.name+": a confirmation "+st.name, func(t *testing.T) {
				s := newSim(t, failoverUnit())
				c.setup(s)
				confirm(s, st.epoch)
				s.pass()
				s.pass()
				if got := s.reasons(); !slices.Equal(got, c.waits) || s.u.Status.RuntimeBinding.Epoch != 2 {
					t.Fatalf("records %v epoch %d, want %v and no re-bind", got, s.u.Status.RuntimeBinding.Epoch, c.waits)
				}
				if last := s.records[len(s.records)-1]; !strings.Contains(last.Message, st.why) || !strings.Contains(last.Message, holdfastv1.AnnotationFailoverConfirmEpoch) {
					t.Fatalf("%s: %q, want it to say %q and name %s", last.Reason, last.Message, st.why, holdfastv1.AnnotationFailoverConfirmEpoch)
				}
				if v, ok := s.u.Annotations[holdfastv1.AnnotationFailoverConfirmFenced]; ok {
					t.Fatalf("the stale confirmation %q stays on the Unit", v)
				}
			})
		}
	}
}

func ptrTo(s string) *string { return &s }
