package voters

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

// Reasons a swap records and waits with.
const (
	ReasonGatesFailed           = "GatesFailed"
	ReasonGatesPassed           = "GatesPassed"
	ReasonDryRun                = "DryRun"
	ReasonNoCandidate           = "NoCandidate"
	ReasonCandidateChosen       = "CandidateChosen"
	ReasonLeaseHeld             = "LeaseHeldElsewhere"
	ReasonLeaseTaken            = "LeaseTaken"
	ReasonSnapshotTaken         = "SnapshotTaken"
	ReasonSnapshotFailed        = "SnapshotFailed"
	ReasonWorkloadPods          = "WorkloadPodsRunning"
	ReasonWorkloadTimeout       = "WorkloadDrainTimeout"
	ReasonDrainTimeout          = "DrainTimeout"
	ReasonLearnerAdded          = "LearnerAdded"
	ReasonLearnerAdopted        = "LearnerAdopted"
	ReasonLearnerGone           = "LearnerGone"
	ReasonStartedLearnerRemoved = "StartedLearnerRemoved"
	ReasonWaitingActuator       = "WaitingForNodePlugin"
	ReasonPromoted              = "Promoted"
	ReasonNotVoterByDeadline    = "NotVoterByDeadline"
	ReasonWaitingReady          = "WaitingForNodeReady"
	ReasonRegateFailed          = "RegateFailed"
	ReasonLeaderMoved           = "LeaderMoved"
	ReasonOutgoingDown          = "OutgoingDown"
	ReasonRemovalHeld           = "RemovalHeld"
	ReasonMemberRemoved         = "MemberRemoved"
	ReasonOutgoingPending       = "OutgoingPending"
	ReasonCandidateGone         = "CandidateGone"
	ReasonMembershipRestored    = "MembershipRestored"
	ReasonRollbackPending       = "RollbackUnconfirmed"
	ReasonReleased              = "Released"
	ReasonCooldown              = "Cooldown"
	ReasonUnfit                 = "VoterUnfit"
	ReasonVoterCount            = "VoterCountOffTarget"
	ReasonLeftover              = "Leftover"
	ReasonEtcdUnhealthy         = "EtcdUnhealthy"
	ReasonNoUnfitVoter          = "NoUnfitVoter"
	ReasonSwapInProgress        = "SwapInProgress"
)

// Outcomes recorded in a swap's history.
const (
	OutcomeStarted    = "Started"
	OutcomeDone       = "Done"
	OutcomeFailed     = "Failed"
	OutcomeRetried    = "Retried"
	OutcomeRefused    = "Refused"
	OutcomeAbandoned  = "Abandoned"
	OutcomeRolledBack = "RolledBack"
)

// SwapID is <UTC %Y%m%dT%H%M%SZ>-<out>-<in>.
func SwapID(at time.Time, out, in string) string {
	return at.UTC().Format("20060102T150405Z") + "-" + out + "-" + in
}

// Next is the next-action function: what one pass does, from what it sees.
// It is pure; the reconciler carries the action out and records it.
//
// Its order is the safety order: a swap in progress comes first (finished or
// rolled back before anything else, so an even voter count left behind is
// finished before any new decision), then leftovers of finished swaps, then
// a pending swap, then automatic decisions.
func Next(o *Observation) Decision {
	if o.Policy == nil {
		return Decision{Waiting: fmt.Sprintf("no VoterPolicy %s: create it to enable voter swaps", holdfastv1.VoterPolicyName)}
	}
	c := Assess(o)
	if s := runningSwap(o.Swaps); s != nil {
		return nextRunning(o, &c, s)
	}
	if held := o.Settings.Identity != "" && policy.SwapLeaseHolder(o.Lease) == o.Settings.Identity; held {
		// A swap finished (or was refused) while this process held the
		// Lease: free it.
		return act(&Action{Kind: ReleaseLease, SwapID: o.Lease.Annotations[holdfastv1.AnnotationSwapID], Reason: ReasonReleased,
			Message: "no swap in progress: swap Lease released"})
	}
	if d, ok := leftovers(o); ok {
		return d
	}
	if s := pendingSwap(o.Swaps); s != nil {
		return nextPending(o, &c, s)
	}
	return nextIdle(o, &c)
}

func act(a *Action) Decision { return Decision{Action: a, Swap: a.Swap} }

func wait(s *holdfastv1.VoterSwap, reason, msg string) Decision {
	d := Decision{Waiting: msg, WaitReason: reason}
	if s != nil {
		d.Swap = s.Name
	}
	return d
}

// runningSwap is the oldest swap in progress (one that has started and not
// finished). The webhook keeps it to one.
func runningSwap(swaps []holdfastv1.VoterSwap) *holdfastv1.VoterSwap {
	var out *holdfastv1.VoterSwap
	for i := range swaps {
		s := &swaps[i]
		if s.Status.Phase != holdfastv1.SwapRunning {
			continue
		}
		if out == nil || older(s, out) {
			out = s
		}
	}
	return out
}

// pendingSwap is the oldest swap not started yet.
func pendingSwap(swaps []holdfastv1.VoterSwap) *holdfastv1.VoterSwap {
	var out *holdfastv1.VoterSwap
	for i := range swaps {
		s := &swaps[i]
		if s.Status.Phase != "" && s.Status.Phase != holdfastv1.SwapPending {
			continue
		}
		if out == nil || older(s, out) {
			out = s
		}
	}
	return out
}

func older(a, b *holdfastv1.VoterSwap) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

func incomingOf(s *holdfastv1.VoterSwap) string {
	if s.Status.Incoming != "" {
		return s.Status.Incoming
	}
	return s.Spec.Incoming
}

func swapNodes(s *holdfastv1.VoterSwap) []string {
	nodes := []string{s.Spec.Outgoing}
	if in := incomingOf(s); in != "" {
		nodes = append(nodes, in)
	}
	return nodes
}

// --- pending ------------------------------------------------------------

