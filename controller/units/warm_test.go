package units

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/grantor"
	"github.com/holdfast-io/holdfast/policy"
)

// warmSim is sim with the unit's warm standbys in the test's hands.
type warmSim struct {
	*sim
	warm WarmStandbys
}

func newWarmSim(t *testing.T) *warmSim {
	u := failoverUnit()
	u.Spec.Availability.WarmStandby = true
	return &warmSim{sim: newSim(t, u)}
}

// pass is sim.pass with the warm standbys among the inputs.
func (s *warmSim) pass() Plan {
	s.t.Helper()
	p := Decide(Inputs{Unit: s.u, Pod: s.pod, Obs: s.obs, Now: s.now, HoldOffUntil: s.holdOff, FreeTargets: s.free, Unavailable: s.unavailable,
		NodeExists: func(n string) bool { return n != "nowhere" }, Warm: s.warm})
	s.u.Status = p.Status
	if p.Record != nil {
		s.records = append(s.records, p.Record)
	}
	if p.Rebind != nil {
		s.pod, s.obs = nil, nil
	}
	return p
}

// warmPod keeps a warm pod on node, ready or not.
func (s *warmSim) warmPod(node string, ready bool) WarmPod {
	if s.warm.Pods == nil {
		s.warm.Pods = map[string]WarmPod{}
	}
	w := WarmPod{Name: holdfastv1.WarmPodName(s.u.Name, node), UID: types.UID("warm-uid-" + node), Node: node, Ready: ready}
	if !ready {
		w.Why = "pod " + w.Name + " is not ready"
	}
	s.warm.Pods[node] = w
	s.warm.Due = slices.Sorted(func(yield func(string) bool) {
		for n := range s.warm.Pods {
			if !yield(n) {
				return
			}
		}
	})
	return w
}

// toMargin brings a held unit at epoch 1 on edge-1 to the instant before
// its re-bind margin has elapsed: expiry at +30s, Hold at +45s, margin
// (20s) due at +50s.
func (s *warmSim) toMargin() {
	s.t.Helper()
	s.held()
	s.advance(30 * time.Second)
	s.fail(grantor.Unreachable, "context deadline exceeded")
	s.pass()
	s.advance(15 * time.Second)
	s.pass()
	s.advance(5*time.Second - time.Millisecond)
	s.pass()
	if got := s.reasons(); !slices.Equal(got, []string{EventLeaseExpired, EventHold}) {
		s.t.Fatalf("setup: records %v, want the expiry and the Hold only", got)
	}
	s.records = nil
}

func TestAnAutomaticRebindPromotesAReadyWarmPodInOneWriteAfterTheMargin(t *testing.T) {
	s := newWarmSim(t)
	s.warmPod("standby-1", false)
	w := s.warmPod("standby-2", true)
	s.toMargin()
	if b := s.u.Status.RuntimeBinding; b.Epoch != 1 {
		t.Fatalf("a ready warm pod is promoted no earlier than a cold re-bind: binding %+v before the margin", b)
	}
	s.advance(time.Millisecond)
	p := s.pass()
	if p.Rebind == nil || p.Rebind.Warm == nil || p.Rebind.Warm.Name != w.Name {
		t.Fatalf("after the margin the ready warm pod on standby-2 is promoted: %+v", p.Rebind)
	}
	b := s.u.Status.RuntimeBinding
	if b.Epoch != 2 || b.Node != "standby-2" || b.Pod != w.Name || b.PodUID != string(w.UID) ||
		b.BoundAt == nil || !b.BoundAt.Time.Equal(s.now) || b.FirstAddressAt == nil || !b.FirstAddressAt.Time.Equal(s.now) {
		t.Fatalf("the promotion's one write names epoch, node, warm pod, its UID, boundAt and the start of its grace: %+v", b)
	}
	if b.Origin != holdfastv1.OriginAutomatic || b.PreviousNode != "edge-1" || !b.LeaseStateCarried() {
		t.Fatalf("an automatic re-bind as a cold one is: %+v", b)
	}
	if got := s.reasons(); !slices.Equal(got, []string{EventRebound}) || !strings.Contains(s.records[0].Message, "promoting warm pod "+w.Name) {
		t.Fatalf("records %v %q", got, s.records[0].Message)
	}
	// The next pass counts the standby against the budget (L5), as the
	// scheduler's record of a cold re-bind's node does.
	s.pass()
	if b := s.u.Status.RuntimeBinding; !slices.Equal(b.UnsettledRebinds, []string{"standby-2"}) {
		t.Fatalf("ledger %v, want standby-2", b.UnsettledRebinds)
	}
}

