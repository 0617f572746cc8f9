package units

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/grantor"
	"github.com/holdfast-io/holdfast/policy"
)

// Inputs is everything one pass decides from. The decisions are pure: the
// clock, the grantor's evidence and the nodes are handed in, so every edge
// is tested with an injected clock.
type Inputs struct {
	Unit *holdfastv1.Unit
	// Pod is the current binding's runtime pod, nil if there is none.
	Pod *corev1.Pod
	// Obs is what this process's renewal loop has seen at the current
	// binding; nil when it renews nothing there.
	Obs *grantor.Observation
	Now time.Time
	// HoldOffUntil: before it, no lease expiry is read as a fence (L6).
	// Zero when there is no hold-off.
	HoldOffUntil time.Time
	// FreeTargets are the eligible standbys fit to take the unit now
	// (named by the targets, Ready, schedulable, not the node it is
	// leaving, colocation permitting), sorted.
	FreeTargets []string
	// Unavailable says, for each eligible standby that is not free now,
	// why (NotReady, cordoned, the node being left...): the suspension
	// names every standby and why it cannot be tried.
	Unavailable map[string]string
	// NodeExists answers whether a node of that name exists.
	NodeExists func(string) bool
	// PodGone: the apiserver (read past the cache) has no pod of the
	// current binding's name. That alone is no evidence the process
	// stopped (a Node's deletion or a forced delete removes the object
	// without the kubelet); NodeRuntimes says whether it did. Read only
	// while the binding is handed over.
	PodGone bool
	// Running is the current binding's runtime process (nil: no runtime
	// pod), read past the cache while a fence confirmation is on the Unit:
	// the process a confirmation must name.
	Running *holdfastv1.RuntimeIncarnation
	// NodeRuntimes is the runtimes report of the binding's node
	// (holdfast.io/runtimes), nil when the Node or its report is absent.
	// Read only while the binding is handed over.
	NodeRuntimes *holdfastv1.RuntimesReport
	// EpochFloor is the least epoch a new binding may take
	// (policy.EpochFloor of the cluster's epoch record and the clock, L13);
	// the reconciler reserves the epoch a plan binds before it writes it.
	EpochFloor int64
	// Devices is what the current binding's runtime last said of its
	// devices (L13).
	Devices DeviceReport
	// Timings are this grantor's; a Failover unit's lease below their floor
	// is reported (L14).
	Timings policy.GrantorTimings
	// Warm are the unit's warm standbys: an automatic re-bind promotes a
	// ready one instead of creating a pod.
	Warm WarmStandbys
}

// nextEpoch is the epoch a new binding of the unit takes now. A person's
// failover also goes above every owner epoch the runtime found later than
// its own at a device: they took the decision that the device's other
// writer is stopped (L13), which no automatic path can.
func (in *Inputs) nextEpoch(origin holdfastv1.BindingOrigin) int64 {
	var cur int64
	if b := in.Unit.Status.RuntimeBinding; b != nil {
		cur = b.Epoch
	}
	floor := in.EpochFloor
	if origin == holdfastv1.OriginManual {
		floor = max(floor, in.Devices.latestOwner()+1)
	}
	return policy.NextEpoch(cur, floor)
}

// Rebind is a new binding the pass decided on.
type Rebind struct {
	Origin holdfastv1.BindingOrigin
	// Node is a person's target; empty on the automatic path, where the
	// scheduler chooses among the untried standbys.
	Node      string
	RequestID string
	// Warm is the ready warm pod an automatic re-bind promotes: the
	// binding names it, its UID and its node at once.
	Warm *WarmPod
}

