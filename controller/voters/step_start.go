package voters

import (
	"fmt"
	"strings"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
)

// The start of a swap: a pending swap's gates and candidate, the Gates step
// under the Lease, the snapshot (docs/design.md §6 step 1).

func nextPending(o *Observation, c *Cluster, s *holdfastv1.VoterSwap) Decision {
	t := timesOf(o.Policy)
	if s.Spec.Origin == holdfastv1.SwapAutomatic && t.dryRun {
		return refuse(s, holdfastv1.SwapReasonDryRun, "VoterPolicy dryRun is on: automatic swaps are only proposed (status.proposedSwap); a person's swap is carried out")
	}
	if errs := pendingGates(o, c, s); len(errs) > 0 {
		return refuse(s, holdfastv1.SwapReasonGatesFailed, strings.Join(errs, "; "))
	}
	in := incomingOf(s)
	if in == "" {
		pod := o.Candidate
		switch {
		case pod == nil:
			return act(&Action{Kind: CreateCandidate, Swap: s.Name, Reason: holdfastv1.SwapReasonNoCandidate,
				Message: "no incoming node named: asked " + holdfastv1.SchedulerName + " to place a voter-candidate pod"})
		case pod.Spec.NodeName == "":
			why := "the scheduler has not placed it yet"
			for _, cond := range pod.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Message != "" {
					why = cond.Message
				}
			}
			if s.Spec.Origin == holdfastv1.SwapAutomatic && o.Now.Sub(pod.CreationTimestamp.Time) > t.opTimeout {
				return refuse(s, holdfastv1.SwapReasonNoCandidate, "no voter candidate within the operation timeout: "+why)
			}
			return wait(s, holdfastv1.SwapReasonNoCandidate, fmt.Sprintf("waiting for a voter candidate (pod %s/%s): %s", pod.Namespace, pod.Name, why))
		default:
			return act(&Action{Kind: Record, Swap: s.Name, Then: &Change{Incoming: pod.Spec.NodeName, Phase: holdfastv1.SwapPending,
				History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepGates, holdfastv1.SwapOutcomeDone, holdfastv1.SwapReasonCandidateChosen,
					fmt.Sprintf("%s placed the voter candidate on %s", holdfastv1.SchedulerName, pod.Spec.NodeName))}}})
		}
	}
	if o.Candidate != nil {
		return act(&Action{Kind: DeleteCandidate, Swap: s.Name, Reason: holdfastv1.SwapReasonCandidateChosen, Message: "candidate taken: " + in})
	}
	id := SwapID(o.Now, s.Spec.Outgoing, in)
	start := enter(o, holdfastv1.StepGates, rec(holdfastv1.StepGates, holdfastv1.SwapOutcomeDone, holdfastv1.SwapReasonGatesPassed,
		fmt.Sprintf("every gate holds: %s out, %s in", s.Spec.Outgoing, in)))
	start.Phase, start.SwapID, start.StartedAt, start.Incoming = holdfastv1.SwapRunning, id, true, in
	return act(&Action{Kind: Record, Swap: s.Name, SwapID: id, Then: start})
}

func refuse(s *holdfastv1.VoterSwap, reason, msg string) Decision {
	return act(&Action{Kind: Refuse, Swap: s.Name, Reason: reason, Message: msg, Then: &Change{
		Phase: holdfastv1.SwapRefused, Outcome: holdfastv1.SwapRefused, FinishedAt: true, ClearDeadline: true, Warning: true,
		History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepGates, holdfastv1.SwapOutcomeRefused, reason, msg)}}})
}

// pendingGates are docs/design.md §6 step 1's gates (SwapGates) on the VoterPolicy
// status this pass computed from etcd.
func pendingGates(o *Observation, c *Cluster, s *holdfastv1.VoterSwap) []string {
	spec := s.Spec
	spec.Incoming = incomingOf(s)
	return SwapGates(spec, gateInput(o, c, true))
}

func stepGates(o *Observation, c *Cluster, s *holdfastv1.VoterSwap) Decision {
	spec := s.Spec
	spec.Incoming = incomingOf(s)
	// The Lease is this swap's now: judge every other gate again.
	if errs := SwapGates(spec, gateInput(o, c, false)); len(errs) > 0 {
		return toRelease(s, holdfastv1.SwapRefused, holdfastv1.StepGates, holdfastv1.SwapOutcomeRefused, holdfastv1.SwapReasonGatesFailed, strings.Join(errs, "; "))
	}
	return act(&Action{Kind: Record, Swap: s.Name, Then: enter(o, holdfastv1.StepSnapshot,
		rec(holdfastv1.StepGates, holdfastv1.SwapOutcomeDone, holdfastv1.SwapReasonGatesPassed, "every gate holds under the swap Lease"))})
}

