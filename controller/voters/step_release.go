package voters

import (
	"fmt"
	"maps"
	"slices"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"

	"github.com/holdfast-io/holdfast/policy"
)

// The Release step (docs/design.md §6 step 5) and the leftovers of finished
// swaps.

// toRelease ends the swap's work: the Release step tidies and finishes it
// into outcome.
func toRelease(s *holdfastv1.VoterSwap, outcome holdfastv1.SwapPhase, step holdfastv1.SwapStep, what, reason, msg string) Decision {
	return act(&Action{Kind: Record, Swap: s.Name, Then: &Change{Step: holdfastv1.StepRelease, Outcome: outcome, ClearDeadline: true,
		Warning: outcome != holdfastv1.SwapSucceeded,
		History: []holdfastv1.SwapStepRecord{rec(step, what, reason, msg)}}})
}

func stepRelease(o *Observation, s *holdfastv1.VoterSwap) Decision {
	id := s.Status.SwapID
	outcome := s.Status.Outcome
	if outcome == "" {
		outcome = holdfastv1.SwapSucceeded
	}
	for _, name := range swapNodes(s) {
		n := o.Nodes[name]
		if n == nil || n.Annotations[holdfastv1.AnnotationRoleSwap] != id || n.Annotations[holdfastv1.AnnotationRoleStep] == "" {
			continue
		}
		step := n.Annotations[holdfastv1.AnnotationRoleStep]
		// A step its host has not carried out yet stays, for the node
		// plugin to finish on its return.
		if !reportIs(reportOf(n), id, step, holdfastv1.ActuatorDone) && (step == holdfastv1.RoleStepFinishDemote || step == holdfastv1.RoleStepRollback) {
			continue
		}
		return act(&Action{Kind: ClearRoleStep, Swap: s.Name, Node: name, Reason: holdfastv1.SwapReasonRoleStepCleared})
	}
	if outcome != holdfastv1.SwapSucceeded {
		if in := incomingOf(s); in != "" {
			if n := o.Nodes[in]; n != nil && cordoned(n, id) && policy.NodeReady(n) {
				return act(&Action{Kind: Uncordon, Swap: s.Name, Node: in, Reason: holdfastv1.SwapReasonUncordoned})
			}
		}
	}
	if o.Candidate != nil {
		return act(&Action{Kind: DeleteCandidate, Swap: s.Name, Reason: holdfastv1.SwapReasonReleased})
	}
	return act(&Action{Kind: Record, Swap: s.Name, Then: &Change{Phase: outcome, FinishedAt: true, ClearDeadline: true,
		Warning: outcome != holdfastv1.SwapSucceeded,
		History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepRelease, string(outcome), holdfastv1.SwapReasonReleased, "swap finished: "+string(outcome))}}})
}

// leftovers tidies what finished swaps left: a role step its host has since
// carried out, and a node cordoned by a swap that is Ready again.
func leftovers(o *Observation) (Decision, bool) {
	for _, name := range slices.Sorted(maps.Keys(o.Nodes)) {
		n := o.Nodes[name]
		step := n.Annotations[holdfastv1.AnnotationRoleStep]
		swap := n.Annotations[holdfastv1.AnnotationRoleSwap]
		if step != "" && reportIs(reportOf(n), swap, step, holdfastv1.ActuatorDone) {
			return act(&Action{Kind: ClearRoleStep, Node: name, Reason: holdfastv1.SwapReasonLeftover,
				Message: fmt.Sprintf("%s carried out %s for swap %s after it finished", name, step, swap)}), true
		}
		if cordoned(n, "") && step == "" && policy.NodeReady(n) && !hasRoleLabels(n) {
			return act(&Action{Kind: Uncordon, Node: name, Reason: holdfastv1.SwapReasonLeftover,
				Message: fmt.Sprintf("%s is Ready again after its swap finished", name)}), true
		}
	}
	return Decision{}, false
}