func nextPending(o *Observation, c *Cluster, s *holdfastv1.VoterSwap) Decision {
	t := timesOf(o.Policy)
	if s.Spec.Origin == holdfastv1.SwapAutomatic && t.dryRun {
		return refuse(s, ReasonDryRun, "VoterPolicy dryRun is on: automatic swaps are only proposed (status.proposedSwap); a person's swap is carried out")
	}
	if errs := pendingGates(o, c, s); len(errs) > 0 {
		return refuse(s, ReasonGatesFailed, strings.Join(errs, "; "))
	}
	in := incomingOf(s)
	if in == "" {
		pod := o.Candidate
		switch {
		case pod == nil:
			return act(&Action{Kind: CreateCandidate, Swap: s.Name, Reason: ReasonNoCandidate,
				Message: "no incoming node named: asked " + holdfastv1.SchedulerName + " to place a voter-candidate pod"})
		case pod.Spec.NodeName == "":
			why := "the scheduler has not placed it yet"
			for _, cond := range pod.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Message != "" {
					why = cond.Message
				}
			}
			if s.Spec.Origin == holdfastv1.SwapAutomatic && o.Now.Sub(pod.CreationTimestamp.Time) > t.opTimeout {
				return refuse(s, ReasonNoCandidate, "no voter candidate within the operation timeout: "+why)
			}
			return wait(s, ReasonNoCandidate, fmt.Sprintf("waiting for a voter candidate (pod %s/%s): %s", pod.Namespace, pod.Name, why))
		default:
			return act(&Action{Kind: Record, Swap: s.Name, Then: &Change{Incoming: pod.Spec.NodeName, Phase: holdfastv1.SwapPending,
				History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepGates, OutcomeDone, ReasonCandidateChosen,
					fmt.Sprintf("%s placed the voter candidate on %s", holdfastv1.SchedulerName, pod.Spec.NodeName))}}})
		}
	}
	if o.Candidate != nil {
		return act(&Action{Kind: DeleteCandidate, Swap: s.Name, Reason: ReasonCandidateChosen, Message: "candidate taken: " + in})
	}
	id := SwapID(o.Now, s.Spec.Outgoing, in)
	return act(&Action{Kind: Record, Swap: s.Name, SwapID: id, Then: &Change{
		Phase: holdfastv1.SwapRunning, Step: holdfastv1.StepGates, SwapID: id, StartedAt: true, Incoming: in,
		Deadline: at(o.Now.Add(t.opTimeout)),
		History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepGates, OutcomeDone, ReasonGatesPassed,
			fmt.Sprintf("every gate holds: %s out, %s in", s.Spec.Outgoing, in))}}})
}

func refuse(s *holdfastv1.VoterSwap, reason, msg string) Decision {
	return act(&Action{Kind: Refuse, Swap: s.Name, Reason: reason, Message: msg, Then: &Change{
		Phase: holdfastv1.SwapRefused, Outcome: holdfastv1.SwapRefused, FinishedAt: true, ClearDeadline: true, Warning: true,
		History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepGates, OutcomeRefused, reason, msg)}}})
}

// pendingGates are docs/design.md §6 step 1's gates (SwapGates) on the VoterPolicy
// status this pass computed from etcd.
func pendingGates(o *Observation, c *Cluster, s *holdfastv1.VoterSwap) []string {
	p := o.Policy.DeepCopy()
	p.Status = PolicyStatus(o, c)
	spec := s.Spec
	spec.Incoming = incomingOf(s)
	return SwapGates(spec, policy.GateInput{Policy: p, Nodes: o.Nodes, SwapLease: o.Lease, Now: o.Now})
}

// --- running ------------------------------------------------------------

func nextRunning(o *Observation, c *Cluster, s *holdfastv1.VoterSwap) Decision {
	id := s.Status.SwapID
	if s.Status.Step != holdfastv1.StepRelease {
		if d, ok := needLease(o, s); ok {
			return d
		}
	}
	switch s.Status.Step {
	case holdfastv1.StepGates, "":
		return stepGates(o, c, s)
	case holdfastv1.StepSnapshot:
		return stepSnapshot(o, c, s)
	case holdfastv1.StepPromote:
		return stepPromote(o, c, s)
	case holdfastv1.StepRollback:
		return stepRollback(o, c, s)
	case holdfastv1.StepRegate:
		return stepRegate(o, c, s)
	case holdfastv1.StepStepDown:
		return stepStepDown(o, c, s)
	case holdfastv1.StepRemoveMember:
		return stepRemoveMember(o, c, s)
	case holdfastv1.StepFinishDemote:
		return stepFinishDemote(o, c, s)
	case holdfastv1.StepRelease:
		return stepRelease(o, s)
	}
	return wait(s, "UnknownStep", fmt.Sprintf("swap %s is at an unknown step %q", id, s.Status.Step))
}

// needLease: every step but Release acts only while this process holds the
// Lease for the swap. A Lease held by anyone else, unexpired, is waited
// out: never acted against.
func needLease(o *Observation, s *holdfastv1.VoterSwap) (Decision, bool) {
	id := s.Status.SwapID
	l := o.Lease
	holder := policy.SwapLeaseHolder(l)
	mine := holder == o.Settings.Identity && o.Settings.Identity != ""
	sameSwap := l != nil && l.Annotations[holdfastv1.AnnotationSwapID] == id
	held := policy.SwapLeaseHeld(l, o.Now)
	switch {
	case mine && sameSwap && held:
		return Decision{}, false
	case held && !mine:
		until := "with no expiry"
		if exp, ok := policy.SwapLeaseExpiry(l); ok {
			until = "until " + exp.UTC().Format(time.RFC3339)
		}
		return wait(s, ReasonLeaseHeld, fmt.Sprintf("the swap Lease is held by %s for swap %q %s; waiting, never acting, until it is released or expires",
			holder, l.Annotations[holdfastv1.AnnotationSwapID], until)), true
	case held && mine && !sameSwap:
		return act(&Action{Kind: ReleaseLease, Swap: s.Name, Reason: ReasonReleased,
			Message: fmt.Sprintf("the swap Lease names swap %q, not %s: released to be taken for it", l.Annotations[holdfastv1.AnnotationSwapID], id)}), true
	}
	return act(&Action{Kind: AcquireLease, Swap: s.Name, SwapID: id, Nodes: swapNodes(s), Reason: ReasonLeaseTaken,
		Message: fmt.Sprintf("took the swap Lease for %s (nodes %s)", id, strings.Join(swapNodes(s), ","))}), true
}