func stepSnapshot(o *Observation, c *Cluster, s *holdfastv1.VoterSwap) Decision {
	promoteStarted := rec(holdfastv1.StepPromote, holdfastv1.SwapOutcomeStarted, "", "")
	if s.Status.Snapshot != nil {
		return act(&Action{Kind: Record, Swap: s.Name, Then: advance(o, s, promoteStarted)})
	}
	if pastDeadline(o, s) {
		return toRelease(s, holdfastv1.SwapAbandoned, holdfastv1.StepSnapshot, holdfastv1.SwapOutcomeFailed, holdfastv1.SwapReasonSnapshotFailed,
			"no verified snapshot within the operation timeout; nothing was changed")
	}
	pick := snapshotSource(c, s)
	if pick == "" {
		return wait(s, holdfastv1.SwapReasonSnapshotFailed, "no voter that stays answers: no snapshot source")
	}
	m := c.ByNode[pick]
	return act(&Action{Kind: Snapshot, Swap: s.Name, SwapID: s.Status.SwapID, Node: pick, Member: m.ID, Endpoint: m.ClientURLs[0],
		Reason: holdfastv1.SwapReasonSnapshotTaken, Then: advance(o, s, promoteStarted)})
}

// snapshotSource is the voter a snapshot is streamed from: one that stays
// and answers, preferably not the leader. Empty when there is none.
func snapshotSource(c *Cluster, s *holdfastv1.VoterSwap) string {
	var pick string
	for _, v := range c.Voters {
		m := c.ByNode[v]
		if v == s.Spec.Outgoing || !m.Answered || len(m.ClientURLs) == 0 {
			continue
		}
		if pick == "" || (c.ByNode[pick].ID == c.Leader && m.ID != c.Leader) {
			pick = v
		}
	}
	return pick
}

// SnapshotGuarded says whether a swap at step changes the membership again
// (a learner added or promoted, the outgoing member removed): those steps
// go on only from a snapshot this process has verified on its own volume,
// since a controller that restarted may hold another pod's volume, or an
// empty one.
func SnapshotGuarded(step holdfastv1.SwapStep) bool {
	switch step {
	case holdfastv1.StepPromote, holdfastv1.StepRegate, holdfastv1.StepStepDown, holdfastv1.StepRemoveMember:
		return true
	}
	return false
}

// checkSnapshot acts on this process's first check of the running swap's
// recorded snapshot: found and verified, it says so on the swap; lost or
// not matching its record, a new verified snapshot is taken from a voter
// that stays, before any other step.
func checkSnapshot(c *Cluster, s *holdfastv1.VoterSwap, chk *SnapshotCheck) (Decision, bool) {
	recd := s.Status.Snapshot
	if chk == nil || recd == nil || !SnapshotGuarded(s.Status.Step) {
		return Decision{}, false
	}
	step := s.Status.Step
	if chk.Err == "" {
		msg := fmt.Sprintf("recorded snapshot %s found and verified: %d bytes, sha256 %s, revision %d", recd.Name, recd.SizeBytes, recd.SHA256, recd.Revision)
		return act(&Action{Kind: Record, Swap: s.Name, SwapID: s.Status.SwapID, Reason: holdfastv1.SwapReasonSnapshotVerified, Message: msg,
			Then: &Change{History: []holdfastv1.SwapStepRecord{rec(step, holdfastv1.SwapReasonSnapshotVerified, holdfastv1.SwapReasonSnapshotVerified, msg)}}}), true
	}
	pick := snapshotSource(c, s)
	if pick == "" {
		return wait(s, holdfastv1.SwapReasonSnapshotLost, chk.Err+"; no voter that stays answers: no source for a new snapshot"), true
	}
	m := c.ByNode[pick]
	msg := chk.Err + "; a new verified snapshot is taken from " + pick + " before the swap goes on"
	return act(&Action{Kind: Snapshot, Swap: s.Name, SwapID: s.Status.SwapID, Node: pick, Member: m.ID, Endpoint: m.ClientURLs[0],
		Reason: holdfastv1.SwapReasonSnapshotLost, Then: &Change{Warning: true,
			History: []holdfastv1.SwapStepRecord{rec(step, holdfastv1.SwapReasonSnapshotLost, holdfastv1.SwapReasonSnapshotLost, msg)}}}), true
}
