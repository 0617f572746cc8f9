package units

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/grantor"
	"github.com/holdfast-io/holdfast/policy"
)

var t0 = time.Date(2026, 9, 22, 10, 0, 0, 0, time.UTC)

// sim drives Decide pass after pass the way the reconciler does, with the
// clock, the grantor's evidence and the nodes in the test's hands.
type sim struct {
	t       *testing.T
	u       *holdfastv1.Unit
	pod     *corev1.Pod
	obs     *grantor.Observation
	now     time.Time
	holdOff time.Time
	free    []string
	// unavailable: why each other eligible standby is not free.
	unavailable map[string]string
	// podGone: the apiserver has no pod of the current binding.
	podGone bool
	// nodeRuntimes is the binding's node's runtimes report.
	nodeRuntimes *holdfastv1.RuntimesReport
	// devices is what the runtime reports of its devices (L13).
	devices DeviceReport
	records []*Record
}

func failoverUnit() *holdfastv1.Unit {
	return &holdfastv1.Unit{
		ObjectMeta: metav1.ObjectMeta{Namespace: "plant", Name: "kiln-1", UID: "unit-uid"},
		Spec: holdfastv1.UnitSpec{
			Runtime:      holdfastv1.UnitRuntime{Image: "unit-runtime:dev", HealthPort: 9440, LeasePort: 9443, MetricsPort: 9441},
			NodeSelector: map[string]string{"holdfast.io/device": "kiln-1"},
			Availability: holdfastv1.Availability{
				Mode: holdfastv1.Failover, LeaseDurationSeconds: 30, RuntimeStartupGraceSeconds: 120,
				Targets:    &holdfastv1.FailoverTargets{Nodes: []string{"standby-1", "standby-2"}},
				Colocation: holdfastv1.ColocationWarn,
			},
		},
	}
}

func autonomyUnit() *holdfastv1.Unit {
	u := failoverUnit()
	u.Spec.Availability.Mode = holdfastv1.Autonomy
	return u
}

func newSim(t *testing.T, u *holdfastv1.Unit) *sim {
	return &sim{t: t, u: u, now: t0, free: []string{"standby-1", "standby-2"}}
}

// running is the binding's runtime process as the apiserver has it.
func (s *sim) running() *holdfastv1.RuntimeIncarnation {
	if s.podGone {
		return nil
	}
	return policy.IncarnationOf(s.pod)
}

// certifyRunning names in the Unit's fence confirmation the runtime
// process as a person reads it now.
func (s *sim) certifyRunning() {
	s.u.Annotations[holdfastv1.AnnotationFailoverConfirmIncarnation] = policy.IncarnationValue(s.running())
}

func (s *sim) pass() Plan {
	s.t.Helper()
	p := Decide(Inputs{Unit: s.u, Pod: s.pod, Obs: s.obs, Now: s.now, HoldOffUntil: s.holdOff, FreeTargets: s.free, Unavailable: s.unavailable,
		NodeExists: func(n string) bool { return n != "nowhere" }, PodGone: s.podGone, NodeRuntimes: s.nodeRuntimes, Devices: s.devices, Running: s.running()})
	s.u.Status = p.Status
	if p.Record != nil {
		s.records = append(s.records, p.Record)
	}
	if p.ConsumeRequest {
		delete(s.u.Annotations, holdfastv1.AnnotationFailoverTo)
	}
	if p.ConsumeRequest || p.ConsumeConfirm {
		delete(s.u.Annotations, holdfastv1.AnnotationFailoverConfirmFenced)
		delete(s.u.Annotations, holdfastv1.AnnotationFailoverConfirmEpoch)
		delete(s.u.Annotations, holdfastv1.AnnotationFailoverConfirmIncarnation)
	}
	if p.Rebind != nil {
		// The reconciler forgets the old loop and creates a fresh pod.
		s.pod, s.obs, s.podGone, s.nodeRuntimes = nil, nil, false, nil
	}
	return p
}

// runtimePod is the current binding's pod, placed, with an address.
func (s *sim) runtimePod(uid string, ready bool) {
	b := s.u.Status.RuntimeBinding
	p := RuntimePod(s.u, b.Epoch, Placement{})
	p.UID = types.UID(uid)
	p.CreationTimestamp = metav1.NewTime(s.now)
	p.Spec.NodeName = b.Node
	p.Status.PodIP = "10.0.0.7"
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: holdfastv1.RuntimeContainer}}
	s.pod = p
}

// loop starts this process's renewal loop at the current binding.
func (s *sim) loop() {
	b := s.u.Status.RuntimeBinding
	s.obs = &grantor.Observation{Target: grantor.Target{Epoch: b.Epoch, Duration: 30 * time.Second}, Started: s.now}
}

