package units

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

// staleConfirmation removes a fence confirmation that certifies another
// epoch than the binding's, or none, and says why: it certifies nothing
// (policy.ConfirmedFence), and a person reading the Unit must not think it
// does. It waits for a pass with no other record of consequence.
func staleConfirmation(p *Plan, in *Inputs) {
	_, stale := policy.ConfirmedFence(in.Unit, in.Running)
	if stale == nil || p.Record != nil || p.Rebind != nil {
		return
	}
	u, b := in.Unit, in.Unit.Status.RuntimeBinding
	r := warning(EventInvalidRequest)
	r.Message = "The fence confirmation certifies nothing and is removed: " + stale.Reason
	r.Manual, r.RequestID, r.Epoch, r.Node = true, u.Annotations[holdfastv1.AnnotationRequestID], b.Epoch, b.Node
	r.count = func() { requestOutcomes.WithLabelValues(u.Namespace, u.Name, EventInvalidRequest).Inc() }
	p.Record, p.ConsumeConfirm = r, true
}

// holdOff shows the wait and reports whether the pass must wait: before the
// hold-off deadline a new leader reads no expiry as a fence, unless a person
// certified the fence.
func holdOff(p *Plan, in *Inputs, what string) bool {
	if in.HoldOffUntil.IsZero() || !in.Now.Before(in.HoldOffUntil) {
		return false
	}
	if how, _ := policy.ConfirmedFence(in.Unit, in.Running); how != "" {
		return false
	}
	p.holdOffWait = true
	p.at(in, in.HoldOffUntil)
	prev := meta.FindStatusCondition(p.Status.Conditions, holdfastv1.ConditionFailoverRequest)
	waiting := prev != nil && prev.Reason == holdfastv1.ReasonLeadershipHoldOff
	msg := fmt.Sprintf("Until %s no lease expiry is read as a fence (%s waits): this controller took leadership recently, and a predecessor that lost it may still be renewing; a person who has stopped the runtime bypasses the wait with %s",
		in.HoldOffUntil.UTC().Format(time.RFC3339), what, policy.ConfirmAnnotations(bindingEpoch(p.Status.RuntimeBinding), in.Running))
	// True: a request waits (policy.RebindPending reads it so).
	setCondition(&p.Status, metav1.Condition{Type: holdfastv1.ConditionFailoverRequest, Status: metav1.ConditionTrue,
		Reason: holdfastv1.ReasonLeadershipHoldOff, Message: msg}, in.Now)
	if !waiting && p.Record == nil {
		// The wait can outlast the margin by up to the stand-down plus the
		// lease: the timeline names it, with the instant it ends.
		b := p.Status.RuntimeBinding
		r := normal(EventLeadershipHoldOff)
		r.Message = fmt.Sprintf("Waiting for the leadership hold-off until %s: %s", in.HoldOffUntil.UTC().Format(time.RFC3339Nano), msg)
		r.Epoch, r.Node = b.Epoch, b.Node
		p.Record = r
	}
	return true
}

