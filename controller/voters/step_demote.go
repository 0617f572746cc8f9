package voters

import (
	"fmt"
	"strings"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"

	"github.com/holdfast-io/holdfast/policy"
)

// The steps that take the outgoing voter out (docs/design.md §6 steps 3 and
// 4): Regate, StepDown, RemoveMember, FinishDemote.

func stepRegate(o *Observation, c *Cluster, s *holdfastv1.VoterSwap) Decision {
	t := timesOf(o.Policy)
	out := s.Spec.Outgoing
	m, listed := c.ByNode[out]
	if c.Reached && !listed {
		return memberGone(o, s, out+" is no member any more")
	}
	if problems := regate(o, c, out, t.target+1); len(problems) > 0 {
		return waitEtcd(s, holdfastv1.SwapReasonRegateFailed, "gates with target+1 voters: "+strings.Join(problems, "; "))
	}
	ch := advance(o, s, rec(holdfastv1.StepRegate, holdfastv1.SwapOutcomeDone, holdfastv1.SwapReasonGatesPassed, regatePassed(c, out)))
	ch.OutgoingMember = HexID(m.ID)
	return act(&Action{Kind: Record, Swap: s.Name, Then: ch})
}

// regatePassed is regate's history line: it counts the voters that stay
// (the ones regate judged), not the outgoing one, which may be paused or down.
func regatePassed(c *Cluster, out string) string {
	var stay []string
	for _, v := range c.Voters {
		if v != out {
			stay = append(stay, v)
		}
	}
	return fmt.Sprintf("the %d voters that stay (%s) are healthy with a leader, no learner; %s goes out",
		len(stay), strings.Join(stay, ", "), out)
}

// regate is docs/design.md §6 step 3: every gate again, with want voters. The
// outgoing voter may be down (its removal goes on when the others are
// healthy).
func regate(o *Observation, c *Cluster, out string, want int) []string {
	if !c.Reached {
		return []string{"the etcd member list could not be read: " + c.Err}
	}
	var problems []string
	for _, node := range c.Learners {
		problems = append(problems, "learner present ("+node+")")
	}
	if len(c.Voters) != want {
		problems = append(problems, fmt.Sprintf("%d voters where %d are expected", len(c.Voters), want))
	}
	leader := map[uint64]bool{}
	for _, v := range c.Voters {
		m := c.ByNode[v]
		if v == out {
			continue
		}
		if !m.Answered {
			problems = append(problems, fmt.Sprintf("voter %s does not answer: %s", v, m.Problem))
			continue
		}
		leader[m.Leader] = true
		if n := o.Nodes[v]; n == nil || !policy.NodeReady(n) {
			problems = append(problems, fmt.Sprintf("voter %s is not Ready", v))
		}
	}
	if len(leader) != 1 || leader[0] {
		problems = append(problems, "the voters that stay do not agree on a leader")
	}
	return problems
}

// othersUnhealthy says why the voters other than node are not all healthy
// (each answers, they agree on a leader, there are want of them), "" when
// they are.
func othersUnhealthy(c *Cluster, node string, want int) string {
	var why []string
	leaders := map[uint64]bool{}
	n := 0
	for _, v := range c.Voters {
		if v == node {
			continue
		}
		n++
		m := c.ByNode[v]
		if !m.Answered {
			why = append(why, fmt.Sprintf("voter %s does not answer: %s", v, m.Problem))
			continue
		}
		leaders[m.Leader] = true
	}
	if n < want {
		why = append(why, fmt.Sprintf("only %d other voters (target %d)", n, want))
	}
	if len(leaders) != 1 || leaders[0] {
		why = append(why, "the other voters do not agree on a leader")
	}
	return strings.Join(why, "; ")
}

