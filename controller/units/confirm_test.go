package units

import (
	"slices"
	"strings"
	"testing"
	"time"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

// A person's fence confirmation certifies one runtime process: the one of
// the epoch its holdfast.io/failover-confirm-epoch names, and of the pod
// UID and restart count its holdfast.io/failover-confirm-incarnation names,
// while the binding's runtime is that process. A confirmation re-applied
// after that runtime was replaced (a GitOps tool, a copied manifest), or
// after the kubelet restarted it or its pod was re-created (one the
// apiserver refused when written and a GitOps tool applied later), or one
// naming no epoch or process, must not end a later wait for the runtime
// now running: it is ignored, removed, and said so. Each caller of the
// confirmation (the leadership hold-off, a manual failover of a runtime
// holding its lease, the hand-over's stop: see
// TestAPodGoneIsNotAStoppedWriter) is checked with a valid confirmation
// (the fixture) and each stale one.
func TestAStaleFenceConfirmationCertifiesNothing(t *testing.T) {
	type confirmation struct{ epoch, incarnation *string }
	// current is the confirmation a person reading the Unit now writes.
	current := func(s *sim) confirmation {
		return confirmation{ptrTo("2"), ptrTo(policy.IncarnationValue(s.running()))}
	}
	stale := []struct {
		name string
		// confirm is the confirmation, given the current one.
		confirm func(s *sim, c confirmation) confirmation
		// then changes the runtime after the confirmation was written.
		then func(s *sim)
		why  string
		ann  string
	}{
		{name: "naming no epoch", confirm: func(_ *sim, c confirmation) confirmation { c.epoch = nil; return c },
			why: "names no epoch", ann: holdfastv1.AnnotationFailoverConfirmEpoch},
		{name: "of an earlier epoch", confirm: func(_ *sim, c confirmation) confirmation { c.epoch = ptrTo("1"); return c },
			why: "certifies the runtime of epoch 1, but the binding is at epoch 2", ann: holdfastv1.AnnotationFailoverConfirmEpoch},
		{name: "of a later epoch", confirm: func(_ *sim, c confirmation) confirmation { c.epoch = ptrTo("3"); return c },
			why: "certifies the runtime of epoch 3, but the binding is at epoch 2", ann: holdfastv1.AnnotationFailoverConfirmEpoch},
		{name: "not an epoch", confirm: func(_ *sim, c confirmation) confirmation { c.epoch = ptrTo("two"); return c },
			why: `"two" is not an epoch`, ann: holdfastv1.AnnotationFailoverConfirmEpoch},
		{name: "naming no process", confirm: func(_ *sim, c confirmation) confirmation { c.incarnation = nil; return c },
			why: "names no runtime process", ann: holdfastv1.AnnotationFailoverConfirmIncarnation},
		{name: "not a process", confirm: func(_ *sim, c confirmation) confirmation { c.incarnation = ptrTo("uid-2"); return c },
			why: "is neither <pod UID>/<restart count> nor", ann: holdfastv1.AnnotationFailoverConfirmIncarnation},
		{name: "written before the kubelet restarted the runtime", then: func(s *sim) {
			s.pod.Status.ContainerStatuses[0].RestartCount++
		}, why: "the kubelet restarted it since", ann: holdfastv1.AnnotationFailoverConfirmIncarnation},
		{name: "written before its pod was re-created", then: func(s *sim) {
			s.pod.UID += "-re-created"
		}, why: "its pod was re-created since", ann: holdfastv1.AnnotationFailoverConfirmIncarnation},
		{name: "of no pod while one exists", confirm: func(_ *sim, c confirmation) confirmation {
			c.incarnation = ptrTo(holdfastv1.IncarnationNone)
			return c
		}, why: "a runtime pod exists since", ann: holdfastv1.AnnotationFailoverConfirmIncarnation},
		{name: "of a restart the runtime has not reached", confirm: func(s *sim, c confirmation) confirmation {
			c.incarnation = ptrTo(string(s.pod.UID) + "/7")
			return c
		}, why: "names a restart the runtime has not reached", ann: holdfastv1.AnnotationFailoverConfirmIncarnation},
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
		confirm := func(s *sim, cf confirmation) {
			s.u.Annotations = map[string]string{holdfastv1.AnnotationFailoverTo: "standby-2",
				holdfastv1.AnnotationFailoverConfirmFenced: "edge-1 powered off at the breaker"}
			if cf.epoch != nil {
				s.u.Annotations[holdfastv1.AnnotationFailoverConfirmEpoch] = *cf.epoch
			}
			if cf.incarnation != nil {
				s.u.Annotations[holdfastv1.AnnotationFailoverConfirmIncarnation] = *cf.incarnation
			}
		}
		t.Run(c.name+": the binding's own runtime", func(t *testing.T) {
			s := newSim(t, failoverUnit())
			c.setup(s)
			if s.pod == nil {
				t.Fatal("the fixture has no runtime pod")
			}
			confirm(s, current(s))
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
				cf := current(s)
				if st.confirm != nil {
					cf = st.confirm(s, cf)
				}
				confirm(s, cf)
				if st.then != nil {
					st.then(s)
				}
				s.pass()
				s.pass()
				if got := s.reasons(); !slices.Equal(got, c.waits) || s.u.Status.RuntimeBinding.Epoch != 2 {
					t.Fatalf("records %v epoch %d, want %v and no re-bind", got, s.u.Status.RuntimeBinding.Epoch, c.waits)
				}
				if last := s.records[len(s.records)-1]; !strings.Contains(last.Message, st.why) || !strings.Contains(last.Message, st.ann) {
					t.Fatalf("%s: %q, want it to say %q and name %s", last.Reason, last.Message, st.why, st.ann)
				}
				if v, ok := s.u.Annotations[holdfastv1.AnnotationFailoverConfirmFenced]; ok {
					t.Fatalf("the stale confirmation %q stays on the Unit", v)
				}
			})
		}
	}
}

func ptrTo(s string) *string { return &s }