func (s *sim) ack() {
	s.obs.LastAck = s.now
	s.obs.Acks++
	s.obs.Attempts++
	s.obs.LastAttempt = grantor.Attempt{At: s.now, Outcome: grantor.Acknowledged}
}

func (s *sim) fail(o grantor.Outcome, msg string) {
	s.obs.Attempts++
	s.obs.LastAttempt = grantor.Attempt{At: s.now, Outcome: o, Message: msg}
}

// schedule plays the scheduler's Bind (UnitPlacement records the binding's
// node at Bind): the node and the time are on the Unit.
func (s *sim) schedule(node string) {
	b := s.u.Status.RuntimeBinding
	b.Node = node
	b.BoundAt = ptr.To(metav1.NewTime(s.now))
}

func (s *sim) advance(d time.Duration) { s.now = s.now.Add(d) }

func (s *sim) reasons() []string {
	var out []string
	for _, r := range s.records {
		out = append(out, r.Reason)
	}
	return out
}

func (s *sim) cond(t string) *metav1.Condition {
	return meta.FindStatusCondition(s.u.Status.Conditions, t)
}

// placed makes a fresh unit's first binding and places its pod on edge-1
// with an address, ready or not.
func (s *sim) placed(ready bool) {
	s.pass()
	s.schedule("edge-1")
	s.runtimePod("uid-1", ready)
}

// starting is a placed runtime that has answered no renewal yet.
func (s *sim) starting() {
	s.placed(false)
	s.loop()
	s.fail(grantor.Unreachable, "connection refused")
}

// held brings a fresh unit to Held at epoch 1 on edge-1.
func (s *sim) held() {
	s.t.Helper()
	s.placed(true)
	s.loop()
	s.ack()
	s.pass()
	if b := s.u.Status.RuntimeBinding; b.LeaseState != holdfastv1.LeaseHeld {
		s.t.Fatalf("setup: lease %s, want Held", b.LeaseState)
	}
	s.records = nil
}

// failedOver takes a held unit through its expiry, Hold and re-bind: the
// binding performFailover leaves.
func (s *sim) failedOver() {
	s.t.Helper()
	s.held()
	s.advance(30 * time.Second) // no acknowledgement since
	s.fail(grantor.Unreachable, "context deadline exceeded")
	s.pass()
	s.advance(15 * time.Second)
	s.pass()
	s.advance(5 * time.Second)
	s.pass()
	if got := s.reasons(); !slices.Equal(got, []string{EventLeaseExpired, EventHold, EventRebound}) {
		s.t.Fatalf("setup: records %v, want expiry, Hold, re-bind", got)
	}
	s.records = nil
}

// lapse lets the runtime's renewals go unanswered for d (Unreachable
// since the last acknowledgement) and passes once.
func (s *sim) lapse(d time.Duration) {
	s.fail(grantor.Unreachable, "timeout")
	s.advance(d)
	s.pass()
}

// heldOffExpiry: a held unit whose runtime's lease runs out during this
// process's hold-off (leadership taken at t0: 90s stand-down + 30s lease +
// 20s margin), and the pass that sees the expiry.
func (s *sim) heldOffExpiry() {
	s.held()
	s.holdOff = t0.Add(140 * time.Second)
	s.lapse(30 * time.Second)
}

// silentRebind places the current re-bind on node, whose runtime gets an
// address and never answers (every renewal Unreachable with why), and
// passes after each of the two.
func (s *sim) silentRebind(node, uid, why string) {
	s.schedule(node)
	s.pass()
	s.runtimePod(uid, false)
	s.loop()
	s.fail(grantor.Unreachable, why)
	s.pass()
}

// silentTurn is a silentRebind run past its start-up grace (120s from its
// first address: StartupFailed) and the margin after it (a re-bind or the
// suspension).
func (s *sim) silentTurn(node, uid, why string) {
	s.silentRebind(node, uid, why)
	s.advance(121 * time.Second)
	s.pass() // StartupFailed
	s.advance(20 * time.Second)
	s.pass() // re-bind or suspension
}

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

