package units

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/grantor"
)

func TestReconcileAvailability_AReplacementThatNeverComesUpIsRecorded(t *testing.T) {
	s := newSim(t, failoverUnit())
	s.failedOver()
	b := s.u.Status.RuntimeBinding
	if b.Epoch != 2 || b.LeaseState != holdfastv1.LeaseExpired || b.LeaseStateEpoch != 1 || !b.LeaseStateCarried() {
		t.Fatalf("the re-bind must carry the predecessor's Expired under the new epoch: %+v", b)
	}
	// The scheduler places it; the pod gets an address; every renewal is
	// refused by a runtime that is not this binding's.
	s.schedule("standby-1")
	s.runtimePod("uid-2", false)
	s.loop()
	s.fail(grantor.Refused, "409: grant for unit plant/kiln-1 epoch 2 refused (runtime epoch 1)")
	s.pass() // the pod watch: its first address is recorded

	s.advance(60 * time.Second)
	s.pass()
	if len(s.records) != 0 {
		t.Fatalf("nothing may be recorded before the grantor has spoken about this binding, got %v", s.reasons())
	}
	if b := s.u.Status.RuntimeBinding; b.LeaseStateEpoch != 1 || b.LeaseState != holdfastv1.LeaseExpired {
		t.Fatalf("the carried state must stand while the replacement starts: %+v", b)
	}

	s.advance(61 * time.Second) // past the 120s start-up grace from the first address
	s.pass()
	if got := s.reasons(); !slices.Equal(got, []string{EventLeaseExpired}) {
		t.Fatalf("after the grace: records %v, want one LeaseExpired", got)
	}
	r := s.records[0]
	if r.Verdict != "StartupFailed/Refused" || !strings.Contains(r.Message, "did not come up") || !strings.Contains(r.Message, "grace of 2m0s") {
		t.Fatalf("the record must carry the start-up verdict: %q %q", r.Verdict, r.Message)
	}
	b = s.u.Status.RuntimeBinding
	if b.LeaseStateEpoch != 2 || b.Expiry.Verdict != holdfastv1.VerdictStartupFailed || b.Expiry.LastAttempt != holdfastv1.RenewalRefused || b.Expiry.Epoch != 2 {
		t.Fatalf("the binding's own verdict, stamped with its epoch: %+v %+v", b, b.Expiry)
	}
	if c := s.cond(holdfastv1.ConditionLeaseExpired); c.Status != metav1.ConditionTrue || c.Reason != holdfastv1.ReasonStartupFailed {
		t.Fatalf("LeaseExpired condition %+v", c)
	}

	s.advance(time.Second)
	s.pass()
	if len(s.records) != 1 {
		t.Fatalf("a third pass must record nothing more, got %v", s.reasons())
	}
}

func TestReconcileAvailability_ARecordedReplacementExpiryStillReestablishes(t *testing.T) {
	s := newSim(t, failoverUnit())
	s.failedOver()
	s.schedule("standby-1")
	s.pass() // the scheduler's node goes into the ledger
	if got := s.u.Status.RuntimeBinding.UnsettledRebinds; !slices.Equal(got, []string{"standby-1"}) {
		t.Fatalf("ledger %v, want the automatic target", got)
	}
	s.runtimePod("uid-2", false)
	s.loop()
	s.fail(grantor.Unreachable, "connection refused")
	s.pass()
	s.advance(121 * time.Second)
	s.pass()
	if got := s.reasons(); !slices.Equal(got, []string{EventLeaseExpired}) {
		t.Fatalf("records %v", got)
	}
	// The standby answers late, inside the margin.
	s.advance(2 * time.Second)
	s.ack()
	s.pod.Status.Conditions[0].Status = corev1.ConditionTrue
	s.pass()
	if got := s.reasons(); !slices.Equal(got, []string{EventLeaseExpired, EventLeaseReestablished}) {
		t.Fatalf("records %v, want the LeaseReestablished behind the expiry", got)
	}
	b := s.u.Status.RuntimeBinding
	if b.LeaseState != holdfastv1.LeaseHeld || b.LeaseStateEpoch != 2 || b.LeaseEstablishedBy == nil || b.LeaseEstablishedBy.PodUID != "uid-2" {
		t.Fatalf("binding after the late answer: %+v", b)
	}
	if len(b.UnsettledRebinds) != 0 {
		t.Fatalf("a confirmed runtime settles the ledger, got %v", b.UnsettledRebinds)
	}
	// And nothing re-binds it afterwards.
	s.advance(time.Minute)
	for range 6 {
		s.ack()
		s.pass()
		s.advance(5 * time.Second)
	}
	if len(s.records) != 2 {
		t.Fatalf("a held replacement must stay: %v", s.reasons())
	}
}

