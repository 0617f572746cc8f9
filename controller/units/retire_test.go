package units

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// deleted marks the sim's Unit deleted now, as the apiserver does while a
// finalizer holds it.
func (s *sim) deleted() {
	t := metav1.NewTime(s.now)
	s.u.DeletionTimestamp = &t
	s.u.Finalizers = []string{holdfastv1.FinalizerRuntimeStopped}
}

// nodeLists has the binding's node's plugin list the node after it read
// the hand-over's podGoneAt (a pass must have seen the pod gone), with
// running on it.
func (s *sim) nodeLists(running ...holdfastv1.NodeRuntime) {
	s.t.Helper()
	h := s.u.Status.RuntimeBinding.HandOver
	if h == nil || h.PodGoneAt == nil {
		s.t.Fatalf("setup: no podGoneAt to answer: %+v", h)
	}
	s.nodeRuntimes = &holdfastv1.RuntimesReport{At: metav1.NewTime(s.now), Runtimes: running,
		Answers: []holdfastv1.RuntimesAnswer{{Namespace: s.u.Namespace, Unit: s.u.Name, PodGoneAt: *h.PodGoneAt}}}
}

// goneAndListed: the pod is gone, a pass sees it, and the node's plugin then
// lists no runtime of the unit.
func (s *sim) goneAndListed() {
	s.t.Helper()
	s.podGone = true
	if p := s.pass(); p.Release || p.Rebind != nil {
		s.t.Fatalf("the pod's absence alone ended the wait: %+v", p)
	}
	s.nodeLists()
}

// releasedAt passes at every second from now up to and including at, and
// fails when the Unit is released before at or not at it.
func (s *sim) releasedAt(at time.Time) {
	s.t.Helper()
	for {
		p := s.pass()
		if p.Release != !s.now.Before(at) {
			s.t.Fatalf("at %v: release %v, want it at %v; records %v", s.now.Sub(t0), p.Release, at.Sub(t0), s.reasons())
		}
		if p.Release {
			if p.Rebind != nil || p.Status.RuntimeBinding.Epoch != 1 {
				s.t.Fatalf("a deleted Unit binds nothing: %+v", p)
			}
			if r := s.records[len(s.records)-1]; r.Reason != EventRetired {
				s.t.Fatalf("records %v, want %s last", s.reasons(), EventRetired)
			}
			return
		}
		if p.Rebind != nil {
			s.t.Fatalf("at %v: a deleted Unit re-bound", s.now.Sub(t0))
		}
		s.advance(time.Second)
	}
}

