package voters

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

// step is one step of a running swap: what one pass of it does, the step
// that follows when it is done, and how long the step may take once entered
// (nil: no deadline).
type step struct {
	name   holdfastv1.SwapStep
	pass   func(o *Observation, c *Cluster, s *holdfastv1.VoterSwap) Decision
	next   holdfastv1.SwapStep
	within func(policyTimes) time.Duration
}

// steps is the swap in its order (docs/design.md §6). Besides next, three
// exits leave a step: toRollback (Promote fails: the learner is removed),
// toRelease (a step fails or the swap ends: Release tidies and finishes it)
// and memberGone (the outgoing member is already removed: FinishDemote).
var steps []step

func init() {
	opTimeout := func(t policyTimes) time.Duration { return t.opTimeout }
	steps = []step{
		{holdfastv1.StepGates, stepGates, holdfastv1.StepSnapshot, opTimeout},
		{holdfastv1.StepSnapshot, stepSnapshot, holdfastv1.StepPromote, opTimeout},
		// The candidate's workload pods have the drain wait; a learner,
		// once added, the learner stall time plus the operation timeout.
		{holdfastv1.StepPromote, stepPromote, holdfastv1.StepRegate, func(t policyTimes) time.Duration { return t.drainWait }},
		{holdfastv1.StepRollback, stepRollback, holdfastv1.StepRelease, opTimeout},
		{holdfastv1.StepRegate, stepRegate, holdfastv1.StepStepDown, opTimeout},
		{holdfastv1.StepStepDown, stepStepDown, holdfastv1.StepRemoveMember, opTimeout},
		{holdfastv1.StepRemoveMember, stepRemoveMember, holdfastv1.StepFinishDemote, opTimeout},
		{holdfastv1.StepFinishDemote, stepFinishDemote, holdfastv1.StepRelease, opTimeout},
		{holdfastv1.StepRelease, func(o *Observation, _ *Cluster, s *holdfastv1.VoterSwap) Decision { return stepRelease(o, s) }, "", nil},
	}
}

// stepNamed is the table's entry for name; a swap recorded before its first
// step is at Gates.
func stepNamed(name holdfastv1.SwapStep) (step, bool) {
	if name == "" {
		name = holdfastv1.StepGates
	}
	for _, st := range steps {
		if st.name == name {
			return st, true
		}
	}
	return step{}, false
}

// enter is the status change that moves a swap into step to, with the
// deadline the table gives it, recording history.
func enter(o *Observation, to holdfastv1.SwapStep, history ...holdfastv1.SwapStepRecord) *Change {
	ch := &Change{Step: to, History: history}
	st, _ := stepNamed(to)
	if st.within == nil {
		ch.ClearDeadline = true
	} else {
		ch.Deadline = at(o.Now.Add(st.within(timesOf(o.Policy))))
	}
	return ch
}

// advance is the status change that moves a swap from its step to the
// step the table names next.
func advance(o *Observation, s *holdfastv1.VoterSwap, history ...holdfastv1.SwapStepRecord) *Change {
	st, _ := stepNamed(s.Status.Step)
	return enter(o, st.next, history...)
}

// memberGone moves a swap whose outgoing member is already removed straight
// to FinishDemote, recording why under the step it was at.
func memberGone(o *Observation, s *holdfastv1.VoterSwap, msg string) Decision {
	return act(&Action{Kind: Record, Swap: s.Name, Then: enter(o, holdfastv1.StepFinishDemote,
		rec(s.Status.Step, holdfastv1.SwapOutcomeDone, holdfastv1.SwapReasonMemberRemoved, msg))})
}

// cordonNode cordons and taints a swap node, recorded under the swap's step.
func cordonNode(s *holdfastv1.VoterSwap, node string) Decision {
	return act(&Action{Kind: Cordon, Swap: s.Name, SwapID: s.Status.SwapID, Node: node, Reason: holdfastv1.SwapReasonCordoned,
		Then: &Change{History: []holdfastv1.SwapStepRecord{rec(s.Status.Step, holdfastv1.SwapReasonCordoned, "",
			node+" cordoned and tainted "+holdfastv1.TaintVoterSwap)}}})
}

// drain evicts the pods of node not yet evicted, then waits for the
// evicted ones to be gone: evicting a terminating pod again changes
// nothing, and as an action it would run the next pass at once, a loop of
// evictions for as long as the pod's grace period.
func drain(s *holdfastv1.VoterSwap, node string, evictable []corev1.Pod) Decision {
	var fresh, leaving []corev1.Pod
	for _, p := range evictable {
		if p.DeletionTimestamp.IsZero() {
			fresh = append(fresh, p)
		} else {
			leaving = append(leaving, p)
		}
	}
	if len(fresh) > 0 {
		return act(&Action{Kind: Evict, Swap: s.Name, Node: node, Pods: podKeys(fresh), Reason: holdfastv1.SwapReasonDraining,
			Message: fmt.Sprintf("evicting from %s: %s", node, podNames(fresh))})
	}
	d := wait(s, holdfastv1.SwapReasonDraining, fmt.Sprintf("waiting for the pods evicted from %s to terminate: %s", node, podNames(leaving)))
	d.Polled = true
	return d
}

// moveLeader moves etcd's leadership off the outgoing voter m, when a
// transferee answers.
func moveLeader(c *Cluster, s *holdfastv1.VoterSwap, out string, m Member) (Decision, bool) {
	to, ok := transferee(c, out, incomingOf(s))
	if !ok {
		return Decision{}, false
	}
	return act(&Action{Kind: MoveLeader, Swap: s.Name, Node: out, Member: m.ID, To: c.ByNode[to].ID, Endpoint: m.ClientURLs[0],
		Reason: holdfastv1.SwapReasonLeaderMoved, Then: &Change{History: []holdfastv1.SwapStepRecord{rec(s.Status.Step,
			holdfastv1.SwapReasonLeaderMoved, holdfastv1.SwapReasonLeaderMoved, fmt.Sprintf("leadership moved from %s to %s", out, to))}}}), true
}

// etcdUnreachable is the wait of every step that needs the member list.
func etcdUnreachable(s *holdfastv1.VoterSwap, c *Cluster) Decision {
	return wait(s, holdfastv1.SwapReasonEtcdUnreachable, "the etcd member list could not be read: "+c.Err)
}

// gateInput is what the swap gates judge: the VoterPolicy with the status
// this pass computed from etcd, the Nodes, lease (nil: not judged) and the
// pass's time.
func gateInput(o *Observation, c *Cluster, lease bool) policy.GateInput {
	p := o.Policy.DeepCopy()
	p.Status = PolicyStatus(o, c)
	in := policy.GateInput{Policy: p, Nodes: o.Nodes, Now: o.Now}
	if lease {
		in.SwapLease = o.Lease
	}
	return in
}
