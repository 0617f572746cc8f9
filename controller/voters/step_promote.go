package voters

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"

	"github.com/holdfast-io/holdfast/policy"
)

// The Promote step (docs/design.md §6 step 2) and its failure branch,
// Rollback.

// learnerOf finds the candidate's member: by the recorded ID, else by its
// peer URL (a learner added before a crash kept its ID from the record).
func learnerOf(o *Observation, c *Cluster, s *holdfastv1.VoterSwap) (Member, bool) {
	if id, ok := ParseHexID(s.Status.IncomingMemberID); ok {
		if _, m, ok := c.memberByID(id); ok {
			return m, true
		}
		return Member{}, false
	}
	in := incomingOf(s)
	peer := o.Settings.PeerURL(o.Nodes[in])
	for _, m := range o.Etcd.Members {
		if m.Name == in || (peer != "" && slices.Contains(m.PeerURLs, peer)) {
			return m, true
		}
	}
	return Member{}, false
}

func stepPromote(o *Observation, c *Cluster, s *holdfastv1.VoterSwap) Decision {
	t := timesOf(o.Policy)
	id, in := s.Status.SwapID, incomingOf(s)
	n := o.Nodes[in]
	if !c.Reached {
		return etcdUnreachable(s, c)
	}
	learner, listed := learnerOf(o, c, s)
	if n == nil {
		if listed || s.Status.IncomingMemberID != "" {
			return toRollback(o, s, holdfastv1.SwapReasonCandidateGone, fmt.Sprintf("node %s is gone", in))
		}
		return toRelease(s, holdfastv1.SwapAbandoned, holdfastv1.StepPromote, holdfastv1.SwapOutcomeAbandoned, holdfastv1.SwapReasonCandidateGone, fmt.Sprintf("node %s is gone; nothing was changed in etcd", in))
	}

	if listed && !promotionRecorded(s) {
		if why := votesUnpromoted(n, id, learner); why != "" {
			return toRollback(o, s, holdfastv1.SwapReasonMemberNotLearner, why)
		}
	}
	if !listed && s.Status.IncomingMemberID == "" {
		// Before the learner: cordon, wait for workloads, drain.
		if !cordoned(n, id) {
			return cordonNode(s, in)
		}
		workload, evictable := classifyPods(o.Pods[in], o.Candidate)
		if len(workload) > 0 {
			if pastDeadline(o, s) {
				return toRelease(s, holdfastv1.SwapAbandoned, holdfastv1.StepPromote, holdfastv1.SwapOutcomeAbandoned, holdfastv1.SwapReasonWorkloadDrainTimeout,
					fmt.Sprintf("workload pods on %s outlasted the drain wait (%v): %s; a planned change never cuts a job", in, t.drainWait, podNames(workload)))
			}
			return wait(s, holdfastv1.SwapReasonWorkloadPodsRunning, fmt.Sprintf("waiting for workload pods on %s to finish (until %s): %s",
				in, s.Status.Deadline.UTC().Format(time.RFC3339), podNames(workload)))
		}
		if len(evictable) > 0 {
			if s.Status.Deadline != nil && !o.Now.Before(s.Status.Deadline.Add(t.opTimeout)) {
				return toRelease(s, holdfastv1.SwapAbandoned, holdfastv1.StepPromote, holdfastv1.SwapOutcomeAbandoned, holdfastv1.SwapReasonDrainTimeout,
					fmt.Sprintf("pods on %s were not evicted within the operation timeout: %s", in, podNames(evictable)))
			}
			return drain(s, in, evictable)
		}
		peer := o.Settings.PeerURL(n)
		if peer == "" {
			return toRelease(s, holdfastv1.SwapAbandoned, holdfastv1.StepPromote, holdfastv1.SwapOutcomeAbandoned, holdfastv1.SwapReasonNoPeerURL,
				fmt.Sprintf("node %s has no %s annotation and no InternalIP: its peer URL is unknown", in, holdfastv1.AnnotationEtcdPeerURL))
		}
		if !c.Healthy() {
			return waitEtcd(s, holdfastv1.SwapReasonEtcdUnhealthy, "the learner is added to a healthy cluster only: "+strings.Join(c.Problems, "; "))
		}
		return act(&Action{Kind: AddLearner, Swap: s.Name, Node: in, PeerURL: peer, Endpoints: answering(c, ""),
			Reason: holdfastv1.SwapReasonLearnerAdded, Then: &Change{Deadline: at(o.Now.Add(t.learnerStall + t.opTimeout)),
				History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepPromote, holdfastv1.SwapReasonLearnerAdded, holdfastv1.SwapReasonLearnerAdded,
					fmt.Sprintf("%s added as an etcd learner at %s", in, peer))}}})
	}
	if !listed {
		return toRollback(o, s, holdfastv1.SwapReasonLearnerGone, fmt.Sprintf("the learner %s of %s is no longer in the member list", s.Status.IncomingMemberID, in))
	}
	if s.Status.IncomingMemberID == "" {
		return act(&Action{Kind: Record, Swap: s.Name, Then: &Change{IncomingMember: HexID(learner.ID),
			Deadline: at(o.Now.Add(t.learnerStall + t.opTimeout)),
			History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepPromote, holdfastv1.SwapReasonLearnerAdded, holdfastv1.SwapReasonLearnerAdopted,
				fmt.Sprintf("learner %s of %s found in the member list", HexID(learner.ID), in))}}})
	}
	if learner.IsLearner {
		if pastDeadline(o, s) {
			return toRollback(o, s, holdfastv1.SwapReasonNotVoterByDeadline, fmt.Sprintf("%s is not a voter by the learner stall time plus the operation timeout (%v)",
				in, t.learnerStall+t.opTimeout))
		}
		if !roleStepIs(n, id, holdfastv1.RoleStepPromote) {
			return act(&Action{Kind: SetRoleStep, Swap: s.Name, SwapID: id, Node: in,
				RoleStep: holdfastv1.RoleStepPromote, Join: joinFor(o, c, in, learner.ID), Reason: holdfastv1.SwapReasonPromoteRequested,
				Then: &Change{History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepPromote, holdfastv1.SwapReasonServerRequested, "", in+": desired-role server, role-step promote")}}})
		}
		rep := reportOf(n)
		if !reportIs(rep, id, holdfastv1.RoleStepPromote, holdfastv1.ActuatorDone) {
			return wait(s, holdfastv1.SwapReasonWaitingForNodePlugin, fmt.Sprintf("waiting for the node plugin on %s to start the server: %s", in, describeReport(rep)))
		}
		if !learner.Started() {
			return waitEtcd(s, holdfastv1.SwapReasonLearnerNotStarted, fmt.Sprintf("the server on %s is started; waiting for its member to join", in))
		}
		return act(&Action{Kind: PromoteMember, Swap: s.Name, Node: in, Member: learner.ID, Endpoints: answering(c, in),
			Reason: holdfastv1.SwapReasonPromoted, Then: &Change{Deadline: at(o.Now.Add(t.opTimeout)), History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepPromote,
				holdfastv1.SwapReasonPromoted, holdfastv1.SwapReasonPromoted, fmt.Sprintf("member %s of %s promoted to a voter", HexID(learner.ID), in))}}})
	}
	// A voter: label it, wait for a Ready heartbeat after its server's
	// start, uncordon; all within the operation timeout of the promotion
	// (the Ready deadline). A voter not Ready by then is stepped back, so
	// four voters are never held indefinitely.
	if !promotionRecorded(s) {
		// Promoted by a pass that crashed before recording it: the Ready
		// deadline starts now, not at the learner's.
		return act(&Action{Kind: Record, Swap: s.Name, Then: &Change{Deadline: at(o.Now.Add(t.opTimeout)), History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepPromote,
			holdfastv1.SwapReasonPromoted, holdfastv1.SwapReasonPromoted, fmt.Sprintf("member %s of %s found a voter (its promotion was not recorded)", HexID(learner.ID), in))}}})
	}
	if _, ok := n.Labels[holdfastv1.LabelEtcdRole]; !ok {
		return act(&Action{Kind: SetEtcdLabel, Swap: s.Name, Node: in, Reason: holdfastv1.SwapReasonLabelled})
	}
	rep := reportOf(n)
	if rep == nil || rep.StartedAt == nil || !readyAfter(n, rep.StartedAt.Time) {
		if pastDeadline(o, s) {
			return toRollback(o, s, holdfastv1.SwapReasonNotReadyByDeadline, fmt.Sprintf(
				"%s votes but its Node was not Ready on a heartbeat after its server's start within the operation timeout (%v) of its promotion; stepping it back", in, t.opTimeout))
		}
		if rep == nil || rep.StartedAt == nil {
			return wait(s, holdfastv1.SwapReasonWaitingForNodePlugin, fmt.Sprintf("%s votes; waiting for its node plugin to report its server's start time (until %s)",
				in, s.Status.Deadline.UTC().Format(time.RFC3339)))
		}
		return wait(s, holdfastv1.SwapReasonWaitingForNodeReady, fmt.Sprintf("%s votes; waiting for its Node to be Ready on a heartbeat after the server start (%s), until %s",
			in, rep.StartedAt.UTC().Format(time.RFC3339), s.Status.Deadline.UTC().Format(time.RFC3339)))
	}
	if cordoned(n, "") {
		return act(&Action{Kind: Uncordon, Swap: s.Name, Node: in, Reason: holdfastv1.SwapReasonUncordoned})
	}
	return act(&Action{Kind: Record, Swap: s.Name, Then: advance(o, s,
		rec(holdfastv1.StepPromote, holdfastv1.SwapOutcomeDone, holdfastv1.SwapReasonPromoted, in+" is a voter and Ready"))})
}