func TestTheBudgetTriesEachFreeStandbyOnceThenSuspendsAndTheFirstRenewalLiftsIt(t *testing.T) {
	s := newSim(t, failoverUnit())
	s.failedOver() // epoch 2, ledger empty so far
	for i, node := range []string{"standby-1", "standby-2"} {
		s.silentTurn(node, fmt.Sprintf("uid-s%d", i), "connection refused")
	}
	if got := s.reasons(); !slices.Equal(got, []string{EventLeaseExpired, EventRebound, EventLeaseExpired, EventBudgetExhausted}) {
		t.Fatalf("records %v", got)
	}
	b := s.u.Status.RuntimeBinding
	if b.Epoch != 3 || !slices.Equal(b.UnsettledRebinds, []string{"standby-1", "standby-2"}) {
		t.Fatalf("suspended at epoch %d with ledger %v; want 3 and both standbys", b.Epoch, b.UnsettledRebinds)
	}
	c := s.cond(holdfastv1.ConditionFailoverSuspended)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != holdfastv1.ReasonAllTargetsTried {
		t.Fatalf("FailoverSuspended %+v", c)
	}
	if s.pod == nil {
		t.Fatal("suspension never removes the current pod")
	}
	last := s.records[len(s.records)-1]
	if strings.HasPrefix(last.Reason, "Rebound") || strings.HasPrefix(last.Reason, "Failover") || strings.Contains(last.Reason, "Rebind") {
		t.Fatalf("the suspension's reason %q must not read as an ordinary failover", last.Reason)
	}

	// Nothing more while suspended, however long.
	for range 10 {
		s.advance(time.Minute)
		s.pass()
	}
	if len(s.records) != 4 {
		t.Fatalf("records while suspended: %v", s.reasons())
	}
	// The pod that was left in place finally answers.
	s.ack()
	s.pod.Status.Conditions[0].Status = corev1.ConditionTrue
	s.pass()
	s.advance(time.Second)
	s.ack()
	s.pass() // and it stays settled
	b = s.u.Status.RuntimeBinding
	if c := s.cond(holdfastv1.ConditionFailoverSuspended); c.Status != metav1.ConditionFalse || c.Reason != holdfastv1.ReasonRuntimeConfirmed {
		t.Fatalf("the first acknowledged renewal lifts the suspension: %+v", c)
	}
	if len(b.UnsettledRebinds) != 0 || b.LeaseState != holdfastv1.LeaseHeld || b.Epoch != 3 {
		t.Fatalf("binding after recovery: %+v", b)
	}
}

func TestTheBudgetEdges(t *testing.T) {
	t.Run("a tried standby that went unfit leaves nothing free: no eligible target, not a suspension", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		s.failedOver()
		s.silentRebind("standby-1", "uid-s1", "connection refused")
		s.free = nil // standby-1 is the node being left; standby-2 went NotReady
		s.advance(141 * time.Second)
		s.pass()
		s.pass()
		if got := s.reasons(); !slices.Equal(got, []string{EventLeaseExpired, EventNoEligibleTarget}) {
			t.Fatalf("records %v", got)
		}
		if c := s.cond(holdfastv1.ConditionFailoverSuspended); c != nil {
			t.Fatalf("no suspension without a tried free target: %+v", c)
		}
		// standby-2 comes back: it is untried, so it is tried.
		s.free = []string{"standby-2"}
		s.pass()
		if s.u.Status.RuntimeBinding.Epoch != 3 {
			t.Fatalf("an untried standby that became fit is tried: epoch %d", s.u.Status.RuntimeBinding.Epoch)
		}
	})
	t.Run("the only free standby already tried: suspended", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		s.failedOver()
		s.silentRebind("standby-1", "uid-s1", "connection refused")
		s.free = []string{"standby-1", "standby-2"}
		s.u.Status.RuntimeBinding.UnsettledRebinds = []string{"standby-1", "standby-2"}
		s.advance(141 * time.Second)
		s.pass()
		s.pass()
		if got := s.reasons(); !slices.Equal(got, []string{EventLeaseExpired, EventBudgetExhausted}) {
			t.Fatalf("records %v", got)
		}
	})
	t.Run("a person's failover empties the ledger and lifts the suspension", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		s.failedOver()
		b := s.u.Status.RuntimeBinding
		b.UnsettledRebinds = []string{"standby-1", "standby-2"}
		meta.SetStatusCondition(&s.u.Status.Conditions, metav1.Condition{Type: holdfastv1.ConditionFailoverSuspended, Status: metav1.ConditionTrue, Reason: holdfastv1.ReasonAllTargetsTried})
		s.schedule("standby-2")
		s.u.Annotations = map[string]string{holdfastv1.AnnotationFailoverTo: "standby-1", holdfastv1.AnnotationRequestID: "req-42",
			holdfastv1.AnnotationFailoverConfirmFenced: "edge-1 powered off at the breaker", holdfastv1.AnnotationFailoverConfirmEpoch: "1"}
		s.certifyRunning()
		s.pass()
		nb := s.u.Status.RuntimeBinding
		if nb.Epoch != 3 || nb.Origin != holdfastv1.OriginManual || nb.RequestID != "req-42" || len(nb.UnsettledRebinds) != 0 {
			t.Fatalf("manual binding %+v", nb)
		}
		if c := s.cond(holdfastv1.ConditionFailoverSuspended); c.Status != metav1.ConditionFalse {
			t.Fatalf("FailoverSuspended %+v", c)
		}
	})
}

