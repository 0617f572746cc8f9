package voters

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// heartbeat is the kubelet's status report: the Ready condition's
// heartbeat moves to at, nothing else changes.
func heartbeat(n *corev1.Node, at time.Time) {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			n.Status.Conditions[i].LastHeartbeatTime = metav1.NewTime(at)
		}
	}
}

// TestASwapStepGoesOnAtTheEventOfItsCondition plays the controller's work
// queue by hand: a swap waits at a step for a condition of a Node (a Ready
// heartbeat after its host's report, the node plugin's report, its
// tombstone); the Node update that meets the condition is an event the
// pass predicate lets through, and the pass it runs takes the step's
// action. Between the wait and the action no clock moves and no
// RunningEvery elapses: the step goes on at its condition, never at the
// next periodic pass. A wait for a Node condition is not one on etcd (it
// gets no faster polling), and a bare heartbeat of a Node no swap step
// waits on runs no pass.
func TestASwapStepGoesOnAtTheEventOfItsCondition(t *testing.T) {
	started := t0.Add(-time.Minute)
	finishing := func(o *Observation) string {
		s := running(o, holdfastv1.StepFinishDemote)
		s.Status.OutgoingMemberID = HexID(memberID("n1"))
		s.Status.Deadline = &metav1.Time{Time: t0.Add(time.Duration(o.Policy.Spec.OperationTimeoutSeconds) * time.Second)}
		o.Etcd.Members = o.Etcd.Members[1:]
		withVoter(o)
		setLeader(o, "n2")
		delete(o.Nodes["n1"].Labels, holdfastv1.LabelEtcdRole)
		cordon(o.Nodes["n1"], swapID)
		setStep(o.Nodes["n1"], holdfastv1.RoleAgent, swapID, holdfastv1.RoleStepStepDown)
		setReport(o.Nodes["n1"], swapID, holdfastv1.RoleStepStepDown, holdfastv1.ActuatorDone, nil, t0.Add(-time.Minute))
		return "n1"
	}
	for _, tc := range []struct {
		name  string
		setup func(o *Observation) string
		// meet changes the waiting Node as its host or kubelet would.
		meet     func(n *corev1.Node)
		waitFor  string
		wantKind Kind
	}{
		{"promote: a Ready heartbeat after the server's start", func(o *Observation) string {
			s := running(o, holdfastv1.StepPromote)
			s.Status.IncomingMemberID = HexID(memberID("n4"))
			s.Status.History = append(s.Status.History, rec(holdfastv1.StepPromote, holdfastv1.SwapReasonPromoted, holdfastv1.SwapReasonPromoted, "promoted"))
			withVoter(o)
			n := o.Nodes["n4"]
			cordon(n, swapID)
			n.Labels[holdfastv1.LabelEtcdRole] = "true"
			setStep(n, holdfastv1.RoleServer, swapID, holdfastv1.RoleStepPromote)
			setReport(n, swapID, holdfastv1.RoleStepPromote, holdfastv1.ActuatorDone, &started, started)
			heartbeat(n, started.Add(-time.Second))
			return "n4"
		}, func(n *corev1.Node) { heartbeat(n, t0) }, holdfastv1.SwapReasonWaitingForNodeReady, Uncordon},
		{"step-down: the node plugin reports it done", func(o *Observation) string {
			s := running(o, holdfastv1.StepStepDown)
			s.Status.IncomingMemberID = HexID(memberID("n4"))
			s.Status.OutgoingMemberID = HexID(memberID("n1"))
			withVoter(o)
			setLeader(o, "n2")
			cordon(o.Nodes["n1"], swapID)
			setStep(o.Nodes["n1"], holdfastv1.RoleAgent, swapID, holdfastv1.RoleStepStepDown)
			return "n1"
		}, func(n *corev1.Node) {
			setReport(n, swapID, holdfastv1.RoleStepStepDown, holdfastv1.ActuatorDone, nil, t0)
		}, holdfastv1.SwapReasonWaitingForNodePlugin, Record},
		{"finish-demote: the host's tombstone on its Node", finishing, func(n *corev1.Node) {
			n.Annotations[holdfastv1.AnnotationTombstone] = `{"memberID":"1001","clusterID":"c1"}`
		}, holdfastv1.SwapReasonWaitingForNodePlugin, SetRoleStep},
		{"finish-demote: a Ready heartbeat after the host's finish", func(o *Observation) string {
			out := finishing(o)
			n := o.Nodes[out]
			setStep(n, holdfastv1.RoleAgent, swapID, holdfastv1.RoleStepFinishDemote)
			setReport(n, swapID, holdfastv1.RoleStepFinishDemote, holdfastv1.ActuatorDone, nil, t0.Add(-2*time.Second))
			heartbeat(n, t0.Add(-3*time.Second))
			return out
		}, func(n *corev1.Node) { heartbeat(n, t0.Add(-time.Second)) }, holdfastv1.SwapReasonWaitingForNodePlugin, Uncordon},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := fixture()
			node := tc.setup(o)
			d := Next(o)
			if d.Action != nil || d.WaitReason != tc.waitFor {
				t.Fatalf("before its condition: %s, want a wait for %s", describeDecision(d), tc.waitFor)
			}
			if d.Polled {
				t.Fatalf("a wait for %s is polled as one on etcd: %s", node, d.Waiting)
			}
			old := o.Nodes[node].DeepCopy()
			tc.meet(o.Nodes[node])
			if !nodeMatters(event.UpdateEvent{ObjectOld: old, ObjectNew: o.Nodes[node]}) {
				t.Fatalf("the update of %s that meets the condition runs no pass: the step would wait for the next periodic one", node)
			}
			if d := Next(o); d.Action == nil || d.Action.Kind != tc.wantKind {
				t.Fatalf("the pass the event runs: %s, want %s", describeDecision(d), tc.wantKind)
			}
		})
	}
	t.Run("a bare heartbeat of a Node with no role step runs no pass", func(t *testing.T) {
		o := fixture()
		n := o.Nodes["n2"]
		old := n.DeepCopy()
		heartbeat(n, t0)
		if nodeMatters(event.UpdateEvent{ObjectOld: old, ObjectNew: n}) {
			t.Fatal("a heartbeat of n2, which no swap waits on, runs a pass")
		}
	})
}