func stepStepDown(o *Observation, c *Cluster, s *holdfastv1.VoterSwap) Decision {
	id, out := s.Status.SwapID, s.Spec.Outgoing
	if !c.Reached {
		return etcdUnreachable(s, c)
	}
	mid, _ := ParseHexID(s.Status.OutgoingMemberID)
	_, m, listed := c.memberByID(mid)
	if !listed {
		return memberGone(o, s, out+" is no member any more")
	}
	n := o.Nodes[out]
	// Down is judged by the Node, not by the member: the step-down itself
	// restarts the member, which then answers nothing for a while.
	down := n == nil || !policy.NodeReady(n)
	if !down && m.Answered && c.Leader == m.ID {
		if d, ok := moveLeader(c, s, out, m); ok {
			return d
		}
	}
	if n != nil && !cordoned(n, id) {
		return cordonNode(s, out)
	}
	if n != nil && !down && !pastDeadline(o, s) {
		if _, evictable := classifyPods(o.Pods[out], nil); len(evictable) > 0 {
			return drain(s, out, evictable)
		}
	}
	if n != nil && !roleStepIs(n, id, holdfastv1.RoleStepStepDown) &&
		!roleStepIs(n, id, holdfastv1.RoleStepFinishDemote) {
		return act(&Action{Kind: SetRoleStep, Swap: s.Name, SwapID: id, Node: out,
			RoleStep: holdfastv1.RoleStepStepDown, Reason: holdfastv1.SwapReasonStepDownRequested,
			Then: &Change{History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepStepDown, holdfastv1.SwapReasonAgentRequested, "", out+": desired-role agent, role-step step-down")}}})
	}
	rep := reportOf(n)
	switch {
	case reportIs(rep, id, holdfastv1.RoleStepStepDown, holdfastv1.ActuatorDone):
		return act(&Action{Kind: Record, Swap: s.Name, Then: advance(o, s,
			rec(holdfastv1.StepStepDown, holdfastv1.SwapOutcomeDone, "", out+": role file agent, server held out of serving; the member still votes"))})
	case down:
		why := "its Node is not Ready"
		if n == nil {
			why = "its Node is gone"
		}
		ch := advance(o, s, rec(holdfastv1.StepStepDown, holdfastv1.SwapOutcomeDone, holdfastv1.SwapReasonOutgoingDown,
			fmt.Sprintf("%s is down (%s): removed without its step-down, its tombstone guard keeps it out", out, why)))
		ch.Warning = true
		return act(&Action{Kind: Record, Swap: s.Name, Then: ch})
	}
	return wait(s, holdfastv1.SwapReasonWaitingForNodePlugin, fmt.Sprintf("waiting for the node plugin on %s to step down: %s", out, describeReport(rep)))
}

// transferee is the voter leadership moves to: the incoming voter when it
// answers, else the first answering voter that stays.
func transferee(c *Cluster, out, in string) (string, bool) {
	if m, ok := c.ByNode[in]; ok && m.Answered && !m.IsLearner {
		return in, true
	}
	for _, v := range c.Voters {
		if v != out && c.ByNode[v].Answered {
			return v, true
		}
	}
	return "", false
}

func stepRemoveMember(o *Observation, c *Cluster, s *holdfastv1.VoterSwap) Decision {
	t := timesOf(o.Policy)
	out := s.Spec.Outgoing
	if !c.Reached {
		return etcdUnreachable(s, c)
	}
	mid, _ := ParseHexID(s.Status.OutgoingMemberID)
	_, m, listed := c.memberByID(mid)
	if !listed {
		return memberGone(o, s, fmt.Sprintf("member %s of %s removed", HexID(mid), out))
	}
	if why := othersUnhealthy(c, out, t.target); why != "" {
		return waitEtcd(s, holdfastv1.SwapReasonRemovalHeld, "removal of "+out+" held while the voters that stay are not all healthy: "+why)
	}
	if c.Leader == m.ID && m.Answered {
		if d, ok := moveLeader(c, s, out, m); ok {
			return d
		}
	}
	return act(&Action{Kind: RemoveMember, Swap: s.Name, Node: out, Member: m.ID, Endpoints: answering(c, out), Reason: holdfastv1.SwapReasonMemberRemoved,
		Then: advance(o, s, rec(holdfastv1.StepRemoveMember, holdfastv1.SwapOutcomeDone, holdfastv1.SwapReasonMemberRemoved,
			fmt.Sprintf("member %s of %s removed", HexID(m.ID), out)))})
}