func TestTheHoldOffDeadlineAndItsRemoval(t *testing.T) {
	s := newSim(t, failoverUnit())
	s.heldOffExpiry() // the expiry itself is recorded: it is what the grantor saw
	s.advance(30 * time.Second)
	p := s.pass()
	c := s.cond(holdfastv1.ConditionFailoverRequest)
	if c == nil || c.Reason != holdfastv1.ReasonLeadershipHoldOff || !strings.Contains(c.Message, "2026-09-22T10:02:20Z") {
		t.Fatalf("the wait must be shown with its deadline: %+v", c)
	}
	// The wait is an Event of its own, once, naming its end: a timeline
	// read from the Events accounts for it.
	if got := s.reasons(); !slices.Equal(got, []string{EventLeaseExpired, EventLeadershipHoldOff}) {
		t.Fatalf("no Hold and no re-bind during the hold-off, and the wait recorded: %v", got)
	}
	if r := s.records[len(s.records)-1]; r.Type != corev1.EventTypeNormal || !strings.Contains(r.Message, "until 2026-09-22T10:02:20Z") {
		t.Fatalf("the hold-off's record must name its end: %+v", r)
	}
	if p.RequeueAfter > 80*time.Second {
		t.Fatalf("the next pass must come by the deadline: %v", p.RequeueAfter)
	}
	s.advance(40 * time.Second)
	s.pass()
	if got := s.reasons(); !slices.Equal(got, []string{EventLeaseExpired, EventLeadershipHoldOff}) {
		t.Fatalf("the wait is recorded once: %v", got)
	}
	s.advance(40 * time.Second) // the deadline
	s.pass()
	if c := s.cond(holdfastv1.ConditionFailoverRequest); c != nil && c.Reason == holdfastv1.ReasonLeadershipHoldOff {
		t.Fatalf("the wait is removed on the first pass after its deadline: %+v", c)
	}
	if got := s.reasons(); !slices.Equal(got, []string{EventLeaseExpired, EventLeadershipHoldOff, EventHold}) {
		t.Fatalf("the Hold comes on the first pass after the hold-off: %v", got)
	}
	s.pass()
	if got := s.reasons(); !slices.Equal(got, []string{EventLeaseExpired, EventLeadershipHoldOff, EventHold, EventRebound}) {
		t.Fatalf("then the re-bind: %v", got)
	}
}

func TestAConfirmedFenceBypassesTheHoldOff(t *testing.T) {
	s := newSim(t, failoverUnit())
	s.heldOffExpiry()
	s.u.Annotations = map[string]string{holdfastv1.AnnotationFailoverTo: "standby-2", holdfastv1.AnnotationFailoverConfirmFenced: "edge-1 unplugged", holdfastv1.AnnotationFailoverConfirmEpoch: "1"}
	s.certifyRunning()
	s.advance(time.Second)
	s.pass()
	s.pass()
	if got := s.reasons(); !slices.Equal(got, []string{EventLeaseExpired, EventHold, EventManualRebind}) {
		t.Fatalf("records %v", got)
	}
	if _, ok := s.u.Annotations[holdfastv1.AnnotationFailoverTo]; ok {
		t.Fatal("a carried-out request is consumed")
	}
	if b := s.u.Status.RuntimeBinding; b.Epoch != 2 || b.PreviousNode != "edge-1" || placementFor(s.u, b).Node != "" {
		// The annotation is gone once consumed; the pod was created
		// before, pinned (see TestManualFailover).
		t.Fatalf("binding %+v", b)
	}
}