func TestAWarmPodIsPromotedOnlyOnAnUntriedFreeStandby(t *testing.T) {
	for name, c := range map[string]struct {
		setup func(*warmSim)
	}{
		"not ready": {func(s *warmSim) { s.warmPod("standby-2", false) }},
		"standby not free (NotReady, cordoned, colocation)": {func(s *warmSim) {
			s.warmPod("standby-2", true)
			s.free = []string{"standby-1"}
		}},
		"standby already tried since the runtime was confirmed": {func(s *warmSim) {
			s.warmPod("standby-2", true)
			s.u.Status.RuntimeBinding.UnsettledRebinds = []string{"standby-2"}
		}},
	} {
		t.Run(name, func(t *testing.T) {
			s := newWarmSim(t)
			s.toMargin()
			c.setup(s)
			s.advance(time.Millisecond)
			p := s.pass()
			if p.Rebind == nil || p.Rebind.Warm != nil {
				t.Fatalf("the re-bind must be cold: %+v", p.Rebind)
			}
			b := s.u.Status.RuntimeBinding
			if b.Node != "" || b.PodUID != "" || b.Pod != PodName(s.u.Name, b.Epoch) {
				t.Fatalf("a cold re-bind names a new runtime pod and no node: %+v", b)
			}
		})
	}
}

func TestAPromotedWarmPodThatNeverAnswersIsAReplacementThatNeverCameUp(t *testing.T) {
	s := newWarmSim(t)
	w := s.warmPod("standby-2", true)
	s.toMargin()
	s.advance(time.Millisecond)
	s.pass()
	promoted := s.now
	// The promoted pod, labelled, at its address; every grant refused.
	s.runtimePod(string(w.UID), true)
	s.pod.Name = w.Name
	s.pod.CreationTimestamp = metav1.NewTime(promoted.Add(-time.Hour))
	s.loop()
	s.fail(grantor.Refused, "409")
	s.records = nil
	s.advance(119 * time.Second)
	s.pass()
	if len(s.records) != 0 {
		t.Fatalf("within the start-up grace from the promotion nothing is recorded: %v", s.reasons())
	}
	s.advance(time.Second)
	s.pass()
	b := s.u.Status.RuntimeBinding
	if got := s.reasons(); !slices.Equal(got, []string{EventLeaseExpired}) || b.Expiry.Verdict != holdfastv1.VerdictStartupFailed || b.Expiry.At.Time.Before(promoted.Add(120*time.Second)) {
		t.Fatalf("StartupFailed at the promotion + grace: %v %+v", got, b.Expiry)
	}
}

func TestTheWarmStandbyConditionCountsReadyWarmPods(t *testing.T) {
	s := newWarmSim(t)
	s.warmPod("standby-1", true)
	s.warmPod("standby-2", false)
	s.held()
	s.pass()
	c := s.cond(holdfastv1.ConditionWarmStandby)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != holdfastv1.ReasonWarmNotAllReady ||
		!strings.Contains(c.Message, "1 of 2") || !strings.Contains(c.Message, "standby-2: pod ") {
		t.Fatalf("WarmStandby %+v", c)
	}
	s.warmPod("standby-2", true)
	s.pass()
	if c := s.cond(holdfastv1.ConditionWarmStandby); c.Status != metav1.ConditionTrue || c.Reason != holdfastv1.ReasonWarmAllReady || !strings.Contains(c.Message, "2 of 2") {
		t.Fatalf("WarmStandby %+v", c)
	}
	s.u.Spec.Availability.WarmStandby = false
	s.pass()
	if c := s.cond(holdfastv1.ConditionWarmStandby); c != nil {
		t.Fatalf("a unit without warm standbys shows no WarmStandby condition: %+v", c)
	}
}