// Plan is what one pass does: write Status (when it changed), with at most
// one Record of consequence, and possibly a re-bind.
type Plan struct {
	Status holdfastv1.UnitStatus
	Record *Record
	Rebind *Rebind
	// ConsumeConfirm: remove the person's holdfast.io/failover-confirm-fenced
	// (and its epoch) once it certified a hand-over's stop, or when it
	// certifies another epoch than the binding's.
	ConsumeConfirm bool
	// ConsumeRequest: remove the person's failover annotations once the
	// status is written.
	ConsumeRequest bool
	// RequeueAfter is when the next deadline falls.
	RequeueAfter time.Duration
	// StopGranting: the pass starts a hand-over. The reconciler pauses the
	// binding's renewal loop and decides again before it writes, so the
	// recorded start comes after the last grant.
	StopGranting bool
	// DeletePod: delete the current binding's pod (an Autonomy runtime
	// handed over stops only by its pod's deletion).
	DeletePod bool
	// Release: the Unit is deleted and no runtime of it can still write;
	// the reconciler removes its finalizer (L13).
	Release bool

	holdOffWait bool
	// terms are the binding's recorded promise as this pass reads it.
	terms terms
}

func (p *Plan) at(in *Inputs, due time.Time) {
	if d := due.Sub(in.Now); d > 0 && (p.RequeueAfter == 0 || d < p.RequeueAfter) {
		p.RequeueAfter = d
	}
}

// Decide is one pass of the availability controller over a unit.
func Decide(in Inputs) Plan {
	u := in.Unit
	p := Plan{Status: *u.Status.DeepCopy()}
	if p.Status.RuntimeBinding == nil && !u.DeletionTimestamp.IsZero() {
		// Never bound: no runtime of it exists.
		p.Release = true
		return p
	}
	if p.Status.RuntimeBinding == nil {
		e := in.nextEpoch(holdfastv1.OriginInitial)
		pr := policy.NewPromise(u)
		b := &holdfastv1.RuntimeBinding{Epoch: e, Pod: PodName(u.Name, e), Origin: holdfastv1.OriginInitial, Promise: &pr}
		p.terms = termsOf(u, b)
		if p.terms.mode == holdfastv1.Failover {
			b.LeaseState, b.LeaseStateEpoch = holdfastv1.LeasePending, e
		}
		p.Status.RuntimeBinding = b
		leaseCondition(&p.Status, p.terms, b, in.Now)
		p.RequeueAfter = time.Millisecond
		return p
	}
	bookkeeping(&p, &in)
	if p.terms.mode == holdfastv1.Failover {
		// A pass never goes longer than one renewal interval.
		p.at(&in, in.Now.Add(lease.RenewInterval(p.terms.lease, 0)))
	}
	read := p.Status.RuntimeBinding.Pod
	decide(&p, &in)
	// A re-bind names a pod this pass did not read: RuntimeReady speaks of
	// the binding's pod, never of the one it replaced.
	if b := p.Status.RuntimeBinding; b.Pod != read {
		setCondition(&p.Status, runtimeReady(b, nil), in.Now)
	}
	staleConfirmation(&p, &in)
	noteDevices(&p, &in)
	noteLeaseFloor(&p, &in)
	noteWarm(&p, &in)
	// LeadershipHoldOff is a wait, not an outcome: it is removed on the
	// first pass that no longer waits on it.
	if c := meta.FindStatusCondition(p.Status.Conditions, holdfastv1.ConditionFailoverRequest); c != nil &&
		c.Reason == holdfastv1.ReasonLeadershipHoldOff && !p.holdOffWait {
		meta.RemoveStatusCondition(&p.Status.Conditions, holdfastv1.ConditionFailoverRequest)
	}
	return p
}

// decide takes at most one decision of consequence: the lease state first
// (an expiry is reported before any Hold or re-bind), then a deleted Unit's
// retirement, a person's request, the automatic path, then a restart.
func decide(p *Plan, in *Inputs) {
	failover := p.terms.mode == holdfastv1.Failover
	if failover && noteLeaseState(p, in) {
		return
	}
	if !in.Unit.DeletionTimestamp.IsZero() {
		retire(p, in)
		return
	}
	if manualFailover(p, in) {
		return
	}
	if handOver(p, in) {
		return
	}
	if failover && automaticFailover(p, in) {
		return
	}
	restart(p, in)
}