func TestManualFailover(t *testing.T) {
	t.Run("a runtime holding its lease needs a confirmed fence", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		s.held()
		s.u.Annotations = map[string]string{holdfastv1.AnnotationFailoverTo: "standby-1", holdfastv1.AnnotationRequestID: "req-1"}
		s.pass()
		if got := s.reasons(); !slices.Equal(got, []string{EventManualFailoverRefused}) || s.u.Status.RuntimeBinding.Epoch != 1 {
			t.Fatalf("records %v epoch %d", got, s.u.Status.RuntimeBinding.Epoch)
		}
		if r := s.records[0]; !r.Manual || r.RequestID != "req-1" || !strings.Contains(r.Message, holdfastv1.AnnotationFailoverConfirmFenced) {
			t.Fatalf("refusal %+v", r)
		}
		if c := s.cond(holdfastv1.ConditionFailoverRequest); c.Reason != holdfastv1.ReasonRefused {
			t.Fatalf("FailoverRequest %+v", c)
		}
	})
	t.Run("an Autonomy unit moves only with a confirmed fence, pinned to the node asked for", func(t *testing.T) {
		s := newSim(t, autonomyUnit())
		s.placed(true)
		s.u.Annotations = map[string]string{holdfastv1.AnnotationFailoverTo: "standby-1"}
		s.pass()
		if got := s.reasons(); !slices.Equal(got, []string{EventManualFailoverRefused}) {
			t.Fatalf("records %v", got)
		}
		s.u.Annotations = map[string]string{holdfastv1.AnnotationFailoverTo: "standby-1", holdfastv1.AnnotationFailoverConfirmFenced: "edge-1 powered off", holdfastv1.AnnotationFailoverConfirmEpoch: "1",
			holdfastv1.AnnotationRequestID: "req-7"}
		s.certifyRunning()
		s.pass() // Hold
		// Before the request is consumed the pod is built pinned.
		p := Decide(Inputs{Unit: s.u, Pod: s.pod, Running: s.running(), Now: s.now, NodeExists: func(string) bool { return true }})
		if p.Rebind == nil || p.Rebind.Node != "standby-1" {
			t.Fatalf("plan %+v", p.Rebind)
		}
		s.u.Status = p.Status
		pl := placementFor(s.u, s.u.Status.RuntimeBinding)
		if pl.Node != "standby-1" {
			t.Fatalf("the new pod is pinned to the node asked for: %+v", pl)
		}
		// A crash before the annotations were removed: the next pass
		// does not carry the request out twice.
		p2 := Decide(Inputs{Unit: s.u, Pod: nil, Now: s.now, NodeExists: func(string) bool { return true }})
		if p2.Rebind != nil || !p2.ConsumeRequest || p2.Status.RuntimeBinding.Epoch != 2 {
			t.Fatalf("a repeated pass re-bound again: %+v", p2.Rebind)
		}
	})
	t.Run("bad input changes nothing", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		s.held()
		s.u.Annotations = map[string]string{holdfastv1.AnnotationFailoverTo: "nowhere", holdfastv1.AnnotationFailoverConfirmFenced: "x", holdfastv1.AnnotationFailoverConfirmEpoch: "1"}
		s.certifyRunning()
		s.pass()
		r := s.records[0]
		if r.Reason != EventManualFailoverRefused || !strings.Contains(r.Message, `metadata.annotations[holdfast.io/failover-to]: node "nowhere" not found`) {
			t.Fatalf("refusal %+v", r)
		}
		if s.u.Status.RuntimeBinding.Epoch != 1 || s.cond(holdfastv1.ConditionHeld) != nil {
			t.Fatal("a refused request must change no binding and issue no Hold")
		}
	})
}

func TestARestartClearsTheHoldOnceTheNewRuntimeHoldsItsLeaseAndIsReady(t *testing.T) {
	s := newSim(t, failoverUnit())
	s.failedOver()
	s.u.Annotations = map[string]string{holdfastv1.AnnotationRestart: s.now.Add(time.Second).Format(time.RFC3339)}
	s.schedule("standby-1")
	s.runtimePod("uid-2", false)
	s.loop()
	s.advance(2 * time.Second)
	s.pass()
	if c := s.cond(holdfastv1.ConditionHeld); c.Status != metav1.ConditionTrue {
		t.Fatal("the Hold stays until the new runtime holds its lease")
	}
	s.ack()
	s.pass() // Held, not ready yet
	if c := s.cond(holdfastv1.ConditionHeld); c.Status != metav1.ConditionTrue {
		t.Fatal("the Hold stays until the new runtime is ready")
	}
	s.pod.Status.Conditions[0].Status = corev1.ConditionTrue
	s.pass()
	if c := s.cond(holdfastv1.ConditionHeld); c.Status != metav1.ConditionFalse || c.Reason != holdfastv1.ReasonRestarted {
		t.Fatalf("Held %+v", c)
	}
	if got := s.reasons(); got[len(got)-1] != EventRestarted {
		t.Fatalf("records %v", got)
	}
	// A restart written before a later Hold does not clear that one.
	s.u.Status.Conditions = nil
	meta.SetStatusCondition(&s.u.Status.Conditions, metav1.Condition{Type: holdfastv1.ConditionHeld, Status: metav1.ConditionTrue,
		Reason: holdfastv1.ReasonRuntimeLost, LastTransitionTime: metav1.NewTime(s.now.Add(time.Hour))})
	s.pass()
	if c := s.cond(holdfastv1.ConditionHeld); c.Status != metav1.ConditionTrue {
		t.Fatal("a stale restart cleared a later Hold")
	}
}