func TestWarmPodsAreDueOnEveryEligibleStandbyButTheBoundNodeOnceTheBindingIsPlaced(t *testing.T) {
	u := failoverUnit()
	u.Spec.Availability.WarmStandby = true
	nodes := []corev1.Node{{}, {}, {}, {}}
	for i, n := range []string{"standby-2", "edge-1", "standby-1", "elsewhere"} {
		nodes[i].Name = n
	}
	if d := warmDue(u, nodes); d != nil {
		t.Fatalf("no binding yet: due %v", d)
	}
	u.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{Epoch: 3, Pod: PodName(u.Name, 3)}
	if d := warmDue(u, nodes); d != nil {
		t.Fatalf("a binding waiting for the scheduler: due %v", d)
	}
	u.Status.RuntimeBinding.Node = "standby-1"
	if d := warmDue(u, nodes); !slices.Equal(d, []string{"standby-2"}) {
		t.Fatalf("due %v, want standby-2 (standby-1 runs the runtime)", d)
	}
	u.Spec.Availability.WarmStandby = false
	if d := warmDue(u, nodes); d != nil {
		t.Fatalf("warmStandby off: due %v", d)
	}
}

func TestAWarmPodIsARuntimePodWithoutAnEpochOnItsStandby(t *testing.T) {
	u := failoverUnit()
	u.Spec.Availability.WarmStandby = true
	p := WarmRuntimePod(u, "standby-2")
	if p.Name != holdfastv1.WarmPodName(u.Name, "standby-2") || p.Labels[holdfastv1.LabelWarmStandby] != "standby-2" || p.Labels[holdfastv1.LabelUnit] != u.Name {
		t.Fatalf("name and labels: %s %v", p.Name, p.Labels)
	}
	if _, ok := p.Labels[holdfastv1.LabelEpoch]; ok || !IsWarmPod(p) {
		t.Fatalf("a warm pod carries no epoch: %v", p.Labels)
	}
	if p.Spec.SchedulerName != holdfastv1.SchedulerName || p.Spec.NodeName != "" || len(p.OwnerReferences) != 1 || p.OwnerReferences[0].UID != u.UID {
		t.Fatalf("scheduled by holdfast-scheduler, owned by the Unit: %+v", p.Spec)
	}
	var warm bool
	for _, e := range p.Spec.Containers[0].Env {
		warm = warm || (e.Name == holdfastv1.RuntimeEnvWarmStandby && e.Value == "true")
	}
	if !warm {
		t.Fatal("the runtime is told it is a warm standby")
	}
	cold := RuntimePod(u, 7, Placement{Node: "standby-2"})
	if p.Spec.Containers[0].Image != cold.Spec.Containers[0].Image || !slices.Equal(p.Spec.Containers[0].Ports, cold.Spec.Containers[0].Ports) ||
		len(p.Spec.Containers[0].Env) != len(cold.Spec.Containers[0].Env)+1 {
		t.Fatal("otherwise the runtime pod of a binding")
	}
}

func TestGrantsGoOnlyToTheLabelledWarmPodTheBindingNames(t *testing.T) {
	u := failoverUnit()
	u.Spec.Availability.WarmStandby = true
	pod := WarmRuntimePod(u, "standby-2")
	pod.UID = "warm-uid"
	pod.Status.PodIP = "10.0.0.9"
	pr := policy.NewPromise(u)
	u.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{Epoch: 4, Node: "standby-2", Pod: pod.Name, PodUID: "warm-uid", Promise: &pr}
	if _, ok := LeaseTargetFor(u, pod); ok {
		t.Fatal("no grant before the pod carries the binding's epoch (step 2 before step 3)")
	}
	pod.Labels[holdfastv1.LabelEpoch] = "4"
	tg, ok := LeaseTargetFor(u, pod)
	if !ok || tg.Epoch != 4 || tg.Address != "10.0.0.9:9443" || tg.PodUID != "warm-uid" {
		t.Fatalf("the labelled promoted pod is the target: %+v %v", tg, ok)
	}
	other := pod.DeepCopy()
	other.UID = "another-pod-of-that-name"
	if _, ok := LeaseTargetFor(u, other); ok {
		t.Fatal("a pod of the promoted pod's name and another UID is granted nothing")
	}
}