// TestAWaitOnEtcdIsLookedAtAgainAfterEtcdEvery: etcd's own state sends no
// event, so a swap waiting on it (a started server whose learner has not
// joined, a promotion etcd refuses until the learner caught up) is looked
// at again after EtcdEvery, not after RunningEvery, and a refused promotion
// is not backed off as an error. Every other wait keeps RunningEvery.
func TestAWaitOnEtcdIsLookedAtAgainAfterEtcdEvery(t *testing.T) {
	r := &Reconciler{RunningEvery: 2 * time.Second, EtcdEvery: 250 * time.Millisecond}
	o := fixture()
	s := running(o, holdfastv1.StepPromote)
	s.Status.IncomingMemberID = HexID(memberID("n4"))
	withLearner(o, false)
	n := o.Nodes["n4"]
	cordon(n, swapID)
	started := t0.Add(-time.Second)
	setStep(n, holdfastv1.RoleServer, swapID, holdfastv1.RoleStepPromote)
	setReport(n, swapID, holdfastv1.RoleStepPromote, holdfastv1.ActuatorDone, &started, started)
	d := Next(o)
	if d.Action != nil || d.WaitReason != holdfastv1.SwapReasonLearnerNotStarted || !d.Polled {
		t.Fatalf("a started server whose learner has not joined: %s, want a wait on etcd for %s", describeDecision(d), holdfastv1.SwapReasonLearnerNotStarted)
	}
	if got := r.nextPassIn(d, r.RunningEvery); got != r.EtcdEvery {
		t.Errorf("the next pass of a wait on etcd in %v, want EtcdEvery %v", got, r.EtcdEvery)
	}
	if got := r.nextPassIn(Decision{Waiting: "the node plugin", WaitReason: holdfastv1.SwapReasonWaitingForNodePlugin}, r.RunningEvery); got != r.RunningEvery {
		t.Errorf("the next pass of a wait on a Node in %v, want RunningEvery %v", got, r.RunningEvery)
	}

	promote := &Action{Kind: PromoteMember, Node: "n4", Member: memberID("n4")}
	refused := fmt.Errorf("promoting member %s of n4: %w", HexID(memberID("n4")), rpctypes.ErrMemberLearnerNotReady)
	if !learnerNotReady(promote, refused) {
		t.Errorf("%v is not read as a learner still catching up", refused)
	}
	for _, tc := range []struct {
		a   *Action
		err error
	}{
		{promote, errors.New("context deadline exceeded")},
		{promote, rpctypes.ErrMemberNotLearner},
		{&Action{Kind: RemoveMember}, rpctypes.ErrMemberLearnerNotReady},
	} {
		if learnerNotReady(tc.a, tc.err) {
			t.Errorf("%s failing with %v is read as a learner catching up", tc.a.Kind, tc.err)
		}
	}
}