func stepGates(o *Observation, c *Cluster, s *holdfastv1.VoterSwap) Decision {
	t := timesOf(o.Policy)
	p := o.Policy.DeepCopy()
	p.Status = PolicyStatus(o, c)
	spec := s.Spec
	spec.Incoming = incomingOf(s)
	// The Lease is this swap's now: judge every other gate again.
	errs := SwapGates(spec, policy.GateInput{Policy: p, Nodes: o.Nodes, Now: o.Now})
	if len(errs) > 0 {
		msg := strings.Join(errs, "; ")
		return toRelease(s, holdfastv1.SwapRefused, holdfastv1.StepGates, OutcomeRefused, ReasonGatesFailed, msg)
	}
	return act(&Action{Kind: Record, Swap: s.Name, Then: &Change{Step: holdfastv1.StepSnapshot, Deadline: at(o.Now.Add(t.opTimeout)),
		History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepGates, OutcomeDone, ReasonGatesPassed, "every gate holds under the swap Lease")}}})
}

// toRelease ends the swap's work: the Release step tidies and finishes it
// into outcome.
func toRelease(s *holdfastv1.VoterSwap, outcome holdfastv1.SwapPhase, step holdfastv1.SwapStep, what, reason, msg string) Decision {
	return act(&Action{Kind: Record, Swap: s.Name, Then: &Change{Step: holdfastv1.StepRelease, Outcome: outcome, ClearDeadline: true,
		Warning: outcome != holdfastv1.SwapSucceeded,
		History: []holdfastv1.SwapStepRecord{rec(step, what, reason, msg)}}})
}

func stepSnapshot(o *Observation, c *Cluster, s *holdfastv1.VoterSwap) Decision {
	t := timesOf(o.Policy)
	if s.Status.Snapshot != nil {
		return act(&Action{Kind: Record, Swap: s.Name, Then: &Change{Step: holdfastv1.StepPromote, Deadline: at(o.Now.Add(t.drainWait)),
			History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepPromote, OutcomeStarted, "", "")}}})
	}
	if pastDeadline(o, s) {
		return toRelease(s, holdfastv1.SwapAbandoned, holdfastv1.StepSnapshot, OutcomeFailed, ReasonSnapshotFailed,
			"no verified snapshot within the operation timeout; nothing was changed")
	}
	// A voter that stays, preferably not the leader.
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
	if pick == "" {
		return wait(s, ReasonSnapshotFailed, "no voter that stays answers: no snapshot source")
	}
	m := c.ByNode[pick]
	return act(&Action{Kind: Snapshot, Swap: s.Name, SwapID: s.Status.SwapID, Node: pick, Member: m.ID, Endpoint: m.ClientURLs[0],
		Reason: ReasonSnapshotTaken, Then: &Change{Step: holdfastv1.StepPromote, Deadline: at(o.Now.Add(t.drainWait)),
			History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepPromote, OutcomeStarted, "", "")}}})
}