func TestFreeTargetsAreNamedReadySchedulableNotTheNodeLeftAndColocationPermitting(t *testing.T) {
	u := failoverUnit()
	u.Spec.Availability.Targets = &holdfastv1.FailoverTargets{Nodes: []string{"edge-1", "s-ready", "s-notready", "s-cordoned", "s-busy"},
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"holdfast.io/standby": "kiln"}}}
	u.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{Epoch: 2, Node: "edge-1"}
	ready := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	nodes := []corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "edge-1"}, Status: corev1.NodeStatus{Conditions: ready}},
		{ObjectMeta: metav1.ObjectMeta{Name: "s-ready"}, Status: corev1.NodeStatus{Conditions: ready}},
		{ObjectMeta: metav1.ObjectMeta{Name: "s-notready"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "s-cordoned"}, Spec: corev1.NodeSpec{Unschedulable: true}, Status: corev1.NodeStatus{Conditions: ready}},
		{ObjectMeta: metav1.ObjectMeta{Name: "s-busy"}, Status: corev1.NodeStatus{Conditions: ready}},
		{ObjectMeta: metav1.ObjectMeta{Name: "s-labelled", Labels: map[string]string{"holdfast.io/standby": "kiln"}}, Status: corev1.NodeStatus{Conditions: ready}},
		{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Status: corev1.NodeStatus{Conditions: ready}},
	}
	others := []corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "plant", Name: "press-2-runtime-e1", Labels: map[string]string{holdfastv1.LabelUnit: "press-2"}}, Spec: corev1.PodSpec{NodeName: "s-busy"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "plant", Name: "kiln-1-runtime-e1", Labels: map[string]string{holdfastv1.LabelUnit: "kiln-1"}}, Spec: corev1.PodSpec{NodeName: "s-labelled"}},
	}
	if got := FreeTargets(u, nodes, others); !slices.Equal(got, []string{"s-busy", "s-labelled", "s-ready"}) {
		t.Errorf("colocation Warn: %v", got)
	}
	u.Spec.Availability.Colocation = holdfastv1.ColocationRefuse
	if got := FreeTargets(u, nodes, others); !slices.Equal(got, []string{"s-labelled", "s-ready"}) {
		t.Errorf("colocation Refuse (the unit's own pod does not count): %v", got)
	}
	_, why := TargetAvailability(u, nodes, others)
	want := map[string]string{"edge-1": "the node the current binding is on", "s-notready": "NotReady", "s-cordoned": "cordoned",
		"s-busy": "hosts another unit's runtime (colocation Refuse)"}
	if !maps.Equal(why, want) {
		t.Errorf("why each eligible standby is not free: %v, want %v", why, want)
	}
	// A terminating runtime may still write: its node stays taken, as
	// StandbyColocation judges it (policy.HostsOtherRuntime).
	others[0].DeletionTimestamp = &metav1.Time{Time: t0}
	if got := FreeTargets(u, nodes, others); !slices.Equal(got, []string{"s-labelled", "s-ready"}) {
		t.Errorf("colocation Refuse with the other runtime terminating: %v", got)
	}
}

// pendingPod is the current binding's pod as no scheduler left it: no node,
// no address; with a FailedScheduling message when one is given.
func (s *sim) pendingPod(failedScheduling string) {
	b := s.u.Status.RuntimeBinding
	p := RuntimePod(s.u, b.Epoch, Placement{})
	p.UID = types.UID(fmt.Sprintf("uid-pending-%d", b.Epoch))
	p.CreationTimestamp = metav1.NewTime(s.now)
	p.Status.Phase = corev1.PodPending
	if failedScheduling != "" {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: failedScheduling}}
	}
	s.pod = p
}

// unplacedTurn lets the current binding's pod stay unplaced past its
// start-up grace and the margin after it.
func (s *sim) unplacedTurn(failedScheduling string) {
	s.pass()
	s.pendingPod(failedScheduling)
	s.pass()
	s.advance(121 * time.Second)
	s.pass() // StartupFailed
	s.advance(20 * time.Second)
	s.pass() // counted; a re-bind or the suspension
}