func TestNoteLeaseState_AStateWithNoEpochIsThisBindingsOwn(t *testing.T) {
	// A binding written before leaseStateEpoch existed, whose runtime had
	// fenced: an upgrade must not record it again.
	s := newSim(t, failoverUnit())
	s.u.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{
		Epoch: 7, Node: "edge-1", Pod: "kiln-1-runtime-e7", LeaseState: holdfastv1.LeaseExpired,
		LeaseEstablishedBy: &holdfastv1.RuntimeIncarnation{PodUID: "uid-7"},
		Expiry: &holdfastv1.LeaseExpiryRecord{Verdict: holdfastv1.VerdictSelfFenced, LastAttempt: holdfastv1.RenewalUnreachable,
			At: metav1.NewTime(t0.Add(-time.Hour)), Epoch: 7},
	}
	meta.SetStatusCondition(&s.u.Status.Conditions, metav1.Condition{Type: holdfastv1.ConditionHeld, Status: metav1.ConditionTrue, Reason: holdfastv1.ReasonRuntimeLost})
	s.runtimePod("uid-7", false)
	s.loop()
	s.fail(grantor.Unreachable, "no route to host")
	s.advance(31 * time.Second) // this process's own deadline for the binding passes too
	p := Decide(Inputs{Unit: s.u, Pod: s.pod, Obs: s.obs, Now: s.now, FreeTargets: nil})
	if p.Record != nil && p.Record.Reason == EventLeaseExpired {
		t.Fatalf("a state with no epoch is this binding's own: Expired again is no transition, yet recorded %q", p.Record.Message)
	}
	if p.Status.RuntimeBinding.Expiry.At.Time != t0.Add(-time.Hour) {
		t.Fatal("the recorded verdict must not be rewritten")
	}
}