func pastDeadline(o *Observation, s *holdfastv1.VoterSwap) bool {
	return s.Status.Deadline != nil && !o.Now.Before(s.Status.Deadline.Time)
}

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
		return wait(s, "EtcdUnreachable", "the etcd member list could not be read: "+c.Err)
	}
	learner, listed := learnerOf(o, c, s)
	if n == nil {
		if listed || s.Status.IncomingMemberID != "" {
			return toRollback(o, s, ReasonCandidateGone, fmt.Sprintf("node %s is gone", in))
		}
		return toRelease(s, holdfastv1.SwapAbandoned, holdfastv1.StepPromote, OutcomeAbandoned, ReasonCandidateGone, fmt.Sprintf("node %s is gone; nothing was changed in etcd", in))
	}

	if !listed && s.Status.IncomingMemberID == "" {
		// Before the learner: cordon, wait for workloads, drain.
		if !cordoned(n, id) {
			return act(&Action{Kind: Cordon, Swap: s.Name, SwapID: id, Node: in, Reason: "Cordoned",
				Then: &Change{History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepPromote, "Cordoned", "", in+" cordoned and tainted "+holdfastv1.TaintVoterSwap)}}})
		}
		workload, evictable := classifyPods(o.Pods[in], o.Candidate)
		if len(workload) > 0 {
			if pastDeadline(o, s) {
				return toRelease(s, holdfastv1.SwapAbandoned, holdfastv1.StepPromote, OutcomeAbandoned, ReasonWorkloadTimeout,
					fmt.Sprintf("workload pods on %s outlasted the drain wait (%v): %s; a planned change never cuts a job", in, t.drainWait, podNames(workload)))
			}
			return wait(s, ReasonWorkloadPods, fmt.Sprintf("waiting for workload pods on %s to finish (until %s): %s",
				in, s.Status.Deadline.UTC().Format(time.RFC3339), podNames(workload)))
		}
		if len(evictable) > 0 {
			if s.Status.Deadline != nil && !o.Now.Before(s.Status.Deadline.Add(t.opTimeout)) {
				return toRelease(s, holdfastv1.SwapAbandoned, holdfastv1.StepPromote, OutcomeAbandoned, ReasonDrainTimeout,
					fmt.Sprintf("pods on %s were not evicted within the operation timeout: %s", in, podNames(evictable)))
			}
			return act(&Action{Kind: Evict, Swap: s.Name, Node: in, Pods: podKeys(evictable), Reason: "Draining",
				Message: fmt.Sprintf("evicting from %s: %s", in, podNames(evictable))})
		}
		peer := o.Settings.PeerURL(n)
		if peer == "" {
			return toRelease(s, holdfastv1.SwapAbandoned, holdfastv1.StepPromote, OutcomeAbandoned, "NoPeerURL",
				fmt.Sprintf("node %s has no %s annotation and no InternalIP: its peer URL is unknown", in, holdfastv1.AnnotationEtcdPeerURL))
		}
		if !c.Healthy() {
			return wait(s, ReasonEtcdUnhealthy, "the learner is added to a healthy cluster only: "+strings.Join(c.Problems, "; "))
		}
		return act(&Action{Kind: AddLearner, Swap: s.Name, Node: in, PeerURL: peer, Endpoints: answering(c, ""),
			Reason: ReasonLearnerAdded, Then: &Change{Deadline: at(o.Now.Add(t.learnerStall + t.opTimeout)),
				History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepPromote, "LearnerAdded", ReasonLearnerAdded,
					fmt.Sprintf("%s added as an etcd learner at %s", in, peer))}}})
	}
	if !listed {
		return toRollback(o, s, ReasonLearnerGone, fmt.Sprintf("the learner %s of %s is no longer in the member list", s.Status.IncomingMemberID, in))
	}
	if s.Status.IncomingMemberID == "" {
		return act(&Action{Kind: Record, Swap: s.Name, Then: &Change{IncomingMember: HexID(learner.ID),
			Deadline: at(o.Now.Add(t.learnerStall + t.opTimeout)),
			History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepPromote, "LearnerAdded", ReasonLearnerAdopted,
				fmt.Sprintf("learner %s of %s found in the member list", HexID(learner.ID), in))}}})
	}
	if learner.IsLearner {
		if pastDeadline(o, s) {
			return toRollback(o, s, ReasonNotVoterByDeadline, fmt.Sprintf("%s is not a voter by the learner stall time plus the operation timeout (%v)",
				in, t.learnerStall+t.opTimeout))
		}
		if !roleStepIs(n, id, holdfastv1.RoleServer, holdfastv1.RoleStepPromote) {
			return act(&Action{Kind: SetRoleStep, Swap: s.Name, SwapID: id, Node: in, DesiredRole: holdfastv1.RoleServer,
				RoleStep: holdfastv1.RoleStepPromote, Join: joinFor(o, c, in, learner.ID), Reason: "PromoteRequested",
				Then: &Change{History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepPromote, "ServerRequested", "", in+": desired-role server, role-step promote")}}})
		}
		rep := reportOf(n)
		if !reportIs(rep, id, holdfastv1.RoleStepPromote, holdfastv1.ActuatorDone) {
			return wait(s, ReasonWaitingActuator, fmt.Sprintf("waiting for the node plugin on %s to start the server: %s", in, describeReport(rep)))
		}
		if !learner.Started() {
			return wait(s, "LearnerNotStarted", fmt.Sprintf("the server on %s is started; waiting for its member to join", in))
		}
		return act(&Action{Kind: PromoteMember, Swap: s.Name, Node: in, Member: learner.ID, Endpoints: answering(c, in),
			Reason: ReasonPromoted, Then: &Change{History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepPromote, "Promoted", ReasonPromoted,
				fmt.Sprintf("member %s of %s promoted to a voter", HexID(learner.ID), in))}}})
	}
	// A voter: label it, wait for a Ready heartbeat after the start, uncordon.
	if _, ok := n.Labels[holdfastv1.LabelEtcdRole]; !ok {
		return act(&Action{Kind: SetEtcdLabel, Swap: s.Name, Node: in, Reason: "Labelled"})
	}
	rep := reportOf(n)
	var started time.Time
	if rep != nil && rep.StartedAt != nil {
		started = rep.StartedAt.Time
	}
	if !readyAfter(n, started) {
		return wait(s, ReasonWaitingReady, fmt.Sprintf("%s votes; waiting for its Node to be Ready on a heartbeat after the server start (%s)",
			in, started.UTC().Format(time.RFC3339)))
	}
	if cordoned(n, "") {
		return act(&Action{Kind: Uncordon, Swap: s.Name, Node: in, Reason: "Uncordoned"})
	}
	return act(&Action{Kind: Record, Swap: s.Name, Then: &Change{Step: holdfastv1.StepRegate, Deadline: at(o.Now.Add(t.opTimeout)),
		History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepPromote, OutcomeDone, ReasonPromoted, in+" is a voter and Ready")}}})
}

func toRollback(o *Observation, s *holdfastv1.VoterSwap, reason, msg string) Decision {
	t := timesOf(o.Policy)
	return act(&Action{Kind: Record, Swap: s.Name, Then: &Change{Step: holdfastv1.StepRollback, Deadline: at(o.Now.Add(t.opTimeout)), Warning: true,
		History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepPromote, OutcomeFailed, reason, msg+"; rolling back")}}})
}