// votesUnpromoted says why the candidate's member m votes although nothing
// of this swap can have made it a voter, "" when it is a learner or may
// vote. Only two things promote it: PromoteMember, sent to a started
// learner whose host was asked to start its server, and the server itself
// (k3s promotes its learner once caught up), which runs only once asked. A
// member that votes otherwise was not added as a learner: unstarted, it
// counts toward quorum without serving, so one more voter down loses
// quorum.
func votesUnpromoted(n *corev1.Node, swapID string, m Member) string {
	if m.IsLearner || (m.Started() && roleStepIs(n, swapID, holdfastv1.RoleStepPromote)) {
		return ""
	}
	state := "has not started"
	if m.Started() {
		state = "was never asked to start its server"
	}
	return fmt.Sprintf("member %s of %s (peer %s) is a voter, not a learner, and %s: this swap did not promote it; a voter that does not serve counts toward quorum",
		HexID(m.ID), n.Name, strings.Join(m.PeerURLs, ","), state)
}

// promotionRecorded: the swap's history records its candidate's promotion.
func promotionRecorded(s *holdfastv1.VoterSwap) bool {
	for _, h := range s.Status.History {
		if h.Step == holdfastv1.StepPromote && h.Outcome == holdfastv1.SwapReasonPromoted {
			return true
		}
	}
	return false
}