// bookkeeping brings the binding's promise to the Unit (L11), records the
// pod's first address and readiness, and adds the node the scheduler chose
// for an automatic re-bind to the ledger (L5).
func bookkeeping(p *Plan, in *Inputs) {
	b := p.Status.RuntimeBinding
	notePromise(p, in)
	pod := in.Pod
	if pod != nil && pod.Status.PodIP != "" && b.FirstAddressAt == nil {
		t := metav1.NewTime(in.Now)
		b.FirstAddressAt = &t
	}
	setCondition(&p.Status, runtimeReady(b, pod), in.Now)
	// Once: a runtime confirmed at this binding has settled the ledger.
	if b.Origin == holdfastv1.OriginAutomatic && b.Node != "" && b.LeaseEstablishedBy == nil && !slices.Contains(b.UnsettledRebinds, b.Node) {
		b.UnsettledRebinds = append(b.UnsettledRebinds, b.Node)
	}
	noteUnplaced(b, pod)
	if p.terms.mode != holdfastv1.Failover {
		leaseCondition(&p.Status, p.terms, b, in.Now)
	}
}

// runtimeReady is the RuntimeReady condition of binding b whose pod is pod
// (nil: none exists).
func runtimeReady(b *holdfastv1.RuntimeBinding, pod *corev1.Pod) metav1.Condition {
	ready := metav1.Condition{Type: holdfastv1.ConditionRuntimeReady, Status: metav1.ConditionFalse,
		Reason: holdfastv1.ReasonPodMissing, Message: fmt.Sprintf("Runtime pod %s does not exist", b.Pod)}
	if pod != nil {
		ready.Reason, ready.Message = holdfastv1.ReasonPodNotReady, fmt.Sprintf("Runtime pod %s is not ready", pod.Name)
		if PodReady(pod) {
			ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, holdfastv1.ReasonPodReady, fmt.Sprintf("Runtime pod %s is ready", pod.Name)
		}
	}
	return ready
}

// noteUnplaced counts an automatic re-bind whose pod no scheduler placed
// before its start-up grace ran out (its own StartupFailed expiry with no
// node recorded) as one attempt against the budget (L5). Without it a
// cluster with no working scheduler re-binds without end: the node ledger
// only learns nodes the scheduler chose. Kept in status, once per epoch, so
// a restarted controller counts the same. A pod placed after all is counted
// by its node instead, never twice.
func noteUnplaced(b *holdfastv1.RuntimeBinding, pod *corev1.Pod) {
	i := slices.IndexFunc(b.UnplacedRebinds, func(r holdfastv1.UnplacedRebind) bool { return r.Epoch == b.Epoch })
	switch {
	case b.Node != "":
		if i >= 0 {
			b.UnplacedRebinds = slices.Delete(b.UnplacedRebinds, i, i+1)
		}
	case i < 0 && b.Origin == holdfastv1.OriginAutomatic && b.LeaseEstablishedBy == nil &&
		ownExpiry(b) && b.Expiry.Verdict == holdfastv1.VerdictStartupFailed:
		b.UnplacedRebinds = append(b.UnplacedRebinds, holdfastv1.UnplacedRebind{Epoch: b.Epoch, Message: unplacedWhy(b, pod)})
	}
}

// unplacedWhy is why a binding's pod has no node: the scheduler's own word
// (the PodScheduled condition FailedScheduling leaves), or that none spoke.
func unplacedWhy(b *holdfastv1.RuntimeBinding, pod *corev1.Pod) string {
	if pod == nil {
		return fmt.Sprintf("pod %s did not exist", b.Pod)
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
			return truncate(fmt.Sprintf("pod %s stayed Pending, %s%s (%s)", pod.Name, holdfastv1.UnplacedSchedulerWords, c.Message, c.Reason), 512)
		}
	}
	return fmt.Sprintf("pod %s stayed Pending and no scheduler reported on it: is %s running?", pod.Name, pod.Spec.SchedulerName)
}