func stepFinishDemote(o *Observation, c *Cluster, s *holdfastv1.VoterSwap) Decision {
	id, out := s.Status.SwapID, s.Spec.Outgoing
	n := o.Nodes[out]
	if n == nil {
		return toRelease(s, holdfastv1.SwapSucceeded, holdfastv1.StepFinishDemote, holdfastv1.SwapOutcomeDone, holdfastv1.SwapReasonNodeGone, out+" has no Node any more; its member is removed")
	}
	if !roleStepIs(n, id, holdfastv1.RoleStepFinishDemote) {
		// The host first records the removal (its tombstone, reported on
		// the Node), then finishes: a finish that ran while the host was
		// still noticing the removal would leave a tombstone behind it, and
		// the node could never be promoted again. A host that is down, or
		// silent for half the step's time, gets the step all the same.
		_, tombstone := n.Annotations[holdfastv1.AnnotationTombstone]
		t := timesOf(o.Policy)
		if !tombstone && policy.NodeReady(n) && s.Status.Deadline != nil && o.Now.Before(s.Status.Deadline.Add(-t.opTimeout/2)) {
			return wait(s, holdfastv1.SwapReasonWaitingForNodePlugin, fmt.Sprintf("waiting for the node plugin on %s to record its member's removal (%s)", out, holdfastv1.AnnotationTombstone))
		}
		return act(&Action{Kind: SetRoleStep, Swap: s.Name, SwapID: id, Node: out,
			RoleStep: holdfastv1.RoleStepFinishDemote, Reason: holdfastv1.SwapReasonFinishDemoteRequested,
			Then: &Change{History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepFinishDemote, holdfastv1.SwapReasonAgentRequested, "", out+": role-step finish-demote")}}})
	}
	// Its member is gone (the policy status this pass wrote says so, which
	// the webhook reads before it lets the role labels go).
	if hasRoleLabels(n) {
		return act(&Action{Kind: ClearRoleLabels, Swap: s.Name, Node: out, Reason: holdfastv1.SwapReasonLabelsCleared,
			Then: &Change{History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepFinishDemote, holdfastv1.SwapReasonLabelsCleared, "",
				out+": etcd, control-plane and master role labels and etcd annotations removed")}}})
	}
	rep := reportOf(n)
	_, tombstone := n.Annotations[holdfastv1.AnnotationTombstone]
	finished := reportIs(rep, id, holdfastv1.RoleStepFinishDemote, holdfastv1.ActuatorDone) && readyAfter(n, rep.At.Time)
	// The tombstone annotation goes once the host retired it beside the
	// moved-aside data: until then the node reads as a removed member, and a
	// swap bringing it back in would be refused.
	if finished && !tombstone {
		if cordoned(n, "") {
			return act(&Action{Kind: Uncordon, Swap: s.Name, Node: out, Reason: holdfastv1.SwapReasonUncordoned})
		}
		return toRelease(s, holdfastv1.SwapSucceeded, holdfastv1.StepFinishDemote, holdfastv1.SwapOutcomeDone, "", out+" is an agent and Ready")
	}
	if pastDeadline(o, s) {
		return toRelease(s, holdfastv1.SwapSucceeded, holdfastv1.StepFinishDemote, holdfastv1.SwapOutcomeDone, holdfastv1.SwapReasonOutgoingPending,
			fmt.Sprintf("%s's member is removed; its host has not finished to an agent and Ready within the operation timeout (%s): it stays cordoned, its role step stays for its node plugin, node recovery may handle it",
				out, describeReport(rep)))
	}
	if finished {
		return wait(s, holdfastv1.SwapReasonWaitingForNodePlugin, fmt.Sprintf("waiting for the node plugin on %s to report its tombstone retired (%s)", out, holdfastv1.AnnotationTombstone))
	}
	return wait(s, holdfastv1.SwapReasonWaitingForNodePlugin, fmt.Sprintf("waiting for the node plugin on %s to finish it to an agent, then a Ready heartbeat: %s", out, describeReport(rep)))
}