func toRollback(o *Observation, s *holdfastv1.VoterSwap, reason, msg string) Decision {
	ch := enter(o, holdfastv1.StepRollback, rec(holdfastv1.StepPromote, holdfastv1.SwapOutcomeFailed, reason, msg+"; rolling back"))
	ch.Warning = true
	return act(&Action{Kind: Record, Swap: s.Name, Then: ch})
}

func stepRollback(o *Observation, c *Cluster, s *holdfastv1.VoterSwap) Decision {
	t := timesOf(o.Policy)
	id, in := s.Status.SwapID, incomingOf(s)
	if !c.Reached {
		return etcdUnreachable(s, c)
	}
	if m, listed := learnerOf(o, c, s); listed {
		if !m.IsLearner {
			// Promoted after all (a promote answered late): it is a voter
			// now, removed only while every other voter is healthy.
			if why := othersUnhealthy(c, in, t.target); why != "" {
				return waitEtcd(s, holdfastv1.SwapReasonRemovalHeld, "removal of "+in+" held: "+why)
			}
		}
		// A member that had started is recorded by its host, which then
		// notices the removal: the rollback waits for that (as finish-demote).
		reason := ""
		if m.Started() {
			reason = holdfastv1.SwapReasonStartedLearnerRemoved
		}
		return act(&Action{Kind: RemoveMember, Swap: s.Name, Node: in, Member: m.ID, Endpoints: answering(c, in),
			Reason: holdfastv1.SwapReasonLearnerRemoved, Then: &Change{History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepRollback, holdfastv1.SwapReasonLearnerRemoved, reason,
				fmt.Sprintf("member %s of %s removed", HexID(m.ID), in))}}})
	}
	if n := o.Nodes[in]; n != nil {
		_, tombstone := n.Annotations[holdfastv1.AnnotationTombstone]
		if !roleStepIs(n, id, holdfastv1.RoleStepRollback) {
			if startedLearnerRemoved(s) && !tombstone && policy.NodeReady(n) && s.Status.Deadline != nil &&
				o.Now.Before(s.Status.Deadline.Add(-t.opTimeout/2)) {
				return wait(s, holdfastv1.SwapReasonWaitingForNodePlugin, fmt.Sprintf("waiting for the node plugin on %s to record its learner's removal (%s)", in, holdfastv1.AnnotationTombstone))
			}
			return act(&Action{Kind: SetRoleStep, Swap: s.Name, SwapID: id, Node: in,
				RoleStep: holdfastv1.RoleStepRollback, Reason: holdfastv1.SwapReasonRollbackRequested,
				Then: &Change{History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepRollback, holdfastv1.SwapReasonAgentRequested, "", in+": desired-role agent, role-step rollback")}}})
		}
		rep := reportOf(n)
		// Confirmed once the host is an agent again and no tombstone is
		// reported (it was retired beside the moved-aside data).
		confirmed := reportIs(rep, id, holdfastv1.RoleStepRollback, holdfastv1.ActuatorDone) && !tombstone
		if !confirmed && !pastDeadline(o, s) {
			return wait(s, holdfastv1.SwapReasonWaitingForNodePlugin, fmt.Sprintf("waiting for the node plugin on %s to return the host to an agent and retire any tombstone: %s", in, describeReport(rep)))
		}
		if hasRoleLabels(n) {
			return act(&Action{Kind: ClearRoleLabels, Swap: s.Name, Node: in, Reason: holdfastv1.SwapReasonLabelsCleared})
		}
		if cordoned(n, "") {
			return act(&Action{Kind: Uncordon, Swap: s.Name, Node: in, Reason: holdfastv1.SwapReasonUncordoned})
		}
		if !confirmed {
			return toRelease(s, holdfastv1.SwapRolledBack, holdfastv1.StepRollback, holdfastv1.SwapOutcomeRolledBack, holdfastv1.SwapReasonRollbackUnconfirmed,
				fmt.Sprintf("membership is as before; the node plugin on %s did not confirm the rollback within the operation timeout (%s): the host keeps its tombstone guard", in, describeReport(rep)))
		}
	}
	if len(c.Voters) != t.target || len(c.Learners) > 0 {
		return waitEtcd(s, holdfastv1.SwapReasonMembershipNotRestored, fmt.Sprintf("waiting for the membership to be as before: %d voters (target %d), learners %v", len(c.Voters), t.target, c.Learners))
	}
	return toRelease(s, holdfastv1.SwapRolledBack, holdfastv1.StepRollback, holdfastv1.SwapOutcomeRolledBack, holdfastv1.SwapReasonMembershipRestored,
		fmt.Sprintf("%s returned to an agent; the members are as before: %s", in, strings.Join(c.Voters, ", ")))
}

// startedLearnerRemoved: the rollback removed a learner that had started.
func startedLearnerRemoved(s *holdfastv1.VoterSwap) bool {
	for _, h := range s.Status.History {
		if h.Step == holdfastv1.StepRollback && h.Reason == holdfastv1.SwapReasonStartedLearnerRemoved {
			return true
		}
	}
	return false
}
