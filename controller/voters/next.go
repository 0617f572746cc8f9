package voters

import (
	"fmt"
	"strings"
	"time"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"

	"github.com/holdfast-io/holdfast/policy"
)

// Next and the pass's order over swaps: a swap in progress first, then
// leftovers, then a pending swap, then automatic decisions.

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
	c := o.Cluster()
	if s := runningSwap(o.Swaps); s != nil {
		return nextRunning(o, c, s)
	}
	if held := o.Settings.Identity != "" && policy.SwapLeaseHolder(o.Lease) == o.Settings.Identity; held {
		// A swap finished (or was refused) while this process held the
		// Lease: free it.
		return act(&Action{Kind: ReleaseLease, SwapID: o.Lease.Annotations[holdfastv1.AnnotationSwapID], Reason: holdfastv1.SwapReasonReleased,
			Message: "no swap in progress: swap Lease released"})
	}
	if d, ok := leftovers(o); ok {
		return d
	}
	if s := pendingSwap(o.Swaps); s != nil {
		return nextPending(o, c, s)
	}
	return nextIdle(o, c)
}

func act(a *Action) Decision { return Decision{Action: a, Swap: a.Swap} }

func wait(s *holdfastv1.VoterSwap, reason, msg string) Decision {
	d := Decision{Waiting: msg, WaitReason: reason}
	if s != nil {
		d.Swap = s.Name
	}
	return d
}

// waitEtcd is wait for a state of etcd's own (Decision.Polled).
func waitEtcd(s *holdfastv1.VoterSwap, reason, msg string) Decision {
	d := wait(s, reason, msg)
	d.Polled = true
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

func nextRunning(o *Observation, c *Cluster, s *holdfastv1.VoterSwap) Decision {
	if s.Status.Step != holdfastv1.StepRelease {
		if d, ok := needLease(o, s); ok {
			return d
		}
	}
	if d, ok := checkSnapshot(c, s, o.SnapshotCheck); ok {
		return d
	}
	st, ok := stepNamed(s.Status.Step)
	if !ok {
		return wait(s, holdfastv1.SwapReasonUnknownStep, fmt.Sprintf("swap %s is at an unknown step %q", s.Status.SwapID, s.Status.Step))
	}
	return st.pass(o, c, s)
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
		return wait(s, holdfastv1.SwapReasonLeaseHeldElsewhere, fmt.Sprintf("the swap Lease is held by %s for swap %q %s; waiting, never acting, until it is released or expires",
			holder, l.Annotations[holdfastv1.AnnotationSwapID], until)), true
	case held && mine && !sameSwap:
		return act(&Action{Kind: ReleaseLease, Swap: s.Name, Reason: holdfastv1.SwapReasonReleased,
			Message: fmt.Sprintf("the swap Lease names swap %q, not %s: released to be taken for it", l.Annotations[holdfastv1.AnnotationSwapID], id)}), true
	case mine && sameSwap:
		// Every pass renews the Lease it holds: one that lapsed in this
		// process's hands means passes slower than the Lease or renewals
		// refused, and for a while node recovery was free to act on the
		// swap's nodes. Taken again, and said so.
		expired := "with no renewal time"
		if exp, ok := policy.SwapLeaseExpiry(l); ok {
			expired = "at " + exp.UTC().Format(time.RFC3339)
		}
		step := s.Status.Step
		if step == "" {
			step = holdfastv1.StepGates
		}
		msg := fmt.Sprintf("the swap Lease this controller held for %s lapsed %s without a renewal; taken again", id, expired)
		return act(&Action{Kind: AcquireLease, Swap: s.Name, SwapID: id, Nodes: swapNodes(s), Reason: holdfastv1.SwapReasonLeaseLapsed, Message: msg,
			Then: &Change{Warning: true, History: []holdfastv1.SwapStepRecord{rec(step, holdfastv1.SwapReasonLeaseLapsed, holdfastv1.SwapReasonLeaseLapsed, msg)}}}), true
	}
	return act(&Action{Kind: AcquireLease, Swap: s.Name, SwapID: id, Nodes: swapNodes(s), Reason: holdfastv1.SwapReasonLeaseTaken,
		Message: fmt.Sprintf("took the swap Lease for %s (nodes %s)", id, strings.Join(swapNodes(s), ","))}), true
}