// L13 across re-creations: a deleted Unit keeps its name (the finalizer)
// until its runtime has provably stopped writing, so a Unit created again
// under that name never starts a second writer beside a runtime that still
// holds its lease. Each subtest deletes a unit held at epoch 1 on edge-1
// (lease 30s, hold bound 15s, margin 20s) whose node is then cut off.
func TestADeletedUnitIsHeldUntilItsRuntimeStoppedWriting(t *testing.T) {
	// start deletes the held unit at 3s, just after an acknowledgement, and
	// checks the first pass: no grant from now, the pod deleted, announced.
	start := func(t *testing.T, s *sim) {
		t.Helper()
		s.held()
		s.advance(3 * time.Second)
		s.ack()
		s.pass()
		s.deleted()
		p := s.pass()
		b := s.u.Status.RuntimeBinding
		if p.Release || p.Rebind != nil || !p.DeletePod || b.HandOver == nil || !b.HandOver.Since.Time.Equal(s.now) {
			t.Fatalf("plan release %v delete %v, binding %+v", p.Release, p.DeletePod, b)
		}
		if s.granting() != 0 {
			t.Fatal("a deleted Unit's runtime is granted nothing")
		}
		if got := s.reasons(); !slices.Equal(got, []string{EventRetiring}) || !strings.Contains(s.records[0].Message, "Unit deleted") {
			t.Fatalf("records %v %+v", got, s.records)
		}
		if c := s.cond(holdfastv1.ConditionRuntimeHandOver); c == nil || c.Status != metav1.ConditionTrue {
			t.Fatalf("RuntimeHandOver %+v", c)
		}
	}

	t.Run("a Failover runtime cut off: released only once its lease and the margin ran out since the last grant", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		start(t, s)
		if !s.pass().StopGranting && s.u.Status.RuntimeBinding.HandOver == nil {
			t.Fatal("no hand-over recorded")
		}
		// The last grant went out by 3s: the runtime holds to 33s, fences
		// by 48s; the margin covers the hold: 53s.
		s.releasedAt(t0.Add(53 * time.Second))
		if c := s.cond(holdfastv1.ConditionRuntimeHandOver); c.Reason != holdfastv1.ReasonAwaitingFence {
			t.Fatalf("RuntimeHandOver %+v", c)
		}
	})

	t.Run("a Failover runtime whose pod is gone and whose node lists none of it: released at once", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		start(t, s)
		s.advance(2 * time.Second)
		s.goneAndListed()
		if p := s.pass(); !p.Release || !strings.Contains(s.records[len(s.records)-1].Message, "plugin, listing the node after that, runs no container of it") {
			t.Fatalf("release %v, records %+v", p.Release, s.records)
		}
	})

	t.Run("a Failover runtime whose pod is gone with no report from its node: released only once its lease and the margin ran out", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		start(t, s)
		s.podGone = true // force-deleted (PodGC after its Node's deletion): no proof
		s.releasedAt(t0.Add(53 * time.Second))
	})

	t.Run("under a new leader's hold-off: released no earlier than its end", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		s.holdOff = t0.Add(140 * time.Second)
		start(t, s)
		s.releasedAt(s.holdOff)
	})

	t.Run("a lease expiry recorded before the deletion brings the release earlier", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		s.held()
		s.lapse(30 * time.Second) // expired at 30s: fenced by 45s
		s.advance(5 * time.Second)
		s.deleted()
		s.records = nil
		s.releasedAt(t0.Add(50 * time.Second))
	})

	t.Run("an Autonomy runtime: never released while its pod exists, however long; released once it is confirmed gone", func(t *testing.T) {
		s := newSim(t, autonomyUnit())
		s.placed(true)
		s.pass()
		s.deleted()
		if p := s.pass(); !p.DeletePod || p.Release {
			t.Fatalf("plan %+v", p)
		}
		for range 60 {
			s.advance(time.Minute)
			if p := s.pass(); p.Release || !p.DeletePod {
				t.Fatalf("plan %+v while the Autonomy runtime's pod exists", p)
			}
		}
		if c := s.cond(holdfastv1.ConditionRuntimeHandOver); c.Reason != holdfastv1.ReasonAwaitingPodGone ||
			!strings.Contains(c.Message, holdfastv1.AnnotationRuntimes) || !strings.Contains(c.Message, holdfastv1.AnnotationFailoverConfirmFenced) {
			t.Fatalf("RuntimeHandOver %+v", c)
		}
		s.goneAndListed()
		s.releasedAt(s.now)
	})

	t.Run("a hand-over under way: the deletion waits on the same stop, from the hand-over's start", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		s.held()
		s.u.Spec.Availability.Mode = holdfastv1.Autonomy
		s.pass() // hand-over from t0: no grant since
		s.advance(10 * time.Second)
		s.deleted()
		s.releasedAt(t0.Add(50 * time.Second))
		if got := s.reasons(); !slices.Equal(got, []string{EventHandOver, EventRetired}) {
			t.Fatalf("records %v", got)
		}
	})

	t.Run("a Unit never bound: released at once", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		s.deleted()
		if p := s.pass(); !p.Release || p.Status.RuntimeBinding != nil {
			t.Fatalf("plan %+v", p)
		}
	})
}