// automaticFailover: after an expiry outlasts the hold bound, the Hold;
// after the margin (>= hold bound, L3), a re-bind to an untried free
// standby, or the suspension when every one was tried (L5). A new leader
// reads no expiry as a fence before its hold-off (L6).
func automaticFailover(p *Plan, in *Inputs) bool {
	u := in.Unit
	a := &u.Spec.Availability
	t := p.terms
	b := p.Status.RuntimeBinding
	if !ownExpiry(b) {
		return false
	}
	if holdOff(p, in, "an automatic re-bind") {
		return false
	}
	exp := b.Expiry.At.Time
	from := marginFrom(b, in, t)
	if b.Expiry.Verdict == holdfastv1.VerdictSelfFenced && !meta.IsStatusConditionTrue(p.Status.Conditions, holdfastv1.ConditionHeld) {
		if due := from.Add(t.holdBound); in.Now.Before(due) {
			p.at(in, due)
			return false
		}
		p.Record = hold(p, in, holdfastv1.ReasonRuntimeLost, fmt.Sprintf(
			"Hold: the runtime's lease at epoch %d on node %s expired at %s and the expiry outlasted the hold bound of %v",
			b.Epoch, nodeOrUnknown(b.Node), exp.UTC().Format(time.RFC3339), t.holdBound))
		return true
	}
	if due := from.Add(t.margin); in.Now.Before(due) {
		p.at(in, due)
		return false
	}

	var untried []string
	for _, n := range in.FreeTargets {
		if !slices.Contains(b.UnsettledRebinds, n) {
			untried = append(untried, n)
		}
	}
	// A re-bind never placed spent one attempt without naming a node.
	left := len(untried) - len(b.UnplacedRebinds)
	switch {
	case left > 0:
		p.Rebind = &Rebind{Origin: holdfastv1.OriginAutomatic, Warm: warmFor(in, untried)}
		r := warning(EventRebound)
		r.Message = fmt.Sprintf("Re-bound from node %s (epoch %d, lease expired at %s, %s) to epoch %d after the margin of %v; the scheduler places it on an untried standby: %s",
			nodeOrUnknown(b.Node), b.Epoch, exp.UTC().Format(time.RFC3339), b.Expiry.Verdict, in.nextEpoch(holdfastv1.OriginAutomatic), t.margin, strings.Join(untried, ", "))
		if w := p.Rebind.Warm; w != nil {
			r.Message = fmt.Sprintf("Re-bound from node %s (epoch %d, lease expired at %s, %s) to epoch %d after the margin of %v by promoting warm pod %s on standby %s: no pod is created",
				nodeOrUnknown(b.Node), b.Epoch, exp.UTC().Format(time.RFC3339), b.Expiry.Verdict, in.nextEpoch(holdfastv1.OriginAutomatic), t.margin, w.Name, w.Node)
		}
		if n := len(b.UnplacedRebinds); n > 0 {
			r.Message += fmt.Sprintf(" (%d attempt(s) left: %d re-bind(s) never placed count against the budget)", left, n)
		}
		warm := p.Rebind.Warm != nil
		r.count = func() {
			rebinds.WithLabelValues(u.Namespace, u.Name, "automatic").Inc()
			if warm {
				warmPromotions.WithLabelValues(u.Namespace, u.Name).Inc()
			}
		}
		p.Record = r
		applyRebind(p, in, p.Rebind)
		return true
	case len(in.FreeTargets) > 0:
		if meta.IsStatusConditionTrue(p.Status.Conditions, holdfastv1.ConditionFailoverSuspended) {
			return false
		}
		r := warning(EventBudgetExhausted)
		r.Message = suspensionMessage(b, in)
		r.count = func() {
			budgetExhausted.WithLabelValues(u.Namespace, u.Name).Set(1)
			budgetExhaustions.WithLabelValues(u.Namespace, u.Name).Inc()
		}
		reason := holdfastv1.ReasonAllTargetsTried
		if len(b.UnplacedRebinds) > 0 {
			reason = holdfastv1.ReasonRebindsNotPlaced
		}
		setCondition(&p.Status, metav1.Condition{Type: holdfastv1.ConditionFailoverSuspended, Status: metav1.ConditionTrue,
			Reason: reason, Message: r.Message}, in.Now)
		r.Epoch, r.Node = b.Epoch, b.Node
		p.Record = r
		return true
	default:
		if c := meta.FindStatusCondition(p.Status.Conditions, holdfastv1.ConditionFailoverRequest); c != nil && c.Reason == holdfastv1.ReasonNoEligibleTarget {
			return false
		}
		r := warning(EventNoEligibleTarget)
		r.Message = fmt.Sprintf("No re-bind: no eligible standby is fit now (named by spec.availability.targets, Ready, schedulable, not node %s%s); waiting for one",
			nodeOrUnknown(b.Node), colocationClause(a))
		r.count = func() { requestOutcomes.WithLabelValues(u.Namespace, u.Name, EventNoEligibleTarget).Inc() }
		setCondition(&p.Status, metav1.Condition{Type: holdfastv1.ConditionFailoverRequest, Status: metav1.ConditionFalse,
			Reason: holdfastv1.ReasonNoEligibleTarget, Message: r.Message}, in.Now)
		r.Epoch, r.Node = b.Epoch, b.Node
		p.Record = r
		return true
	}
}