// TestL5UnplacedRebindCountsAgainstTheBudget: a re-bind whose pod no
// scheduler places before its start-up grace runs out counts as one attempt
// (status.runtimeBinding.unplacedRebinds), so with no working scheduler the
// unit ends suspended after as many re-binds as it has free standbys, not
// in an epoch stream; the suspension says the pods could not be placed and
// why; the first acknowledged renewal settles it.
func TestL5UnplacedRebindCountsAgainstTheBudget(t *testing.T) {
	s := newSim(t, failoverUnit())
	s.failedOver() // epoch 2, automatic, nothing placed yet
	s.unplacedTurn("0/3 nodes are available: 1 node(s) were the node being left, 2 node(s) had untolerated taint {plant/outage: }.")
	b := s.u.Status.RuntimeBinding
	if b.Epoch != 3 || len(b.UnplacedRebinds) != 1 || b.UnplacedRebinds[0].Epoch != 2 ||
		!strings.Contains(b.UnplacedRebinds[0].Message, "0/3 nodes are available") {
		t.Fatalf("after one unplaced re-bind: epoch %d, unplaced %+v", b.Epoch, b.UnplacedRebinds)
	}
	if r := s.records[len(s.records)-1]; r.Reason != EventRebound || !strings.Contains(r.Message, "1 attempt(s) left") {
		t.Fatalf("the re-bind says what is left of the budget: %s: %s", r.Reason, r.Message)
	}
	s.unplacedTurn("") // no scheduler at all
	for range 10 {
		s.advance(time.Minute)
		s.pass()
	}
	b = s.u.Status.RuntimeBinding
	if b.Epoch != 3 || len(b.UnsettledRebinds) != 0 || len(b.UnplacedRebinds) != 2 {
		t.Fatalf("suspended at epoch %d with ledger %v and unplaced %+v; want epoch 3 and two unplaced", b.Epoch, b.UnsettledRebinds, b.UnplacedRebinds)
	}
	if got := s.reasons(); !slices.Equal(got, []string{EventLeaseExpired, EventRebound, EventLeaseExpired, EventBudgetExhausted}) {
		t.Fatalf("records %v", got)
	}
	c := s.cond(holdfastv1.ConditionFailoverSuspended)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != holdfastv1.ReasonRebindsNotPlaced {
		t.Fatalf("FailoverSuspended %+v", c)
	}
	for _, want := range []string{"2 re-bind(s) were never placed on a node", "epoch 2: pod kiln-1-runtime-e2 stayed Pending, the scheduler could not place it: 0/3 nodes are available",
		"epoch 3: pod kiln-1-runtime-e3 stayed Pending and no scheduler reported on it: is holdfast-scheduler running?"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("the suspension does not say %q: %s", want, c.Message)
		}
	}
	if e := b.Expiry; e == nil || e.Epoch != 3 || !strings.Contains(e.Message, "no scheduler reported on it") {
		t.Errorf("the expiry of a pod never placed says so: %+v", e)
	}

	// The scheduler comes back and places the pod left in place; its
	// runtime answers: the ledger is settled.
	s.schedule("standby-1")
	s.runtimePod("uid-late", true)
	s.loop()
	s.ack()
	s.pass()
	b = s.u.Status.RuntimeBinding
	if len(b.UnplacedRebinds) != 0 || len(b.UnsettledRebinds) != 0 || b.LeaseState != holdfastv1.LeaseHeld {
		t.Fatalf("the first renewal settles the whole ledger: %+v", b)
	}
	if c := s.cond(holdfastv1.ConditionFailoverSuspended); c.Status != metav1.ConditionFalse {
		t.Fatalf("FailoverSuspended %+v", c)
	}
}

func TestTheBudgetCountsAReBindPlacedLateByItsNodeNotTwice(t *testing.T) {
	s := newSim(t, failoverUnit())
	s.failedOver()
	s.unplacedTurn("")
	// Epoch 3 is placed on standby-1 and never answers: one unplaced and one
	// node tried is the budget of two free standbys.
	s.silentTurn("standby-1", "uid-s1", "connection refused")
	b := s.u.Status.RuntimeBinding
	if b.Epoch != 3 || !slices.Equal(b.UnsettledRebinds, []string{"standby-1"}) || len(b.UnplacedRebinds) != 1 {
		t.Fatalf("binding %+v", b)
	}
	if c := s.cond(holdfastv1.ConditionFailoverSuspended); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("FailoverSuspended %+v", c)
	}

	// An expired unplaced pod that the scheduler places before the margin
	// is counted by its node, once.
	s2 := newSim(t, failoverUnit())
	s2.failedOver()
	s2.pass()
	s2.pendingPod("")
	s2.advance(121 * time.Second)
	s2.pass()
	s2.pass()
	if n := len(s2.u.Status.RuntimeBinding.UnplacedRebinds); n != 1 {
		t.Fatalf("unplaced %d after the expiry, want 1", n)
	}
	s2.schedule("standby-2")
	s2.pass()
	b = s2.u.Status.RuntimeBinding
	if len(b.UnplacedRebinds) != 0 || !slices.Equal(b.UnsettledRebinds, []string{"standby-2"}) {
		t.Fatalf("placed late: unplaced %+v, ledger %v", b.UnplacedRebinds, b.UnsettledRebinds)
	}
}

