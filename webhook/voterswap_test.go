package webhook

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

func swap(name, out, in string, phase holdfastv1.SwapPhase) holdfastv1.VoterSwap {
	return holdfastv1.VoterSwap{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: holdfastv1.VoterSwapSpec{Outgoing: out, Incoming: in, Origin: holdfastv1.SwapManual, Reason: "r"}, Status: holdfastv1.VoterSwapStatus{Phase: phase}}
}

func gatesOK() policy.GateInput {
	ready := func(name string, labels, ann map[string]string) *corev1.Node {
		n := readyNode(name, true, labels)
		n.Annotations = ann
		return &n
	}
	return policy.GateInput{
		Policy: &holdfastv1.VoterPolicy{Spec: holdfastv1.VoterPolicySpec{TargetVoters: 3}, Status: holdfastv1.VoterPolicyStatus{
			Voters: []string{"cp-1", "cp-2", "cp-3"}, Leader: "cp-1", ObservedTime: &metav1.Time{Time: t0},
			Conditions: []metav1.Condition{{Type: holdfastv1.ConditionEtcdHealthy, Status: metav1.ConditionTrue}}}},
		Nodes: map[string]*corev1.Node{"cp-1": ready("cp-1", nil, nil), "cp-2": ready("cp-2", nil, nil), "cp-3": ready("cp-3", nil, nil),
			"edge-7": ready("edge-7", map[string]string{holdfastv1.LabelVoterEligible: "true"}, map[string]string{holdfastv1.AnnotationProvisioned: "true"})},
		Now: t0,
	}
}

func TestVoterSwapRules(t *testing.T) {
	o := testOptions()
	s := swap("new", "cp-3", "edge-7", "")
	auto := s
	auto.Spec.Origin = holdfastv1.SwapAutomatic
	for _, tc := range []struct {
		name   string
		r      requester
		s      holdfastv1.VoterSwap
		others []holdfastv1.VoterSwap
		want   []string
		audit  bool
	}{
		{"admin's manual swap", admin, s, []holdfastv1.VoterSwap{swap("old", "cp-1", "edge-7", holdfastv1.SwapSucceeded)}, nil, true},
		{"controller's automatic swap", controller, auto, nil, nil, false},
		{"operator's manual swap", operator, s, nil, []string{
			"spec: Forbidden: user olivia (groups plant-operators, system:authenticated) may not request a manual swap: requires membership in one of the groups [system:masters]"}, false},
		{"admin's automatic swap", admin, auto, nil, []string{
			"spec.origin: Forbidden: only the holdfast voter controller (system:serviceaccount:holdfast-system:holdfast-controller) creates Automatic swaps; a person's swap is Manual"}, false},
		{"a second swap while one is pending and one running", admin, s, []holdfastv1.VoterSwap{swap("a", "cp-1", "", ""), func() holdfastv1.VoterSwap {
			x := swap("b", "cp-2", "edge-8", holdfastv1.SwapRunning)
			x.Status.Step = holdfastv1.StepRegate
			return x
		}()}, []string{
			"spec: Forbidden: VoterSwap a (cp-1 out, the scheduler's pick in) is Pending; one swap at a time: wait for it to finish",
			"spec: Forbidden: VoterSwap b (cp-2 out, edge-8 in) is Running at step Regate; one swap at a time: wait for it to finish"}, false},
		{"malformed node names", admin, swap("x", "CP 3", "", ""), nil, []string{
			`spec.outgoing: Invalid value: "CP 3": not a node name: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, audits := checkVoterSwapCreate(o, tc.r, &tc.s, tc.others, gatesOK())
			expect(t, v, tc.want...)
			if (len(audits) == 1) != tc.audit {
				t.Fatalf("audit records %+v, want one: %v", audits, tc.audit)
			}
		})
	}
	changed := s
	changed.Spec.Incoming = "edge-8"
	expect(t, checkVoterSwapUpdate(&s, &changed), "spec: Forbidden: is immutable: delete this VoterSwap and create a new one")
	labelled := s
	labelled.Labels = map[string]string{"a": "b"}
	expect(t, checkVoterSwapUpdate(&s, &labelled))

	running := swap("r", "cp-3", "edge-7", holdfastv1.SwapRunning)
	running.Status.SwapID, running.Status.Step = "20261129T200000Z-cp-3-edge-7", holdfastv1.StepRemoveMember
	expect(t, checkVoterSwapDelete(&running),
		"status.phase: Forbidden: swap 20261129T200000Z-cp-3-edge-7 is running (step RemoveMember); a swap in progress is always finished or rolled back, delete it afterwards")
	started := swap("p", "cp-3", "edge-7", holdfastv1.SwapPending)
	started.Status.StartedAt = &metav1.Time{Time: t0}
	if checkVoterSwapDelete(&started).allowed() {
		t.Fatal("a Pending swap that took the Lease is running")
	}
	for _, p := range []holdfastv1.SwapPhase{"", holdfastv1.SwapPending, holdfastv1.SwapSucceeded, holdfastv1.SwapRolledBack, holdfastv1.SwapAbandoned, holdfastv1.SwapRefused} {
		x := swap("p", "cp-3", "edge-7", p)
		if !checkVoterSwapDelete(&x).allowed() {
			t.Errorf("a %q swap that never started may be deleted", p)
		}
	}
}