// L11/L13: a pod gone from the apiserver is not a stopped writer (PodGC
// removes every pod of a deleted Node, a forced delete skips the kubelet).
// An Autonomy runtime's stop, for a retirement and a hand-over alike, is
// proven only by its node's plugin listing the node after the pod was seen
// gone with no container of the unit at the binding's epoch or earlier, or
// by a person's certification. The fixture: an Autonomy unit at epoch 1 on
// edge-1 stopped by the caller, its pod gone 10s later and seen so, and the
// node's plugin then listing nothing of it; each mutation takes one piece
// of that evidence away or adds one.
func TestAPodGoneIsNotAStoppedWriter(t *testing.T) {
	runtime := func(ns, unit string, epoch int64) holdfastv1.NodeRuntime {
		return holdfastv1.NodeRuntime{Namespace: ns, Unit: unit, Epoch: epoch, Pod: fmt.Sprintf("%s-e%d", unit, epoch), PodUID: "uid-1"}
	}
	callers := []struct {
		name  string
		start func(*sim)
		done  func(Plan) bool
	}{
		{"retirement", func(s *sim) { s.deleted() }, func(p Plan) bool { return p.Release }},
		{"hand-over", func(s *sim) { s.u.Spec.Availability.Mode = holdfastv1.Failover }, func(p Plan) bool { return p.Rebind != nil }},
	}
	for _, tc := range []struct {
		name   string
		mutate func(*sim)
		done   bool
		// certified: a person's certification ended the wait.
		certified bool
		// awaiting is in the RuntimeHandOver condition while it waits.
		awaiting string
	}{
		{name: "the fixture: gone, then listed without it", mutate: func(*sim) {}, done: true},
		{name: "no report from the node", mutate: func(s *sim) { s.nodeRuntimes = nil }, awaiting: "waiting for node edge-1's plugin to list"},
		{name: "a report listed before the pod was seen gone", mutate: func(s *sim) { s.nodeRuntimes.Answers = nil }, awaiting: "waiting for node edge-1's plugin to list"},
		{name: "a report answering an earlier absence", mutate: func(s *sim) {
			s.nodeRuntimes.Answers[0].PodGoneAt = metav1.NewTime(s.nodeRuntimes.Answers[0].PodGoneAt.Add(-time.Minute))
		}, awaiting: "waiting for node edge-1's plugin to list"},
		{name: "a report answering another unit", mutate: func(s *sim) { s.nodeRuntimes.Answers[0].Unit = "kiln-2" }, awaiting: "waiting for node edge-1's plugin to list"},
		{name: "the runtime still running at the binding's epoch", mutate: func(s *sim) {
			s.nodeRuntimes.Runtimes = []holdfastv1.NodeRuntime{runtime("plant", "kiln-1", 1)}
		}, awaiting: "lists its runtime still running there (pod kiln-1-e1 uid uid-1 at epoch 1)"},
		{name: "a runtime of an earlier epoch still running", mutate: func(s *sim) {
			s.nodeRuntimes.Runtimes = []holdfastv1.NodeRuntime{runtime("plant", "kiln-1", 0)}
		}, awaiting: "still running"},
		{name: "other units' runtimes and a later epoch running", mutate: func(s *sim) {
			s.nodeRuntimes.Runtimes = []holdfastv1.NodeRuntime{runtime("plant", "kiln-2", 1), runtime("other", "kiln-1", 1), runtime("plant", "kiln-1", 2)}
		}, done: true},
		{name: "the pod back after the report", mutate: func(s *sim) { s.podGone = false }, awaiting: "the apiserver to confirm pod"},
		{name: "a binding never placed, no report", mutate: func(s *sim) { s.u.Status.RuntimeBinding.Node, s.nodeRuntimes = "", nil }, done: true},
		{name: "a binding never placed, its pod still there", mutate: func(s *sim) {
			s.u.Status.RuntimeBinding.Node, s.nodeRuntimes, s.podGone = "", nil, false
		}, awaiting: "the apiserver to confirm pod"},
		{name: "no report, a person certifies the stop", mutate: func(s *sim) {
			s.nodeRuntimes = nil
			s.u.Annotations = map[string]string{holdfastv1.AnnotationFailoverConfirmFenced: "powered off at the breaker", holdfastv1.AnnotationFailoverConfirmEpoch: "1"}
			s.certifyRunning()
		}, done: true, certified: true},
		{name: "no report, a certification naming no epoch", mutate: func(s *sim) {
			s.nodeRuntimes = nil
			s.u.Annotations = map[string]string{holdfastv1.AnnotationFailoverConfirmFenced: "powered off at the breaker"}
		}, awaiting: "waiting for node edge-1's plugin to list"},
		{name: "no report, a certification of another epoch", mutate: func(s *sim) {
			s.nodeRuntimes = nil
			s.u.Annotations = map[string]string{holdfastv1.AnnotationFailoverConfirmFenced: "powered off at the breaker", holdfastv1.AnnotationFailoverConfirmEpoch: "2"}
			s.certifyRunning()
		}, awaiting: "waiting for node edge-1's plugin to list"},
		{name: "the pod still there, a person certifies the stop", mutate: func(s *sim) {
			s.podGone, s.nodeRuntimes = false, nil
			s.u.Annotations = map[string]string{holdfastv1.AnnotationFailoverConfirmFenced: "powered off at the breaker", holdfastv1.AnnotationFailoverConfirmEpoch: "1"}
			s.certifyRunning()
		}, done: true, certified: true},
	} {
		for _, c := range callers {
			t.Run(c.name+": "+tc.name, func(t *testing.T) {
				s := newSim(t, autonomyUnit())
				s.placed(true)
				s.pass()
				c.start(s)
				if p := s.pass(); !p.DeletePod || c.done(p) {
					t.Fatalf("start: plan %+v", p)
				}
				s.advance(10 * time.Second)
				s.goneAndListed()
				if at := s.u.Status.RuntimeBinding.HandOver.PodGoneAt; at == nil || !at.Time.Equal(s.now) {
					t.Fatalf("podGoneAt %v, want %v", at, s.now)
				}
				tc.mutate(s)
				for i := range 3 {
					p := s.pass()
					if c.done(p) != tc.done {
						t.Fatalf("pass %d: done %v, want %v; condition %+v", i, c.done(p), tc.done, s.cond(holdfastv1.ConditionRuntimeHandOver))
					}
					if tc.done {
						// A hand-over a person certified removes the
						// certification, so it certifies no later one.
						if c.name == "hand-over" && p.ConsumeConfirm != tc.certified {
							t.Fatalf("consume confirm %v, want %v", p.ConsumeConfirm, tc.certified)
						}
						return
					}
					if cond := s.cond(holdfastv1.ConditionRuntimeHandOver); cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, tc.awaiting) ||
						!strings.Contains(cond.Message, holdfastv1.AnnotationFailoverConfirmFenced) {
						t.Fatalf("condition %+v, want it to say %q and name the certification", cond, tc.awaiting)
					}
					s.advance(time.Hour)
				}
			})
		}
	}
}
