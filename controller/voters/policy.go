package voters

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

// Policy defaults, for a VoterPolicy stored before its CRD defaults applied.
const (
	defaultTarget           = 3
	defaultCooldown         = time.Hour
	defaultOperationTimeout = 10 * time.Minute
	defaultDrainWait        = 15 * time.Minute
	defaultLearnerStall     = 5 * time.Minute
)

// policyTimes are a VoterPolicy's durations.
type policyTimes struct {
	target                       int
	cooldown, opTimeout          time.Duration
	drainWait, learnerStall      time.Duration
	dryRun                       bool
	window                       time.Duration
	maxFsyncMicros, maxRTTMicros int64
}

func timesOf(p *holdfastv1.VoterPolicy) policyTimes {
	s := p.Spec
	secs := func(v int32, def time.Duration) time.Duration {
		if v <= 0 {
			return def
		}
		return time.Duration(v) * time.Second
	}
	// 0 is a setting (no cooldown, no drain wait); only an absent field
	// takes the default.
	orDefault := func(v *int32, def time.Duration) time.Duration {
		if v == nil {
			return def
		}
		return time.Duration(max(*v, 0)) * time.Second
	}
	t := policyTimes{
		target:       int(s.TargetVoters),
		cooldown:     orDefault(s.CooldownSeconds, defaultCooldown),
		opTimeout:    secs(s.OperationTimeoutSeconds, defaultOperationTimeout),
		drainWait:    orDefault(s.WorkloadDrainWaitSeconds, defaultDrainWait),
		learnerStall: secs(s.LearnerStallSeconds, defaultLearnerStall),
		dryRun:       s.DryRun == nil || *s.DryRun,
		window:       secs(s.Fitness.WindowSeconds, 10*time.Minute),
	}
	if t.target <= 0 {
		t.target = defaultTarget
	}
	t.maxFsyncMicros = int64(s.Fitness.MaxFsyncMillis) * 1000
	if t.maxFsyncMicros <= 0 {
		t.maxFsyncMicros = 10_000
	}
	t.maxRTTMicros = int64(s.Fitness.MaxPeerRTTMillis) * 1000
	if t.maxRTTMicros <= 0 {
		t.maxRTTMicros = 50_000
	}
	return t
}

// PolicyStatus is the VoterPolicy status this pass reports: etcd's own view
// of its members (the webhook's gates read it), when it was observed, the
// even count, and the last finished swap. ProposedSwap is kept; Next proposes or withdraws it.
func PolicyStatus(o *Observation, c *Cluster) holdfastv1.VoterPolicyStatus {
	p := o.Policy
	st := *p.Status.DeepCopy()
	st.ObservedGeneration = p.Generation
	now := metav1.NewTime(o.Now)
	// The heartbeat the swap gates judge the status's age by
	// (rules.StatusFresh): stamped when half a heartbeat old, so an idle
	// pass writes the status about once per heartbeat, not on every event.
	if t := st.ObservedTime; t == nil || o.Now.Sub(t.Time) >= policy.StatusHeartbeat/2 || o.Now.Before(t.Time) {
		st.ObservedTime = &now
	}

	if c.Reached {
		st.Voters = c.Voters
		st.Learners = c.Learners
		st.Leader = o.LeaderNode(c)
		st.ClusterID = c.ClusterID
		st.ClientURLs = voterClientURLs(o.Etcd)
	} else {
		// Unknown is not "none": keep what was last seen, and say so in
		// EtcdHealthy, which the gates read first.
		st.Leader = ""
	}
	health := metav1.Condition{Type: holdfastv1.ConditionEtcdHealthy, Status: metav1.ConditionTrue,
		Reason: holdfastv1.SwapReasonAllMembersHealthy, Message: fmt.Sprintf("%d voters answer and agree on the leader %s", len(c.Voters), st.Leader),
		ObservedGeneration: p.Generation}
	if !c.Healthy() {
		health.Status, health.Reason, health.Message = metav1.ConditionFalse, c.Reason, strings.Join(c.Problems, "; ")
	}
	setCondition(&st.Conditions, health, now)

	even := c.Reached && len(c.Voters) > 0 && len(c.Voters)%2 == 0
	evenCond := metav1.Condition{Type: holdfastv1.ConditionVotersEven, Status: metav1.ConditionFalse, Reason: holdfastv1.SwapReasonOdd,
		Message: fmt.Sprintf("%d voters", len(st.Voters)), ObservedGeneration: p.Generation}
	switch {
	case even:
		if st.EvenSince == nil {
			st.EvenSince = &now
		}
		evenCond.Status, evenCond.Reason = metav1.ConditionTrue, holdfastv1.SwapReasonEven
		evenCond.Message = fmt.Sprintf("%d voters since %s: an even count tolerates no more failures than one fewer; the swap in progress finishes the removal before anything else",
			len(c.Voters), st.EvenSince.UTC().Format(time.RFC3339))
	case c.Reached:
		st.EvenSince = nil
	}
	setCondition(&st.Conditions, evenCond, now)

	if last := lastFinished(o.Swaps); last != nil &&
		(st.LastSwap == nil || st.LastSwap.FinishedAt == nil || last.Status.FinishedAt.After(st.LastSwap.FinishedAt.Time) ||
			(st.LastSwap.Name == last.Name && st.LastSwap.Phase != last.Status.Phase)) {
		st.LastSwap = &holdfastv1.SwapOutcome{Name: last.Name, SwapID: last.Status.SwapID, Phase: last.Status.Phase,
			FinishedAt: last.Status.FinishedAt.DeepCopy()}
	}
	return st
}