// suspensionMessage names every standby and why none can be tried now
// (each tried one, the current binding's with its verdict, each unfit one),
// and every re-bind that was never placed with the scheduler's reason.
func suspensionMessage(b *holdfastv1.RuntimeBinding, in *Inputs) string {
	why := map[string]string{}
	for n, r := range in.Unavailable {
		why[n] = r
	}
	for _, n := range b.UnsettledRebinds {
		w := "tried since the runtime was last confirmed, did not take the lease"
		if n == b.Node {
			w = fmt.Sprintf("tried at epoch %d, the current binding: %s", b.Epoch, expirySummary(b))
		}
		if r, ok := why[n]; ok && n != b.Node {
			w += "; now " + r
		}
		why[n] = w
	}
	names := slices.Sorted(maps.Keys(why))
	var parts []string
	for _, n := range names {
		parts = append(parts, n+": "+why[n])
	}
	msg := "Automatic re-binding suspended: no eligible standby is left to try since the runtime was last confirmed"
	if len(parts) > 0 {
		msg += " (" + strings.Join(parts, "; ") + ")"
	}
	if len(b.UnplacedRebinds) > 0 {
		var un []string
		for _, r := range b.UnplacedRebinds {
			un = append(un, fmt.Sprintf("epoch %d: %s", r.Epoch, r.Message))
		}
		msg += fmt.Sprintf("; %d re-bind(s) were never placed on a node, each counted as one attempt (%s)", len(un), strings.Join(un, "; "))
	}
	return msg + fmt.Sprintf(". Pod %s stays at epoch %d and its first acknowledged renewal lifts this; a person's failover (holdfast.io/failover-to) is still available", b.Pod, b.Epoch)
}