func TestTheTwoDeadlines(t *testing.T) {
	t.Run("an acknowledged binding expires at lastAck + lease, SelfFenced", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		s.held()
		s.fail(grantor.Unreachable, "i/o timeout")
		s.advance(29 * time.Second)
		s.pass()
		if len(s.records) != 0 {
			t.Fatalf("expired early: %v", s.reasons())
		}
		s.advance(time.Second)
		s.pass()
		b := s.u.Status.RuntimeBinding
		if b.LeaseState != holdfastv1.LeaseExpired || b.Expiry.Verdict != holdfastv1.VerdictSelfFenced || b.Expiry.LastAttempt != holdfastv1.RenewalUnreachable ||
			!b.Expiry.At.Time.Equal(t0.Add(30*time.Second)) {
			t.Fatalf("expiry %+v", b.Expiry)
		}
	})
	t.Run("a binding never acknowledged expires at first address + grace, StartupFailed", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		s.starting()
		s.pass() // records the first address
		s.advance(31 * time.Second)
		s.pass()
		if s.u.Status.RuntimeBinding.LeaseState != holdfastv1.LeasePending {
			t.Fatalf("a start-up is not measured against the lease: %s", s.u.Status.RuntimeBinding.LeaseState)
		}
		s.advance(89 * time.Second)
		s.pass()
		b := s.u.Status.RuntimeBinding
		if b.LeaseState != holdfastv1.LeaseExpired || b.Expiry.Verdict != holdfastv1.VerdictStartupFailed || b.Expiry.LastAttempt != holdfastv1.RenewalUnreachable {
			t.Fatalf("expiry %+v", b.Expiry)
		}
		if c := s.cond(holdfastv1.ConditionHeld); c != nil {
			t.Fatalf("a runtime that never ran is not Held: %+v", c)
		}
	})
	t.Run("a pod that never gets an address expires NotAttempted", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		s.pass()
		s.runtimePod("uid-1", false)
		s.pod.Status.PodIP = ""
		s.advance(121 * time.Second)
		s.pass()
		if e := s.u.Status.RuntimeBinding.Expiry; e == nil || e.LastAttempt != holdfastv1.RenewalNotAttempted {
			t.Fatalf("expiry %+v", e)
		}
	})
	t.Run("a new leader does not read an established runtime as a start-up", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		s.held()
		// A new process: its loop has seen nothing; the binding says
		// who established the lease.
		s.loop()
		s.fail(grantor.Unreachable, "connection refused")
		s.advance(30 * time.Second)
		s.pass()
		if e := s.u.Status.RuntimeBinding.Expiry; e == nil || e.Verdict != holdfastv1.VerdictSelfFenced {
			t.Fatalf("an established runtime that went quiet is a self-fence, not a failed start-up: %+v", e)
		}
	})
	t.Run("a container restarted in place earns its lease again within the grace", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		s.held()
		s.advance(10 * time.Second)
		s.pod.Status.ContainerStatuses[0].RestartCount = 1
		s.pod.Status.ContainerStatuses[0].State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(s.now)}
		s.loop() // as a new leader would see it: nothing acknowledged by this process
		s.fail(grantor.Unreachable, "connection refused")
		s.advance(60 * time.Second)
		s.pass()
		if s.u.Status.RuntimeBinding.LeaseState == holdfastv1.LeaseExpired {
			t.Fatal("a restarted runtime gets the start-up grace from its restart")
		}
		s.advance(61 * time.Second)
		s.pass()
		if s.u.Status.RuntimeBinding.LeaseState != holdfastv1.LeaseExpired {
			t.Fatal("past the grace from the restart it has expired")
		}
	})
}

func TestLeaseEstablishedByIsWrittenOnceAndOnlyWithAnAcknowledgement(t *testing.T) {
	s := newSim(t, failoverUnit())
	s.placed(false)
	s.loop()
	for range 5 {
		s.fail(grantor.Refused, "503: starting")
		s.advance(time.Second)
		s.pass()
		if s.u.Status.RuntimeBinding.LeaseEstablishedBy != nil {
			t.Fatal("a pass with no acknowledged contact must write no incarnation")
		}
	}
	s.ack()
	s.pass()
	if by := s.u.Status.RuntimeBinding.LeaseEstablishedBy; by == nil || by.PodUID != "uid-1" || by.RestartCount != 0 {
		t.Fatalf("leaseEstablishedBy %+v", by)
	}
	if got := s.reasons(); !slices.Equal(got, []string{EventLeaseEstablished}) {
		t.Fatalf("records %v", got)
	}
	s.pod.Status.ContainerStatuses[0].RestartCount = 3
	s.advance(time.Second)
	s.ack()
	s.pass()
	if by := s.u.Status.RuntimeBinding.LeaseEstablishedBy; by.RestartCount != 0 {
		t.Fatalf("leaseEstablishedBy is written once: %+v", by)
	}
}

func TestARuntimeThatRecoversInsideTheHoldBoundRidesThroughWithNoHold(t *testing.T) {
	s := newSim(t, failoverUnit())
	s.held()
	s.lapse(30 * time.Second)
	s.advance(14 * time.Second) // inside the 15s hold bound
	s.pass()
	s.ack()
	s.pass()
	if got := s.reasons(); !slices.Equal(got, []string{EventLeaseExpired, EventLeaseReestablished}) {
		t.Fatalf("records %v, want the expiry and the re-establishment and no Hold", got)
	}
	if c := s.cond(holdfastv1.ConditionHeld); c != nil {
		t.Fatalf("Held %+v", c)
	}
}

