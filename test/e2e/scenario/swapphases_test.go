package scenario

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// TestSwapPhasesAccountForEverySecondOfTheSwap: the phases of a swap read
// from its history and the node plugins' reports name each record's wait,
// span from the record before it (a retry and a node's report are marks
// that split no phase), and add up to the swap's creation -> finish.
func TestSwapPhasesAccountForEverySecondOfTheSwap(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	at := func(s int) metav1.Time { return metav1.NewTime(t0.Add(time.Duration(s) * time.Second)) }
	r := func(s int, step holdfastv1.SwapStep, outcome, reason string) holdfastv1.SwapStepRecord {
		return holdfastv1.SwapStepRecord{At: at(s), Step: step, Outcome: outcome, Reason: reason}
	}
	const id = "20261202T120001Z-n1-n4"
	s := &holdfastv1.VoterSwap{ObjectMeta: metav1.ObjectMeta{Name: "s1", CreationTimestamp: at(0)},
		Spec: holdfastv1.VoterSwapSpec{Outgoing: "n1", Incoming: "n4"},
		Status: holdfastv1.VoterSwapStatus{SwapID: id, Incoming: "n4", Phase: holdfastv1.SwapSucceeded, FinishedAt: &metav1.Time{Time: t0.Add(40 * time.Second)},
			History: []holdfastv1.SwapStepRecord{
				r(1, holdfastv1.StepGates, holdfastv1.SwapOutcomeDone, holdfastv1.SwapReasonGatesPassed),
				r(2, holdfastv1.StepGates, holdfastv1.SwapOutcomeDone, holdfastv1.SwapReasonGatesPassed),
				r(3, holdfastv1.StepPromote, holdfastv1.SwapOutcomeStarted, ""),
				r(4, holdfastv1.StepPromote, holdfastv1.SwapReasonCordoned, ""),
				r(5, holdfastv1.StepPromote, holdfastv1.SwapReasonLearnerAdded, holdfastv1.SwapReasonLearnerAdded),
				r(6, holdfastv1.StepPromote, holdfastv1.SwapReasonServerRequested, ""),
				r(8, holdfastv1.StepPromote, holdfastv1.SwapOutcomeRetried, holdfastv1.SwapReasonPromoted),
				r(10, holdfastv1.StepPromote, holdfastv1.SwapReasonPromoted, holdfastv1.SwapReasonPromoted),
				r(14, holdfastv1.StepPromote, holdfastv1.SwapOutcomeDone, holdfastv1.SwapReasonPromoted),
				r(15, holdfastv1.StepRegate, holdfastv1.SwapOutcomeDone, holdfastv1.SwapReasonGatesPassed),
				r(16, holdfastv1.StepStepDown, holdfastv1.SwapReasonCordoned, ""),
				r(17, holdfastv1.StepStepDown, holdfastv1.SwapReasonAgentRequested, ""),
				r(20, holdfastv1.StepStepDown, holdfastv1.SwapOutcomeDone, ""),
				r(21, holdfastv1.StepRemoveMember, holdfastv1.SwapOutcomeDone, holdfastv1.SwapReasonMemberRemoved),
				r(23, holdfastv1.StepFinishDemote, holdfastv1.SwapReasonAgentRequested, ""),
				r(24, holdfastv1.StepFinishDemote, holdfastv1.SwapReasonLabelsCleared, ""),
				r(38, holdfastv1.StepFinishDemote, holdfastv1.SwapOutcomeDone, ""),
				r(40, holdfastv1.StepRelease, string(holdfastv1.SwapSucceeded), holdfastv1.SwapReasonReleased),
			}}}
	report := func(name, step string, startedAt *metav1.Time, at metav1.Time) *corev1.Node {
		b, _ := json.Marshal(holdfastv1.ActuatorReport{Swap: id, Step: step, Phase: holdfastv1.ActuatorDone, StartedAt: startedAt, At: at})
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{holdfastv1.AnnotationActuator: string(b)}}}
	}
	started := at(7)
	nodes := map[string]*corev1.Node{"n4": report("n4", holdfastv1.RoleStepPromote, &started, at(9)), "n1": report("n1", holdfastv1.RoleStepFinishDemote, nil, at(26))}
	p, err := SwapPhasesOf(s, nodes)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Duration{"gates": time.Second, "lease": time.Second, "snapshot": time.Second, "cordon-in": time.Second, "learner": time.Second,
		"promote-asked": time.Second, "promote": 4 * time.Second, "voter-ready": 4 * time.Second, "regate": time.Second, "cordon-out": time.Second,
		"stepdown-asked": time.Second, "stepdown": 3 * time.Second, "remove": time.Second, "tombstone": 2 * time.Second, "labels": time.Second,
		"agent-ready": 14 * time.Second, "release": 2 * time.Second}
	got := p.ByName()
	var sum time.Duration
	for name, d := range got {
		sum += d
		if want[name] != d {
			t.Errorf("phase %s: %v, want %v", name, d, want[name])
		}
	}
	for name := range want {
		if _, ok := got[name]; !ok {
			t.Errorf("phase %s missing", name)
		}
	}
	if sum != p.Total || p.Total != 40*time.Second {
		t.Errorf("the phases add up to %v, the swap took %v (want 40s both)", sum, p.Total)
	}
	out := p.String()
	for _, mark := range []string{"holdfast-node on n4: server unit started (promote)", "holdfast-node on n4: promote done",
		"holdfast-node on n1: finish-demote done", "Promote Retried Promoted"} {
		if !strings.Contains(out, mark) {
			t.Errorf("the report lacks %q:\n%s", mark, out)
		}
	}
}