func stepRollback(o *Observation, c *Cluster, s *holdfastv1.VoterSwap) Decision {
	t := timesOf(o.Policy)
	id, in := s.Status.SwapID, incomingOf(s)
	if !c.Reached {
		return wait(s, "EtcdUnreachable", "the etcd member list could not be read: "+c.Err)
	}
	if m, listed := learnerOf(o, c, s); listed {
		if !m.IsLearner {
			// Promoted after all (a promote answered late): it is a voter
			// now, removed only while every other voter is healthy.
			if why := othersUnhealthy(c, in, t.target); why != "" {
				return wait(s, ReasonRemovalHeld, "removal of "+in+" held: "+why)
			}
		}
		// A member that had started is recorded by its host, which then
		// notices the removal: the rollback waits for that (as finish-demote).
		reason := ""
		if m.Started() {
			reason = ReasonStartedLearnerRemoved
		}
		return act(&Action{Kind: RemoveMember, Swap: s.Name, Node: in, Member: m.ID, Endpoints: answering(c, in),
			Reason: "LearnerRemoved", Then: &Change{History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepRollback, "LearnerRemoved", reason,
				fmt.Sprintf("member %s of %s removed", HexID(m.ID), in))}}})
	}
	if n := o.Nodes[in]; n != nil {
		_, tombstone := n.Annotations[holdfastv1.AnnotationTombstone]
		if !roleStepIs(n, id, holdfastv1.RoleAgent, holdfastv1.RoleStepRollback) {
			if startedLearnerRemoved(s) && !tombstone && policy.NodeReady(n) && s.Status.Deadline != nil &&
				o.Now.Before(s.Status.Deadline.Add(-t.opTimeout/2)) {
				return wait(s, ReasonWaitingActuator, fmt.Sprintf("waiting for the node plugin on %s to record its learner's removal (%s)", in, holdfastv1.AnnotationTombstone))
			}
			return act(&Action{Kind: SetRoleStep, Swap: s.Name, SwapID: id, Node: in, DesiredRole: holdfastv1.RoleAgent,
				RoleStep: holdfastv1.RoleStepRollback, Reason: "RollbackRequested",
				Then: &Change{History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepRollback, "AgentRequested", "", in+": desired-role agent, role-step rollback")}}})
		}
		rep := reportOf(n)
		// Confirmed once the host is an agent again and no tombstone is
		// reported (it was retired beside the moved-aside data).
		confirmed := reportIs(rep, id, holdfastv1.RoleStepRollback, holdfastv1.ActuatorDone) && !tombstone
		if !confirmed && !pastDeadline(o, s) {
			return wait(s, ReasonWaitingActuator, fmt.Sprintf("waiting for the node plugin on %s to return the host to an agent and retire any tombstone: %s", in, describeReport(rep)))
		}
		if hasRoleLabels(n) {
			return act(&Action{Kind: ClearRoleLabels, Swap: s.Name, Node: in, Reason: "LabelsCleared"})
		}
		if cordoned(n, "") {
			return act(&Action{Kind: Uncordon, Swap: s.Name, Node: in, Reason: "Uncordoned"})
		}
		if !confirmed {
			return toRelease(s, holdfastv1.SwapRolledBack, holdfastv1.StepRollback, OutcomeRolledBack, ReasonRollbackPending,
				fmt.Sprintf("membership is as before; the node plugin on %s did not confirm the rollback within the operation timeout (%s): the host keeps its tombstone guard", in, describeReport(rep)))
		}
	}
	if len(c.Voters) != t.target || len(c.Learners) > 0 {
		return wait(s, "MembershipNotRestored", fmt.Sprintf("waiting for the membership to be as before: %d voters (target %d), learners %v", len(c.Voters), t.target, c.Learners))
	}
	return toRelease(s, holdfastv1.SwapRolledBack, holdfastv1.StepRollback, OutcomeRolledBack, ReasonMembershipRestored,
		fmt.Sprintf("%s returned to an agent; the members are as before: %s", in, strings.Join(c.Voters, ", ")))
}

// startedLearnerRemoved: the rollback removed a learner that had started.
func startedLearnerRemoved(s *holdfastv1.VoterSwap) bool {
	for _, h := range s.Status.History {
		if h.Step == holdfastv1.StepRollback && h.Reason == ReasonStartedLearnerRemoved {
			return true
		}
	}
	return false
}

func stepRegate(o *Observation, c *Cluster, s *holdfastv1.VoterSwap) Decision {
	t := timesOf(o.Policy)
	out := s.Spec.Outgoing
	m, listed := c.ByNode[out]
	if c.Reached && !listed {
		return act(&Action{Kind: Record, Swap: s.Name, Then: &Change{Step: holdfastv1.StepFinishDemote, Deadline: at(o.Now.Add(t.opTimeout)),
			History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepRegate, OutcomeDone, ReasonMemberRemoved, out+" is no member any more")}}})
	}
	if problems := regate(o, c, out, t.target+1); len(problems) > 0 {
		return wait(s, ReasonRegateFailed, "gates with target+1 voters: "+strings.Join(problems, "; "))
	}
	return act(&Action{Kind: Record, Swap: s.Name, Then: &Change{Step: holdfastv1.StepStepDown, OutgoingMember: HexID(m.ID),
		Deadline: at(o.Now.Add(t.opTimeout)),
		History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepRegate, OutcomeDone, ReasonGatesPassed,
			regatePassed(c, out))}}})
}