func describeDecision(d Decision) string {
	if d.Action == nil {
		return fmt.Sprintf("waits for %s (%s)", d.WaitReason, d.Waiting)
	}
	return fmt.Sprintf("action %s on %s", d.Action.Kind, d.Action.Node)
}

// TestABudgetRefusalAndAFailedPassComeBackWithinRunningEvery: passes renew
// the swap Lease, so nothing may put the next pass past RunningEvery while a
// swap runs. An eviction a disruption budget refuses is the cluster's state,
// not an error (Pass retries it on the next pass); any other failed pass is
// backed off, but never beyond RunningEvery (controller-runtime's default
// backoff reaches 1000 s, past the Lease's 30 s).
func TestABudgetRefusalAndAFailedPassComeBackWithinRunningEvery(t *testing.T) {
	evict := &Action{Kind: Evict, Node: "n4"}
	refused := fmt.Errorf("evicting holdfast-system/holdfast-scheduler-1: %w: %w", ErrBudgetRefused,
		errors.New("Cannot evict pod as it would violate the pod's disruption budget."))
	if !budgetRefused(evict, errors.Join(refused)) {
		t.Errorf("%v is not read as a disruption budget's refusal", refused)
	}
	for _, tc := range []struct {
		a   *Action
		err error
	}{
		{evict, errors.New("evicting holdfast-system/x: connection refused")},
		{&Action{Kind: Cordon}, refused},
	} {
		if budgetRefused(tc.a, tc.err) {
			t.Errorf("%s failing with %v is read as a disruption budget's refusal", tc.a.Kind, tc.err)
		}
	}

	r := &Reconciler{}
	r.defaults()
	o := r.controllerOptions()
	if o.MaxConcurrentReconciles != 1 {
		t.Errorf("MaxConcurrentReconciles %d, want 1: one pass at a time", o.MaxConcurrentReconciles)
	}
	if o.RateLimiter == nil {
		t.Fatal("no rate limiter of the controller's own: controller-runtime's default backs a failing pass off to 1000 s, past the swap Lease")
	}
	var last time.Duration
	for i := 0; i < 40; i++ {
		last = o.RateLimiter.When(passKey)
	}
	if last > r.RunningEvery || r.RunningEvery >= r.Settings.LeaseDuration {
		t.Errorf("the 40th failed pass in a row comes back after %v, want at most RunningEvery %v, itself below the swap Lease's %v",
			last, r.RunningEvery, r.Settings.LeaseDuration)
	}
}
