package units

import (
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

	t.Run("a Failover runtime whose pod is confirmed gone: released at once", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		start(t, s)
		s.advance(2 * time.Second)
		s.podGone = true
		if p := s.pass(); !p.Release || !strings.Contains(s.records[len(s.records)-1].Message, "confirmed gone") {
			t.Fatalf("release %v, records %+v", p.Release, s.records)
		}
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
			!strings.Contains(c.Message, "kubectl delete pod --force") {
			t.Fatalf("RuntimeHandOver %+v", c)
		}
		s.podGone = true
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