// TestFailoverMarginCoversHoldBound holds L3 in the controller's own
// decisions: whatever the lease and the margin the CRD admits, no re-bind is
// decided before the expiry plus the hold bound, by which the runtime has
// certainly stopped writing, and it is decided once the margin has passed.
func TestFailoverMarginCoversHoldBound(t *testing.T) {
	for _, lease := range []int32{10, 11, 30, 59, 60, 61, 120, 600} {
		hb := holdfastv1.HoldBound(time.Duration(lease) * time.Second)
		least := int32((hb + time.Second - 1) / time.Second) // the smallest margin the CRD admits
		for _, margin := range []*int32{nil, ptr.To(least), ptr.To(least + 1), ptr.To(int32(600))} {
			u := failoverUnit()
			u.Spec.Availability.LeaseDurationSeconds = lease
			u.Spec.Availability.RuntimeStartupGraceSeconds = max(lease, 120)
			u.Spec.Availability.RebindMarginSeconds = margin
			s := newSim(t, u)
			s.held()
			s.lapse(time.Duration(lease) * time.Second)
			expiredAt := s.u.Status.RuntimeBinding.Expiry.At.Time
			var reboundAt time.Time
			for step := 0; step < 700*10 && reboundAt.IsZero(); step++ {
				s.advance(100 * time.Millisecond)
				if p := s.pass(); p.Rebind != nil {
					reboundAt = s.now
				}
			}
			a := &u.Spec.Availability
			if reboundAt.IsZero() {
				t.Fatalf("lease %ds margin %v: never re-bound", lease, a.RebindMargin())
			}
			if reboundAt.Before(expiredAt.Add(hb)) {
				t.Fatalf("lease %ds margin %v: re-bound %v after the expiry, inside the hold bound %v", lease, a.RebindMargin(), reboundAt.Sub(expiredAt), hb)
			}
			if late := reboundAt.Sub(expiredAt.Add(a.RebindMargin())); late < 0 || late > 100*time.Millisecond {
				t.Fatalf("lease %ds margin %v: re-bound %v past the margin from %v, want on the pass after it", lease, a.RebindMargin(), late, expiredAt)
			}
		}
	}
}

func TestTheExpiryInstantIsNeverRoundedEarlier(t *testing.T) {
	// Expiry.At is kept to the second; the margin runs from it, so it is
	// rounded up, never down.
	s := newSim(t, failoverUnit())
	s.now = t0.Add(400 * time.Millisecond)
	s.held()
	s.lapse(30 * time.Second)
	at := s.u.Status.RuntimeBinding.Expiry.At.Time
	if at.Before(t0.Add(30400*time.Millisecond)) || at.Nanosecond() != 0 {
		t.Fatalf("expiry at %v, the lease ran out at %v", at, t0.Add(30400*time.Millisecond))
	}
}

// The hold bound and the margin run from the grantor's own deadline
// (lastAck + lease) when this process observed it, not from the record,
// which the API keeps rounded up to the second; a process that did not
// observe it (a new leader, a restart: no observation) runs them from the
// record.
func TestTheMarginRunsFromTheObservedDeadline(t *testing.T) {
	for _, observed := range []bool{true, false} {
		t.Run(fmt.Sprintf("observed=%v", observed), func(t *testing.T) {
			s := newSim(t, failoverUnit())
			s.placed(true)
			s.loop()
			s.advance(300 * time.Millisecond)
			s.ack()
			s.pass()
			s.records = nil
			deadline := s.now.Add(30 * time.Second)
			s.now = deadline
			s.fail(grantor.Unreachable, "context deadline exceeded")
			s.pass()
			if at := s.u.Status.RuntimeBinding.Expiry.At.Time; !at.Equal(t0.Add(31 * time.Second)) {
				t.Fatalf("the expiry is recorded at %v, want the deadline %v rounded up", at, deadline)
			}
			from := deadline
			if !observed {
				s.obs = nil
				from = t0.Add(31 * time.Second)
			}
			due := from.Add(20 * time.Second) // the margin
			s.now = due.Add(-time.Millisecond)
			s.pass()
			s.pass()
			if got := s.reasons(); !slices.Equal(got, []string{EventLeaseExpired, EventHold}) {
				t.Fatalf("a millisecond before the margin's end: %v, want the expiry and the Hold only", got)
			}
			s.now = due
			s.pass()
			if got := s.reasons(); !slices.Equal(got, []string{EventLeaseExpired, EventHold, EventRebound}) {
				t.Fatalf("at the margin's end: %v, want the re-bind", got)
			}
		})
	}
}