func expirySummary(b *holdfastv1.RuntimeBinding) string {
	e := b.Expiry
	if e == nil || e.Epoch != b.Epoch {
		return "no renewal acknowledged yet"
	}
	s := fmt.Sprintf("%s, last renewal attempt %s", e.Verdict, e.LastAttempt)
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

func colocationClause(a *holdfastv1.Availability) string {
	if a.Colocation == holdfastv1.ColocationRefuse {
		return ", hosting no other unit's runtime"
	}
	return ""
}

// marginFrom is the instant the hold bound and the margin run from: the
// recorded expiry, rounded up to the second the API keeps, or the
// grantor's deadline that record rounded up (lastAck + lease), when this
// process observed it: L1 puts the runtime's own deadline no later, so the
// margin from it is as safe and up to a second shorter. A process that did
// not observe the deadline (a new leader, a restart) reads the record.
func marginFrom(b *holdfastv1.RuntimeBinding, in *Inputs, t terms) time.Time {
	at := b.Expiry.At.Time
	o := in.Obs
	if o == nil || !o.Acked() || b.Expiry.Verdict != holdfastv1.VerdictSelfFenced || o.Target.Epoch != b.Expiry.Epoch {
		return at
	}
	d := o.LastAck.Add(t.lease)
	if !policy.CeilSecond(d).Equal(at) {
		return at
	}
	return d
}

// hold issues the ISA-88 Hold.
func hold(p *Plan, in *Inputs, cause, msg string) *Record {
	u := in.Unit
	b := p.Status.RuntimeBinding
	setCondition(&p.Status, metav1.Condition{Type: holdfastv1.ConditionHeld, Status: metav1.ConditionTrue, Reason: cause, Message: msg}, in.Now)
	r := warning(EventHold)
	r.Message = msg
	r.Epoch, r.Node = b.Epoch, b.Node
	r.count = func() { holds.WithLabelValues(u.Namespace, u.Name, cause).Inc() }
	p.RequeueAfter = time.Millisecond
	return r
}

// applyRebind builds the new binding under a new promise, the Unit's as it
// is now (L11). It carries the lease state and its epoch unchanged, so the
// standby's first renewal is an Expired to Held edge and its own expiry is
// still recorded (LeaseStateCarried). A hand-over stays on the node it
// hands over (recorded here: the scheduler has nowhere else to put it), or,
// when the old binding was never placed, keeps its placement and ledger.
func applyRebind(p *Plan, in *Inputs, rb *Rebind) {
	u := in.Unit
	old := p.Status.RuntimeBinding
	pr := policy.NewPromise(u)
	e := in.nextEpoch(rb.Origin)
	nb := &holdfastv1.RuntimeBinding{
		Epoch:        e,
		Pod:          PodName(u.Name, e),
		Origin:       rb.Origin,
		PreviousNode: old.Node,
		RequestID:    rb.RequestID,
		Promise:      &pr,
	}
	if w := rb.Warm; w != nil {
		// The promotion's one write: the node is recorded with the pod,
		// as the scheduler's Bind records it for a cold re-bind, and the
		// start-up grace runs from here (L4).
		now := metav1.NewTime(in.Now)
		nb.Node, nb.Pod, nb.PodUID, nb.BoundAt, nb.FirstAddressAt = w.Node, w.Name, string(w.UID), &now, &now
	}
	handOver := rb.Origin == holdfastv1.OriginHandOver
	switch {
	case handOver && old.Node != "":
		nb.Node, nb.PreviousNode = old.Node, ""
	case handOver:
		nb.Origin, nb.PreviousNode, nb.RequestID = old.Origin, old.PreviousNode, old.RequestID
	}
	switch {
	case pr.Mode != holdfastv1.Failover:
	case old.LeaseState != "":
		nb.LeaseState, nb.LeaseStateEpoch = old.LeaseState, old.LeaseStateEpoch
		if nb.LeaseStateEpoch == 0 {
			nb.LeaseStateEpoch = old.Epoch
		}
		nb.Expiry = old.Expiry.DeepCopy()
	default:
		// From an Autonomy binding, which held no lease.
		nb.LeaseState, nb.LeaseStateEpoch = holdfastv1.LeasePending, nb.Epoch
	}
	if rb.Origin == holdfastv1.OriginAutomatic || handOver {
		nb.UnsettledRebinds = slices.Clone(old.UnsettledRebinds)
		nb.UnplacedRebinds = slices.Clone(old.UnplacedRebinds)
	}
	p.Status.RuntimeBinding = nb
	p.terms = termsOf(u, nb)
	r := p.Record
	r.Epoch, r.Node = nb.Epoch, old.Node
	if rb.Node != "" {
		r.Node = rb.Node
	}
	if !handOver {
		setCondition(&p.Status, metav1.Condition{Type: holdfastv1.ConditionFailoverRequest, Status: metav1.ConditionTrue,
			Reason: holdfastv1.ReasonRebound, Message: r.Message}, in.Now)
	}
	if pr.Mode != holdfastv1.Failover {
		leaseCondition(&p.Status, p.terms, nb, in.Now)
	}
	p.RequeueAfter = time.Millisecond
}

func setCondition(st *holdfastv1.UnitStatus, c metav1.Condition, now time.Time) {
	c.LastTransitionTime = metav1.NewTime(now)
	meta.SetStatusCondition(&st.Conditions, c)
}

func nodeOrUnknown(n string) string {
	if n == "" {
		return "(not yet placed)"
	}
	return n
}

func bindingEpoch(b *holdfastv1.RuntimeBinding) int64 {
	if b == nil {
		return 0
	}
	return b.Epoch
}
