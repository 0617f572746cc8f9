package units

import (
	"fmt"
	"slices"
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