// setCondition sets a condition, keeping its transition time when its
// status does not change.
func setCondition(conds *[]metav1.Condition, c metav1.Condition, now metav1.Time) {
	c.LastTransitionTime = now
	meta.SetStatusCondition(conds, c)
}

// lastFinished is the swap that finished last.
func lastFinished(swaps []holdfastv1.VoterSwap) *holdfastv1.VoterSwap {
	var last *holdfastv1.VoterSwap
	for i := range swaps {
		s := &swaps[i]
		if !s.Status.Phase.Finished() || s.Status.FinishedAt == nil {
			continue
		}
		if last == nil || s.Status.FinishedAt.After(last.Status.FinishedAt.Time) {
			last = s
		}
	}
	return last
}

// AutomaticCondition is VoterPolicy's AutomaticSwap condition for this
// pass's decision: True when it creates an automatic swap, False with the
// reason none is made (a swap in progress, the cooldown, the gates, dry run,
// etcd unhealthy, the voter count off target, no voter unfit for a whole
// window). ok is false when the pass made no automatic decision (it tidies
// leftovers or frees the Lease): the condition stays as it was.
func AutomaticCondition(o *Observation, d Decision) (metav1.Condition, bool) {
	c := metav1.Condition{Type: holdfastv1.ConditionAutomaticSwap, Status: metav1.ConditionFalse, ObservedGeneration: o.Policy.Generation}
	s := runningSwap(o.Swaps)
	if s == nil {
		s = pendingSwap(o.Swaps)
	}
	a := d.Action
	switch {
	case s != nil:
		c.Reason, c.Message = holdfastv1.SwapReasonSwapInProgress, fmt.Sprintf("VoterSwap %s is in progress: no automatic decision until it finishes", s.Name)
	case a != nil && a.Kind == CreateSwap:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, holdfastv1.SwapReasonVoterUnfit, a.Message
	case a != nil && a.Kind == Propose:
		c.Reason, c.Message = holdfastv1.SwapReasonDryRun, "proposed (dry run): "+a.Message
	case a != nil && a.Kind != Withdraw:
		return c, false
	case d.WaitReason != "":
		c.Reason, c.Message = d.WaitReason, d.Waiting
	default:
		c.Reason, c.Message = holdfastv1.SwapReasonNoUnfitVoter, fmt.Sprintf("no voter has been unfit for a whole fitness window (%v)", timesOf(o.Policy).window)
	}
	return c, true
}

// heldBack reports whether an AutomaticSwap reason means a voter is unfit,
// or automatic swaps are off, and nothing is done about it now: worth a
// Warning Event when it starts.
func heldBack(reason string) bool {
	switch reason {
	case holdfastv1.SwapReasonCooldown, holdfastv1.SwapReasonGatesFailed, holdfastv1.SwapReasonEtcdUnhealthy, holdfastv1.SwapReasonVoterCountOffTarget:
		return true
	}
	return false
}

// voterClientURLs are the voters' client URLs in the member list, sorted
// (VoterPolicy status.clientURLs, which the node plugins follow).
func voterClientURLs(v EtcdView) []string {
	var out []string
	for _, m := range v.Members {
		if !m.IsLearner {
			for _, u := range m.ClientURLs {
				if !slices.Contains(out, u) {
					out = append(out, u)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}