// regate is docs/design.md §6 step 3: every gate again, with want voters. The
// outgoing voter may be down (its removal goes on when the others are
// healthy).
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
	t := timesOf(o.Policy)
	id, out := s.Status.SwapID, s.Spec.Outgoing
	if !c.Reached {
		return wait(s, "EtcdUnreachable", "the etcd member list could not be read: "+c.Err)
	}
	mid, _ := ParseHexID(s.Status.OutgoingMemberID)
	_, m, listed := c.memberByID(mid)
	if !listed {
		return act(&Action{Kind: Record, Swap: s.Name, Then: &Change{Step: holdfastv1.StepFinishDemote, Deadline: at(o.Now.Add(t.opTimeout)),
			History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepStepDown, OutcomeDone, ReasonMemberRemoved, out+" is no member any more")}}})
	}
	n := o.Nodes[out]
	// Down is judged by the Node, not by the member: the step-down itself
	// restarts the member, which then answers nothing for a while.
	down := n == nil || !policy.NodeReady(n)
	if !down && m.Answered && c.Leader == m.ID {
		if to, ok := transferee(c, out, incomingOf(s)); ok {
			return act(&Action{Kind: MoveLeader, Swap: s.Name, Node: out, Member: m.ID, To: c.ByNode[to].ID, Endpoint: m.ClientURLs[0],
				Reason: ReasonLeaderMoved, Then: &Change{History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepStepDown, "LeaderMoved", ReasonLeaderMoved,
					fmt.Sprintf("leadership moved from %s to %s", out, to))}}})
		}
	}
	if n != nil && !cordoned(n, id) {
		return act(&Action{Kind: Cordon, Swap: s.Name, SwapID: id, Node: out, Reason: "Cordoned",
			Then: &Change{History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepStepDown, "Cordoned", "", out+" cordoned and tainted "+holdfastv1.TaintVoterSwap)}}})
	}
	if n != nil && !down && !pastDeadline(o, s) {
		if _, evictable := classifyPods(o.Pods[out], nil); len(evictable) > 0 {
			return act(&Action{Kind: Evict, Swap: s.Name, Node: out, Pods: podKeys(evictable), Reason: "Draining",
				Message: fmt.Sprintf("evicting from %s: %s", out, podNames(evictable))})
		}
	}
	if n != nil && !roleStepIs(n, id, holdfastv1.RoleAgent, holdfastv1.RoleStepStepDown) &&
		!roleStepIs(n, id, holdfastv1.RoleAgent, holdfastv1.RoleStepFinishDemote) {
		return act(&Action{Kind: SetRoleStep, Swap: s.Name, SwapID: id, Node: out, DesiredRole: holdfastv1.RoleAgent,
			RoleStep: holdfastv1.RoleStepStepDown, Reason: "StepDownRequested",
			Then: &Change{History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepStepDown, "AgentRequested", "", out+": desired-role agent, role-step step-down")}}})
	}
	rep := reportOf(n)
	switch {
	case reportIs(rep, id, holdfastv1.RoleStepStepDown, holdfastv1.ActuatorDone):
		return act(&Action{Kind: Record, Swap: s.Name, Then: &Change{Step: holdfastv1.StepRemoveMember, Deadline: at(o.Now.Add(t.opTimeout)),
			History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepStepDown, OutcomeDone, "", out+": role file agent, server held out of serving; the member still votes")}}})
	case down:
		why := "its Node is not Ready"
		if n == nil {
			why = "its Node is gone"
		}
		return act(&Action{Kind: Record, Swap: s.Name, Then: &Change{Step: holdfastv1.StepRemoveMember, Deadline: at(o.Now.Add(t.opTimeout)), Warning: true,
			History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepStepDown, OutcomeDone, ReasonOutgoingDown,
				fmt.Sprintf("%s is down (%s): removed without its step-down, its tombstone guard keeps it out", out, why))}}})
	}
	return wait(s, ReasonWaitingActuator, fmt.Sprintf("waiting for the node plugin on %s to step down: %s", out, describeReport(rep)))
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
		return wait(s, "EtcdUnreachable", "the etcd member list could not be read: "+c.Err)
	}
	mid, _ := ParseHexID(s.Status.OutgoingMemberID)
	_, m, listed := c.memberByID(mid)
	if !listed {
		return act(&Action{Kind: Record, Swap: s.Name, Then: &Change{Step: holdfastv1.StepFinishDemote, Deadline: at(o.Now.Add(t.opTimeout)),
			History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepRemoveMember, OutcomeDone, ReasonMemberRemoved,
				fmt.Sprintf("member %s of %s removed", HexID(mid), out))}}})
	}
	if why := othersUnhealthy(c, out, t.target); why != "" {
		return wait(s, ReasonRemovalHeld, "removal of "+out+" held while the voters that stay are not all healthy: "+why)
	}
	if c.Leader == m.ID && m.Answered {
		if to, ok := transferee(c, out, incomingOf(s)); ok {
			return act(&Action{Kind: MoveLeader, Swap: s.Name, Node: out, Member: m.ID, To: c.ByNode[to].ID, Endpoint: m.ClientURLs[0],
				Reason: ReasonLeaderMoved, Then: &Change{History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepRemoveMember, "LeaderMoved", ReasonLeaderMoved,
					fmt.Sprintf("leadership moved from %s to %s", out, to))}}})
		}
	}
	return act(&Action{Kind: RemoveMember, Swap: s.Name, Node: out, Member: m.ID, Endpoints: answering(c, out), Reason: ReasonMemberRemoved,
		Then: &Change{Step: holdfastv1.StepFinishDemote, Deadline: at(o.Now.Add(t.opTimeout)),
			History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepRemoveMember, OutcomeDone, ReasonMemberRemoved,
				fmt.Sprintf("member %s of %s removed", HexID(m.ID), out))}}})
}

func stepFinishDemote(o *Observation, c *Cluster, s *holdfastv1.VoterSwap) Decision {
	id, out := s.Status.SwapID, s.Spec.Outgoing
	n := o.Nodes[out]
	if n == nil {
		return toRelease(s, holdfastv1.SwapSucceeded, holdfastv1.StepFinishDemote, OutcomeDone, "NodeGone", out+" has no Node any more; its member is removed")
	}
	if !roleStepIs(n, id, holdfastv1.RoleAgent, holdfastv1.RoleStepFinishDemote) {
		// The host first records the removal (its tombstone, reported on
		// the Node), then finishes: a finish that ran while the host was
		// still noticing the removal would leave a tombstone behind it, and
		// the node could never be promoted again. A host that is down, or
		// silent for half the step's time, gets the step all the same.
		_, tombstone := n.Annotations[holdfastv1.AnnotationTombstone]
		t := timesOf(o.Policy)
		if !tombstone && policy.NodeReady(n) && s.Status.Deadline != nil && o.Now.Before(s.Status.Deadline.Add(-t.opTimeout/2)) {
			return wait(s, ReasonWaitingActuator, fmt.Sprintf("waiting for the node plugin on %s to record its member's removal (%s)", out, holdfastv1.AnnotationTombstone))
		}
		return act(&Action{Kind: SetRoleStep, Swap: s.Name, SwapID: id, Node: out, DesiredRole: holdfastv1.RoleAgent,
			RoleStep: holdfastv1.RoleStepFinishDemote, Reason: "FinishDemoteRequested",
			Then: &Change{History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepFinishDemote, "AgentRequested", "", out+": role-step finish-demote")}}})
	}
	// Its member is gone (the policy status this pass wrote says so, which
	// the webhook reads before it lets the role labels go).
	if hasRoleLabels(n) {
		return act(&Action{Kind: ClearRoleLabels, Swap: s.Name, Node: out, Reason: "LabelsCleared",
			Then: &Change{History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepFinishDemote, "LabelsCleared", "",
				out+": etcd and control-plane role labels and etcd annotations removed")}}})
	}
	rep := reportOf(n)
	_, tombstone := n.Annotations[holdfastv1.AnnotationTombstone]
	finished := reportIs(rep, id, holdfastv1.RoleStepFinishDemote, holdfastv1.ActuatorDone) && readyAfter(n, rep.At.Time)
	// The tombstone annotation goes once the host retired it beside the
	// moved-aside data: until then the node reads as a removed member, and a
	// swap bringing it back in would be refused.
	if finished && !tombstone {
		if cordoned(n, "") {
			return act(&Action{Kind: Uncordon, Swap: s.Name, Node: out, Reason: "Uncordoned"})
		}
		return toRelease(s, holdfastv1.SwapSucceeded, holdfastv1.StepFinishDemote, OutcomeDone, "", out+" is an agent and Ready")
	}
	if pastDeadline(o, s) {
		return toRelease(s, holdfastv1.SwapSucceeded, holdfastv1.StepFinishDemote, OutcomeDone, ReasonOutgoingPending,
			fmt.Sprintf("%s's member is removed; its host has not finished to an agent and Ready within the operation timeout (%s): it stays cordoned, its role step stays for its node plugin, node recovery may handle it",
				out, describeReport(rep)))
	}
	if finished {
		return wait(s, ReasonWaitingActuator, fmt.Sprintf("waiting for the node plugin on %s to report its tombstone retired (%s)", out, holdfastv1.AnnotationTombstone))
	}
	return wait(s, ReasonWaitingActuator, fmt.Sprintf("waiting for the node plugin on %s to finish it to an agent, then a Ready heartbeat: %s", out, describeReport(rep)))
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
		return act(&Action{Kind: ClearRoleStep, Swap: s.Name, Node: name, Reason: "RoleStepCleared"})
	}
	if outcome != holdfastv1.SwapSucceeded {
		if in := incomingOf(s); in != "" {
			if n := o.Nodes[in]; n != nil && cordoned(n, id) && policy.NodeReady(n) {
				return act(&Action{Kind: Uncordon, Swap: s.Name, Node: in, Reason: "Uncordoned"})
			}
		}
	}
	if o.Candidate != nil {
		return act(&Action{Kind: DeleteCandidate, Swap: s.Name, Reason: ReasonReleased})
	}
	return act(&Action{Kind: Record, Swap: s.Name, Then: &Change{Phase: outcome, FinishedAt: true, ClearDeadline: true,
		Warning: outcome != holdfastv1.SwapSucceeded,
		History: []holdfastv1.SwapStepRecord{rec(holdfastv1.StepRelease, string(outcome), ReasonReleased, "swap finished: "+string(outcome))}}})
}