// manualFailover carries out holdfast.io/failover-to. It reports whether
// the pass produced a record or must wait.
func manualFailover(p *Plan, in *Inputs) bool {
	u := in.Unit
	t := p.terms
	b := p.Status.RuntimeBinding
	target, asked := u.Annotations[holdfastv1.AnnotationFailoverTo]
	if !asked {
		return false
	}
	confirm, fault := policy.ConfirmedFence(u, in.Running)
	stale := ""
	if fault != nil {
		stale = "; the confirmation on the Unit certifies nothing: " + fault.Reason
	}
	key := RequestKey(u)
	if b.Origin == holdfastv1.OriginManual && b.RequestID == key {
		p.ConsumeRequest = true // carried out already; a crash came between
		return false
	}
	refuse := func(msg string) bool {
		r := warning(EventManualFailoverRefused)
		r.Message, r.Manual, r.RequestID = msg, true, u.Annotations[holdfastv1.AnnotationRequestID]
		r.Epoch, r.Node = b.Epoch, target
		r.count = func() { requestOutcomes.WithLabelValues(u.Namespace, u.Name, EventManualFailoverRefused).Inc() }
		setCondition(&p.Status, metav1.Condition{Type: holdfastv1.ConditionFailoverRequest, Status: metav1.ConditionFalse,
			Reason: holdfastv1.ReasonRefused, Message: msg}, in.Now)
		p.Record, p.ConsumeRequest = r, true
		return true
	}
	path := "metadata.annotations[" + holdfastv1.AnnotationFailoverTo + "]"
	switch {
	case target == "":
		return refuse(path + ": must name a node")
	case in.NodeExists != nil && !in.NodeExists(target):
		return refuse(fmt.Sprintf("%s: node %q not found", path, target))
	case target == b.Node:
		return refuse(fmt.Sprintf("%s: the unit is already bound to node %q at epoch %d", path, target, b.Epoch))
	}

	if confirm == "" {
		if t.mode != holdfastv1.Failover {
			return refuse(fmt.Sprintf("An Autonomy runtime never fences itself: set %s to how node %s was fenced (powered off, cut from the field network)%s",
				policy.ConfirmAnnotations(b.Epoch, in.Running), nodeOrUnknown(b.Node), stale))
		}
		fenced := ownExpiry(b) && (b.Expiry.Verdict == holdfastv1.VerdictStartupFailed || !in.Now.Before(b.Expiry.At.Add(t.margin)))
		if !fenced && !neverGranted(b, in) {
			if ownExpiry(b) {
				p.at(in, b.Expiry.At.Add(t.margin)) // fenced once the margin has passed
				return true
			}
			return refuse(fmt.Sprintf("The runtime at epoch %d on node %s holds its lease and may still be writing: set %s to how the node was fenced, or wait for its lease to expire%s",
				b.Epoch, nodeOrUnknown(b.Node), policy.ConfirmAnnotations(b.Epoch, in.Running), stale))
		}
		if holdOff(p, in, "a manual failover whose fence evidence is the lease expiry") {
			return true
		}
	}

	if !meta.IsStatusConditionTrue(p.Status.Conditions, holdfastv1.ConditionHeld) {
		r := hold(p, in, holdfastv1.ReasonManualFailover, fmt.Sprintf("Hold: a manual failover to node %s was requested at epoch %d", target, b.Epoch))
		r.Manual, r.RequestID = true, u.Annotations[holdfastv1.AnnotationRequestID]
		p.Record = r
		return true
	}
	rb := &Rebind{Origin: holdfastv1.OriginManual, Node: target, RequestID: key}
	p.Rebind = rb
	r := warning(EventManualRebind)
	r.Manual, r.RequestID = true, u.Annotations[holdfastv1.AnnotationRequestID]
	fence := "fence evidence: " + fenceEvidence(b, confirm)
	r.Message = fmt.Sprintf("Manual failover from node %s (epoch %d) to node %s at epoch %d; %s", nodeOrUnknown(b.Node), b.Epoch, target, in.nextEpoch(holdfastv1.OriginManual), fence)
	if len(b.UnsettledRebinds) > 0 || len(b.UnplacedRebinds) > 0 {
		r.Message += fmt.Sprintf("; the re-bind ledger (%s) is emptied", ledgerSummary(b))
	}
	if e := in.Devices.latestOwner(); e > 0 {
		r.Message += fmt.Sprintf("; the new epoch is above owner epoch %d, which the runtime found at its device", e)
	}
	r.count = func() {
		rebinds.WithLabelValues(u.Namespace, u.Name, "manual").Inc()
		budgetExhausted.WithLabelValues(u.Namespace, u.Name).Set(0)
	}
	p.Record = r
	if meta.IsStatusConditionTrue(p.Status.Conditions, holdfastv1.ConditionFailoverSuspended) {
		setCondition(&p.Status, metav1.Condition{Type: holdfastv1.ConditionFailoverSuspended, Status: metav1.ConditionFalse,
			Reason: holdfastv1.ReasonManualFailover, Message: "A person's failover is a new decision: the ledger is emptied"}, in.Now)
	}
	applyRebind(p, in, rb)
	p.ConsumeRequest = true
	return true
}

