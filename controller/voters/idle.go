package voters

import (
	"fmt"
	"time"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"

	"github.com/holdfast-io/holdfast/policy"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Automatic decisions while no swap runs: an unfit voter, the cooldown, the
// dry run's proposal.

func nextIdle(o *Observation, c *Cluster) Decision {
	t := timesOf(o.Policy)
	if !c.Reached || !c.Healthy() {
		return withdraw(o, Decision{WaitReason: holdfastv1.SwapReasonEtcdUnhealthy, Waiting: "no automatic decision while etcd is not healthy"})
	}
	if len(c.Voters) != t.target {
		return withdraw(o, Decision{WaitReason: holdfastv1.SwapReasonVoterCountOffTarget, Waiting: fmt.Sprintf(
			"%d voters where the target is %d and no swap is in progress: no automatic decision; a person decides (docs/voter-swap.md)", len(c.Voters), t.target)})
	}
	out, why := unfitVoter(o, c, t)
	if out == "" {
		return withdraw(o, Decision{})
	}
	if until, ok := cooldownUntil(o, t); ok {
		return withdraw(o, Decision{WaitReason: holdfastv1.SwapReasonCooldown, Waiting: fmt.Sprintf("%s is unfit (%s) but the cooldown runs until %s", out, why, until.UTC().Format(time.RFC3339))})
	}
	spec := holdfastv1.VoterSwapSpec{Outgoing: out, Origin: holdfastv1.SwapAutomatic}
	if errs := policy.SwapGates(&spec, gateInput(o, c, true)); len(errs) > 0 {
		return Decision{WaitReason: holdfastv1.SwapReasonGatesFailed, Waiting: fmt.Sprintf("%s is unfit (%s) but the gates fail: %s", out, why, errs.ToAggregate().Error())}
	}
	reason := fmt.Sprintf("%s unfit for the window %v: %s", out, t.window, why)
	if t.dryRun {
		if ps := o.Policy.Status.ProposedSwap; ps != nil && ps.Outgoing == out && ps.Reason == reason {
			return Decision{WaitReason: holdfastv1.SwapReasonDryRun, Waiting: "proposed (dry run): " + reason}
		}
		return act(&Action{Kind: Propose, Outgoing: out, Reason: holdfastv1.SwapReasonDryRun, Message: reason})
	}
	return act(&Action{Kind: CreateSwap, Outgoing: out, Reason: holdfastv1.SwapReasonVoterUnfit, Message: reason})
}

// withdraw clears a dry-run proposal that no longer stands.
// The decision keeps what it waits for (VoterPolicy's AutomaticSwap
// condition says it).
func withdraw(o *Observation, d Decision) Decision {
	if o.Policy.Status.ProposedSwap != nil {
		w := act(&Action{Kind: Withdraw, Reason: holdfastv1.SwapReasonDryRun, Message: "proposal withdrawn: " + d.Waiting})
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