// --- idle -----------------------------------------------------------------

// leftovers tidies what finished swaps left: a role step its host has since
// carried out, and a node cordoned by a swap that is Ready again.
func leftovers(o *Observation) (Decision, bool) {
	names := make([]string, 0, len(o.Nodes))
	for name := range o.Nodes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		n := o.Nodes[name]
		step := n.Annotations[holdfastv1.AnnotationRoleStep]
		swap := n.Annotations[holdfastv1.AnnotationRoleSwap]
		if step != "" && reportIs(reportOf(n), swap, step, holdfastv1.ActuatorDone) {
			return act(&Action{Kind: ClearRoleStep, Node: name, Reason: ReasonLeftover,
				Message: fmt.Sprintf("%s carried out %s for swap %s after it finished", name, step, swap)}), true
		}
		if cordoned(n, "") && step == "" && policy.NodeReady(n) && !hasRoleLabels(n) {
			return act(&Action{Kind: Uncordon, Node: name, Reason: ReasonLeftover,
				Message: fmt.Sprintf("%s is Ready again after its swap finished", name)}), true
		}
	}
	return Decision{}, false
}

func nextIdle(o *Observation, c *Cluster) Decision {
	t := timesOf(o.Policy)
	if !c.Reached || !c.Healthy() {
		return withdraw(o, Decision{WaitReason: ReasonEtcdUnhealthy, Waiting: "no automatic decision while etcd is not healthy"})
	}
	if len(c.Voters) != t.target {
		return withdraw(o, Decision{WaitReason: ReasonVoterCount, Waiting: fmt.Sprintf(
			"%d voters where the target is %d and no swap is in progress: no automatic decision; a person decides (docs/voter-swap.md)", len(c.Voters), t.target)})
	}
	out, why := unfitVoter(o, c, t)
	if out == "" {
		return withdraw(o, Decision{})
	}
	if until, ok := cooldownUntil(o, t); ok {
		return withdraw(o, Decision{WaitReason: ReasonCooldown, Waiting: fmt.Sprintf("%s is unfit (%s) but the cooldown runs until %s", out, why, until.UTC().Format(time.RFC3339))})
	}
	spec := holdfastv1.VoterSwapSpec{Outgoing: out, Origin: holdfastv1.SwapAutomatic}
	p := o.Policy.DeepCopy()
	p.Status = PolicyStatus(o, c)
	if errs := policy.SwapGates(&spec, policy.GateInput{Policy: p, Nodes: o.Nodes, SwapLease: o.Lease, Now: o.Now}); len(errs) > 0 {
		return Decision{WaitReason: ReasonGatesFailed, Waiting: fmt.Sprintf("%s is unfit (%s) but the gates fail: %s", out, why, errs.ToAggregate().Error())}
	}
	reason := fmt.Sprintf("%s unfit for the window %v: %s", out, t.window, why)
	if t.dryRun {
		if ps := o.Policy.Status.ProposedSwap; ps != nil && ps.Outgoing == out && ps.Reason == reason {
			return Decision{WaitReason: ReasonDryRun, Waiting: "proposed (dry run): " + reason}
		}
		return act(&Action{Kind: Propose, Outgoing: out, Reason: ReasonDryRun, Message: reason})
	}
	return act(&Action{Kind: CreateSwap, Outgoing: out, Reason: ReasonUnfit, Message: reason})
}

// withdraw clears a dry-run proposal that no longer stands.
// The decision keeps what it waits for (VoterPolicy's AutomaticSwap
// condition says it).
func withdraw(o *Observation, d Decision) Decision {
	if o.Policy.Status.ProposedSwap != nil {
		w := act(&Action{Kind: Withdraw, Reason: ReasonDryRun, Message: "proposal withdrawn: " + d.Waiting})
		w.Waiting, w.WaitReason = d.Waiting, d.WaitReason
		return w
	}
	return d
}

// unfitVoter is the voter unfit for a whole window, the worst first; pinned
// voters are never chosen.
func unfitVoter(o *Observation, c *Cluster, t policyTimes) (string, string) {
	best, why, score := "", "", 0.0
	for _, v := range c.Voters {
		n := o.Nodes[v]
		since, ok := o.UnfitSince[v]
		if n == nil || !ok || o.Now.Sub(since) < t.window || policy.NodePinned(n) {
			continue
		}
		verdict, sc, w := JudgeFitness(n, t, o.Now)
		if verdict != Unfit {
			continue
		}
		if best == "" || sc > score {
			best, why, score = v, w, sc
		}
	}
	return best, why
}

