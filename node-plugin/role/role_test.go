package role_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/node-plugin/role"
)

// TestRemovalRecordedProvesOnlyThisHostsRemovedMember: a VoterSwap's record
// proves a host's member gone only when it is this host's swap (by swap ID
// and outgoing node), names the member this host recorded, and records the
// removal done. Each mutation of the fixture proves nothing.
func TestRemovalRecordedProvesOnlyThisHostsRemovedMember(t *testing.T) {
	const id = "20260301T120000Z-n1-n4"
	fixture := func() ([]holdfastv1.VoterSwap, *hoststate.Member) {
		s := holdfastv1.VoterSwap{ObjectMeta: metav1.ObjectMeta{Name: "swap-n1"}, Spec: holdfastv1.VoterSwapSpec{Outgoing: "n1", Incoming: "n4"},
			Status: holdfastv1.VoterSwapStatus{SwapID: id, OutgoingMemberID: "1001", History: []holdfastv1.SwapStepRecord{
				{Step: holdfastv1.StepRegate, Outcome: holdfastv1.SwapOutcomeDone, Reason: holdfastv1.SwapReasonGatesPassed},
				{Step: holdfastv1.StepRemoveMember, Outcome: holdfastv1.SwapOutcomeDone, Reason: holdfastv1.SwapReasonMemberRemoved,
					At: metav1.NewTime(time.Date(2026, 3, 1, 12, 5, 0, 0, time.UTC))},
			}}}
		return []holdfastv1.VoterSwap{s}, &hoststate.Member{ID: "1001", ClusterID: "c1"}
	}
	if got := role.RemovalRecorded(fixtureArgs(fixture)); !strings.Contains(got, "swap-n1 records the removal of member 1001 of n1") {
		t.Fatalf("the fixture proves %q, want the removal named", got)
	}
	for _, tc := range []struct {
		name   string
		mutate func(s *holdfastv1.VoterSwap, m **hoststate.Member, node, swapID *string)
	}{
		{"no member recorded on the host", func(_ *holdfastv1.VoterSwap, m **hoststate.Member, _, _ *string) { *m = nil }},
		{"another member recorded on the host (the host joined again)", func(_ *holdfastv1.VoterSwap, m **hoststate.Member, _, _ *string) {
			*m = &hoststate.Member{ID: "2002", ClusterID: "c1"}
		}},
		{"the swap names another outgoing node", func(s *holdfastv1.VoterSwap, _ **hoststate.Member, _, _ *string) { s.Spec.Outgoing = "n2" }},
		{"the step belongs to another swap", func(_ *holdfastv1.VoterSwap, _ **hoststate.Member, _, id *string) { *id = "20260301T130000Z-n1-n5" }},
		{"no swap ID on the step", func(_ *holdfastv1.VoterSwap, _ **hoststate.Member, _, id *string) { *id = "" }},
		{"the removal is not recorded yet", func(s *holdfastv1.VoterSwap, _ **hoststate.Member, _, _ *string) {
			s.Status.History = s.Status.History[:1]
		}},
		{"the removal was retried, not done", func(s *holdfastv1.VoterSwap, _ **hoststate.Member, _, _ *string) {
			s.Status.History[1].Outcome = holdfastv1.SwapOutcomeRetried
		}},
		{"the outgoing member is not recorded", func(s *holdfastv1.VoterSwap, _ **hoststate.Member, _, _ *string) {
			s.Status.OutgoingMemberID = ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			swaps, m := fixture()
			node, swapID := "n1", id
			tc.mutate(&swaps[0], &m, &node, &swapID)
			if got := role.RemovalRecorded(swaps, node, swapID, m); got != "" {
				t.Fatalf("proves %q, want nothing", got)
			}
		})
	}
}

func fixtureArgs(f func() ([]holdfastv1.VoterSwap, *hoststate.Member)) ([]holdfastv1.VoterSwap, string, string, *hoststate.Member) {
	swaps, m := f()
	return swaps, "n1", "20260301T120000Z-n1-n4", m
}
