package units

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

// Events of a deleted Unit's retirement (docs/design.md §3 L13).
const (
	EventRetiring = "Retiring"
	EventRetired  = "Retired"
)

// reasonDeleted is the hand-over reason of a deleted Unit's binding.
const reasonDeleted = "the Unit is deleted"

// retire carries out the deletion of a Unit whose binding may still have a
// writer: a hand-over to no new epoch. No grant is sent from the start and
// the runtime's pod is deleted; the Unit's finalizer goes (Release) only
// once the runtime has provably stopped writing, by the rule a hand-over
// uses (stopState): its pod gone and its node's plugin listing no container
// of it after that, a person's certification, or a Failover runtime's own
// lease and the margin run out since the last grant, never before the
// leadership hold-off. Until then the Unit's name cannot be created again,
// so a re-created Unit never starts a second writer on the device beside a
// runtime cut from the control plane that still holds its lease.
func retire(p *Plan, in *Inputs) {
	b := p.Status.RuntimeBinding
	t := p.terms
	h := b.HandOver
	if h == nil {
		b.HandOver = &holdfastv1.HandOver{Reason: reasonDeleted, Since: metav1.NewTime(policy.CeilSecond(in.Now))}
		p.StopGranting = t.mode == holdfastv1.Failover
		p.DeletePod = true
		msg := fmt.Sprintf("Unit deleted: the runtime of epoch %d on node %s is being stopped (its pod %s is deleted", b.Epoch, nodeOrUnknown(b.Node), b.Pod)
		reason := holdfastv1.ReasonAwaitingPodGone
		if t.mode == holdfastv1.Failover {
			reason = holdfastv1.ReasonAwaitingFence
			msg += fmt.Sprintf(" and no grant is sent from now: it fences by its own lease (%v, hold bound %v) if its node is cut off", t.lease, t.holdBound)
		}
		msg += "); the deletion completes, and the name may be used again, once it has provably stopped writing"
		setCondition(&p.Status, metav1.Condition{Type: holdfastv1.ConditionRuntimeHandOver, Status: metav1.ConditionTrue, Reason: reason, Message: msg}, in.Now)
		r := warning(EventRetiring)
		r.Message, r.Epoch, r.Node = msg, b.Epoch, b.Node
		p.Record = r
		p.RequeueAfter = time.Millisecond
		return
	}
	h.Reason = reasonDeleted
	w := stopState(b, t, in)
	if !w.done {
		// A hand-over under way when the Unit was deleted may not have
		// deleted the pod; the reconciler deletes it once.
		p.DeletePod = true
		msg := fmt.Sprintf("Unit deleted: waiting for the runtime of epoch %d on node %s to stop writing before the deletion completes (no grant sent since %s); ",
			b.Epoch, nodeOrUnknown(b.Node), h.Since.UTC().Format(time.RFC3339))
		reason := holdfastv1.ReasonAwaitingFence
		if w.due.IsZero() {
			reason = holdfastv1.ReasonAwaitingPodGone
			msg += fmt.Sprintf("%s, so only its node's report or a person ends the wait; awaiting %s", w.evidence, w.awaiting)
		} else {
			msg += fmt.Sprintf("%s; it completes at %s, or earlier on %s", w.evidence, w.due.UTC().Format(time.RFC3339), w.awaiting)
			p.at(in, w.due)
		}
		p.at(in, in.Now.Add(5*time.Second))
		setCondition(&p.Status, metav1.Condition{Type: holdfastv1.ConditionRuntimeHandOver, Status: metav1.ConditionTrue, Reason: reason, Message: msg}, in.Now)
		return
	}
	p.Release = true
	r := normal(EventRetired)
	r.Message = fmt.Sprintf("Unit deleted: the runtime of epoch %d on node %s stopped writing (%s); the deletion completes and the name may be used again",
		b.Epoch, nodeOrUnknown(b.Node), w.evidence)
	r.Epoch, r.Node = b.Epoch, b.Node
	p.Record = r
}
