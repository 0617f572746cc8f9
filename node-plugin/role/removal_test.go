package role_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/role"
)

// TestARecordedRemovalWakesTheRemovalCheckOfItsNodeOnly: a swap's record of
// its outgoing member's removal, or of its incoming learner's removal by a
// rollback, runs the removal check of that node's plugin at once; a swap
// that has removed nothing yet, a retried removal, or another node's
// removal wakes nobody.
func TestARecordedRemovalWakesTheRemovalCheckOfItsNodeOnly(t *testing.T) {
	swap := func(h ...holdfastv1.SwapStepRecord) *holdfastv1.VoterSwap {
		return &holdfastv1.VoterSwap{ObjectMeta: metav1.ObjectMeta{Name: "s1"}, Spec: holdfastv1.VoterSwapSpec{Outgoing: "n1", Incoming: "n4"},
			Status: holdfastv1.VoterSwapStatus{Incoming: "n4", History: append([]holdfastv1.SwapStepRecord{
				{Step: holdfastv1.StepRegate, Outcome: holdfastv1.SwapOutcomeDone, Reason: holdfastv1.SwapReasonGatesPassed}}, h...)}}
	}
	removed := holdfastv1.SwapStepRecord{Step: holdfastv1.StepRemoveMember, Outcome: holdfastv1.SwapOutcomeDone, Reason: holdfastv1.SwapReasonMemberRemoved}
	retried := holdfastv1.SwapStepRecord{Step: holdfastv1.StepRemoveMember, Outcome: holdfastv1.SwapOutcomeRetried, Reason: holdfastv1.SwapReasonMemberRemoved}
	learnerRemoved := holdfastv1.SwapStepRecord{Step: holdfastv1.StepRollback, Outcome: holdfastv1.SwapReasonLearnerRemoved, Reason: holdfastv1.SwapReasonStartedLearnerRemoved}
	for _, tc := range []struct {
		name string
		s    *holdfastv1.VoterSwap
		node string
		want bool
	}{
		{"the outgoing member removed: its node", swap(removed), "n1", true},
		{"the outgoing member removed: not the incoming node", swap(removed), "n4", false},
		{"the incoming learner removed by the rollback: its node", swap(learnerRemoved), "n4", true},
		{"the incoming learner removed by the rollback: not the outgoing node", swap(learnerRemoved), "n1", false},
		{"nothing removed yet", swap(), "n1", false},
		{"a removal retried, not done", swap(retried), "n1", false},
		{"a node the swap does not name", swap(removed), "n2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := role.RecordsRemovalOf(tc.s, tc.node); got != tc.want {
				t.Fatalf("RecordsRemovalOf(%s) = %v, want %v", tc.node, got, tc.want)
			}
		})
	}
}