// ledgerSummary names the ledger: the nodes tried and the epochs never placed.
func ledgerSummary(b *holdfastv1.RuntimeBinding) string {
	parts := slices.Clone(b.UnsettledRebinds)
	for _, r := range b.UnplacedRebinds {
		parts = append(parts, fmt.Sprintf("epoch %d never placed", r.Epoch))
	}
	return strings.Join(parts, ", ")
}

func fenceEvidence(b *holdfastv1.RuntimeBinding, confirm string) string {
	switch {
	case confirm != "":
		return fmt.Sprintf("a person certified %q", confirm)
	case ownExpiry(b):
		return fmt.Sprintf("the lease expired at %s (%s) and the margin has passed", b.Expiry.At.UTC().Format(time.RFC3339), b.Expiry.Verdict)
	default:
		return "no lease was ever granted at this binding"
	}
}

// RequestKey identifies a person's failover request: the webhook's request
// ID, or the requested node when there is none.
func RequestKey(u *holdfastv1.Unit) string {
	if id := u.Annotations[holdfastv1.AnnotationRequestID]; id != "" {
		return id
	}
	return "failover-to=" + u.Annotations[holdfastv1.AnnotationFailoverTo]
}

// restart clears the Hold on a person's holdfast.io/restart made after it,
// once the current runtime holds its lease and is ready.
func restart(p *Plan, in *Inputs) {
	u := in.Unit
	v, ok := u.Annotations[holdfastv1.AnnotationRestart]
	if !ok || p.Record != nil {
		return
	}
	held := meta.FindStatusCondition(p.Status.Conditions, holdfastv1.ConditionHeld)
	if held == nil || held.Status != metav1.ConditionTrue {
		return
	}
	b := p.Status.RuntimeBinding
	at, err := time.Parse(time.RFC3339, v)
	if err != nil {
		r := warning(EventInvalidRequest)
		r.Message = fmt.Sprintf("metadata.annotations[%s]: %q: must be an RFC 3339 time; the Hold stays", holdfastv1.AnnotationRestart, v)
		r.Manual, r.RequestID, r.Epoch, r.Node = true, u.Annotations[holdfastv1.AnnotationRequestID], b.Epoch, b.Node
		r.count = func() { requestOutcomes.WithLabelValues(u.Namespace, u.Name, EventInvalidRequest).Inc() }
		p.Record = r
		return
	}
	if at.Before(held.LastTransitionTime.Time) {
		return // asked before this Hold: not a restart of it
	}
	ready := in.Pod != nil && PodReady(in.Pod) && b.HandOver == nil
	if p.terms.mode == holdfastv1.Failover {
		ready = ready && b.LeaseState == holdfastv1.LeaseHeld && !b.LeaseStateCarried()
	}
	if !ready {
		return
	}
	state := "is ready"
	if p.terms.mode == holdfastv1.Failover {
		state = "holds its lease and is ready"
	}
	msg := fmt.Sprintf("Restart: the runtime at epoch %d on node %s %s; the Hold is cleared (restart asked at %s)",
		b.Epoch, nodeOrUnknown(b.Node), state, at.UTC().Format(time.RFC3339))
	setCondition(&p.Status, metav1.Condition{Type: holdfastv1.ConditionHeld, Status: metav1.ConditionFalse, Reason: holdfastv1.ReasonRestarted, Message: msg}, in.Now)
	r := normal(EventRestarted)
	r.Message, r.Manual, r.RequestID, r.Epoch, r.Node = msg, true, u.Annotations[holdfastv1.AnnotationRequestID], b.Epoch, b.Node
	r.count = func() { restarts.WithLabelValues(u.Namespace, u.Name).Inc() }
	p.Record = r
}