// cooldownUntil is when automatic swaps may start again: cooldownSeconds
// after the last swap that changed or tried to change the members
// (Succeeded, RolledBack) or an automatic one refused (so a decision is not
// retried on every pass). An abandoned swap starts no cooldown.
func cooldownUntil(o *Observation, t policyTimes) (time.Time, bool) {
	var last time.Time
	consider := func(phase holdfastv1.SwapPhase, origin holdfastv1.SwapOrigin, at *metav1.Time) {
		if at == nil {
			return
		}
		if phase == holdfastv1.SwapSucceeded || phase == holdfastv1.SwapRolledBack ||
			(phase == holdfastv1.SwapRefused && origin == holdfastv1.SwapAutomatic) {
			if at.After(last) {
				last = at.Time
			}
		}
	}
	for i := range o.Swaps {
		s := &o.Swaps[i]
		consider(s.Status.Phase, s.Spec.Origin, s.Status.FinishedAt)
	}
	if ls := o.Policy.Status.LastSwap; ls != nil {
		consider(ls.Phase, "", ls.FinishedAt)
	}
	until := last.Add(t.cooldown)
	return until, !last.IsZero() && o.Now.Before(until)
}

// --- node helpers -------------------------------------------------------------

// cordoned reports whether a swap cordoned the node (its taint, with the swap
// ID when swapID is not empty).
func cordoned(n *corev1.Node, swapID string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == holdfastv1.TaintVoterSwap && (swapID == "" || t.Value == swapID) {
			return n.Spec.Unschedulable
		}
	}
	return false
}

func roleStepIs(n *corev1.Node, swapID, desired, step string) bool {
	return n.Labels[holdfastv1.LabelDesiredRole] == desired && n.Annotations[holdfastv1.AnnotationRoleSwap] == swapID &&
		n.Annotations[holdfastv1.AnnotationRoleStep] == step
}

func reportOf(n *corev1.Node) *holdfastv1.ActuatorReport {
	if n == nil {
		return nil
	}
	v, ok := n.Annotations[holdfastv1.AnnotationActuator]
	if !ok {
		return nil
	}
	r, err := holdfastv1.ParseActuatorReport(v)
	if err != nil {
		return nil
	}
	return r
}

func reportIs(r *holdfastv1.ActuatorReport, swapID, step, phase string) bool {
	return r != nil && r.Swap == swapID && r.Step == step && r.Phase == phase
}

func describeReport(r *holdfastv1.ActuatorReport) string {
	if r == nil {
		return "no report yet"
	}
	s := fmt.Sprintf("last report %s %s for swap %s", r.Step, r.Phase, r.Swap)
	if r.Message != "" {
		s += ": " + r.Message
	}
	return s
}

// readyAfter: the Node is Ready on a heartbeat after t.
func readyAfter(n *corev1.Node, t time.Time) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue && c.LastHeartbeatTime.After(t)
		}
	}
	return false
}

// etcdAnnotationPrefix marks k3s's etcd annotations on a server's Node.
const etcdAnnotationPrefix = "etcd.k3s.cattle.io/"

func hasRoleLabels(n *corev1.Node) bool {
	for _, k := range []string{holdfastv1.LabelEtcdRole, holdfastv1.LabelControlPlaneRole} {
		if _, ok := n.Labels[k]; ok {
			return true
		}
	}
	for k := range n.Annotations {
		if strings.HasPrefix(k, etcdAnnotationPrefix) {
			return true
		}
	}
	return false
}

// joinFor is the role-join annotation: every member as name=peerURL, the
// new one under its node's name.
func joinFor(o *Observation, c *Cluster, in string, id uint64) string {
	var parts []string
	for _, m := range o.Etcd.Members {
		name := m.Name
		if m.ID == id {
			name = in
		}
		if name == "" {
			name = HexID(m.ID)
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, name+"="+u)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// answering are the client URLs of the members that answer, but skip's.
func answering(c *Cluster, skip string) []string {
	var out []string
	nodes := make([]string, 0, len(c.ByNode))
	for node := range c.ByNode {
		nodes = append(nodes, node)
	}
	sort.Strings(nodes)
	for _, node := range nodes {
		m := c.ByNode[node]
		if node != skip && m.Answered && !m.IsLearner {
			out = append(out, m.ClientURLs...)
		}
	}
	return out
}

// classifyPods splits a node's pods: workload pods run to completion (a
// Job's, restartPolicy not Always) or drive plant equipment (a unit
// runtime, which only the unit controller moves): they are waited for,
// never evicted. The rest is evicted, except DaemonSet, mirror and finished
// pods and the voter-candidate pod.
func classifyPods(pods []corev1.Pod, candidate *corev1.Pod) (workload, evictable []corev1.Pod) {
	for _, p := range pods {
		switch {
		case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
		case candidate != nil && p.Namespace == candidate.Namespace && p.Name == candidate.Name:
		case p.Labels[holdfastv1.LabelRole] == holdfastv1.RoleVoterCandidate:
		case p.Annotations[corev1.MirrorPodAnnotationKey] != "":
		case ownedBy(&p, "DaemonSet"):
		case p.Labels[holdfastv1.LabelUnit] != "" || ownedBy(&p, "Job") || p.Spec.RestartPolicy == corev1.RestartPolicyNever || p.Spec.RestartPolicy == corev1.RestartPolicyOnFailure:
			workload = append(workload, p)
		default:
			evictable = append(evictable, p)
		}
	}
	return workload, evictable
}

func ownedBy(p *corev1.Pod, kind string) bool {
	for _, r := range p.OwnerReferences {
		if r.Kind == kind && r.Controller != nil && *r.Controller {
			return true
		}
	}
	return false
}

func podNames(pods []corev1.Pod) string {
	var names []string
	for _, p := range pods {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	return strings.Join(names, ", ")
}

func podKeys(pods []corev1.Pod) []types.NamespacedName {
	var out []types.NamespacedName
	for _, p := range pods {
		out = append(out, types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
	}
	return out
}
