package units

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

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