// TestTheSuspensionNamesEveryStandbyTriedAndWhy: the message names each
// standby in the ledger (the current binding's with its verdict), and each
// eligible standby that is not free and why, not only the free ones.
func TestTheSuspensionNamesEveryStandbyTriedAndWhy(t *testing.T) {
	u := failoverUnit()
	u.Spec.Availability.Targets.Nodes = []string{"edge-b", "edge-c", "edge-d"}
	s := newSim(t, u)
	s.free = []string{"edge-b", "edge-c", "edge-d"}
	s.failedOver()
	for i, node := range []string{"edge-b", "edge-c"} {
		s.silentRebind(node, fmt.Sprintf("uid-%d", i), "dial tcp 10.0.0.7:9443: connect: connection refused")
		s.advance(121 * time.Second)
		s.pass()
		s.advance(20 * time.Second)
		s.free, s.unavailable = []string{"edge-c", "edge-d"}, map[string]string{"edge-b": "the node the current binding is on"}
		if i == 1 {
			// edge-c is where the unit now is; edge-d went NotReady.
			s.free, s.unavailable = []string{"edge-b"}, map[string]string{"edge-c": "the node the current binding is on", "edge-d": "NotReady"}
		}
		s.pass()
	}
	c := s.cond(holdfastv1.ConditionFailoverSuspended)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != holdfastv1.ReasonAllTargetsTried {
		t.Fatalf("FailoverSuspended %+v (records %v)", c, s.reasons())
	}
	for _, want := range []string{
		"edge-b: tried since the runtime was last confirmed, did not take the lease",
		"edge-c: tried at epoch 3, the current binding: StartupFailed, last renewal attempt Unreachable: dial tcp 10.0.0.7:9443: connect: connection refused",
		"edge-d: NotReady",
		"Pod kiln-1-runtime-e3 stays at epoch 3",
	} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("the suspension does not say %q:\n%s", want, c.Message)
		}
	}
	if r := s.records[len(s.records)-1]; r.Reason != EventBudgetExhausted || r.Message != c.Message {
		t.Fatalf("the Event and audit line carry the same message: %s: %s", r.Reason, r.Message)
	}
}

func TestTheHoldOffIsARebindPendingForTheWebhook(t *testing.T) {
	s := newSim(t, failoverUnit())
	s.heldOffExpiry()
	s.pass()
	if !policy.RebindPending(s.u) {
		t.Fatal("the webhook's RebindPending must read the controller's hold-off and expiry the way the controller writes them")
	}
}

// TestRuntimeReadyNamesTheBindingsPod: the pass that re-binds read the old
// binding's pod, still Ready as the apiserver last heard from its
// partitioned kubelet; the condition it writes speaks of the new binding's
// pod, which does not exist yet, never of the old one (an automatic re-bind
// and a person's).
func TestRuntimeReadyNamesTheBindingsPod(t *testing.T) {
	check := func(t *testing.T, s *sim) {
		t.Helper()
		b := s.u.Status.RuntimeBinding
		c := s.cond(holdfastv1.ConditionRuntimeReady)
		if b.Epoch != 2 || c == nil || c.Status != metav1.ConditionFalse || c.Reason != holdfastv1.ReasonPodMissing || !strings.Contains(c.Message, b.Pod) {
			t.Fatalf("after the re-bind to %s (epoch %d): RuntimeReady %+v, want False PodMissing naming it", b.Pod, b.Epoch, c)
		}
	}
	t.Run("automatic", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		s.failedOver()
		check(t, s)
	})
	t.Run("manual", func(t *testing.T) {
		u := failoverUnit()
		u.Spec.Availability.Mode = holdfastv1.Autonomy
		s := newSim(t, u)
		s.pass()
		s.schedule("edge-1")
		s.runtimePod("uid-1", true)
		s.pass()
		if c := s.cond(holdfastv1.ConditionRuntimeReady); c == nil || c.Status != metav1.ConditionTrue {
			t.Fatalf("setup: RuntimeReady %+v", c)
		}
		s.u.Annotations = map[string]string{holdfastv1.AnnotationFailoverTo: "standby-1", holdfastv1.AnnotationFailoverConfirmFenced: "edge-1 powered off", holdfastv1.AnnotationFailoverConfirmEpoch: "1"}
		s.certifyRunning()
		for i := 0; i < 3 && s.u.Status.RuntimeBinding.Epoch == 1; i++ {
			s.pass() // the Hold, then the re-bind
		}
		check(t, s)
	})
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
