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

// leaseView is the grantor's evidence at the current binding, read at now.
type leaseView struct {
	// State to note; empty when there is nothing new to note (a carried
	// state while the replacement is still starting, or a binding a new
	// leader knows established and has not heard from yet).
	State    holdfastv1.LeaseState
	Deadline time.Time
	// Acked: this process had an acknowledgement at this binding.
	Acked   bool
	LastAck time.Time
	// AckedBy is the incarnation that acknowledged.
	AckedBy *holdfastv1.RuntimeIncarnation
	// Established: a renewal was ever acknowledged at this binding.
	Established bool
}

// observeLease applies L4's two deadlines. A binding whose current runtime
// has had a renewal acknowledged expires at lastAck + lease. One whose
// current runtime never has expires at its start + the start-up grace: the
// first address, or the container's last start when it restarted in place
// (a restarted process has to earn its lease again). Delaying that verdict
// can only delay a re-bind.
func observeLease(b *holdfastv1.RuntimeBinding, t terms, pod *corev1.Pod, obs *grantor.Observation, now time.Time) leaseView {
	d, grace := t.lease, t.grace
	var v leaseView
	var cur *holdfastv1.RuntimeIncarnation
	if pod != nil {
		c := Incarnation(pod)
		cur = &c
	}
	started := now
	if obs != nil {
		started = obs.Started
		if obs.Acked() {
			// The pod's status names the incarnation: the runtime cannot
			// know the kubelet's restart count.
			v.Acked, v.LastAck, v.AckedBy = true, obs.LastAck, cur
		}
	}
	v.Established = v.Acked || b.LeaseEstablishedBy != nil
	currentAcked := v.Acked || sameIncarnation(b.LeaseEstablishedBy, cur)
	startup := startupStart(b, pod)
	switch {
	case v.Acked:
		v.Deadline = v.LastAck.Add(d)
	case currentAcked:
		// Established by a predecessor process: this one dates the lease
		// from its own first attempt; the hold-off covers the rest.
		v.Deadline = started.Add(d)
	case v.Established:
		// Established by another incarnation: this one restarted in place
		// or its pod was re-created, and has to earn the lease again.
		v.Deadline = started.Add(d)
		if !startup.IsZero() && startup.Add(grace).After(v.Deadline) {
			v.Deadline = startup.Add(grace)
		}
	case !startup.IsZero():
		v.Deadline = startup.Add(grace)
	}

	switch {
	case v.Acked && now.Before(v.LastAck.Add(d)):
		v.State = holdfastv1.LeaseHeld
	case !v.Deadline.IsZero() && !now.Before(v.Deadline):
		v.State = holdfastv1.LeaseExpired
	case v.Established:
		// Between an acknowledgement and the deadline the evidence says
		// nothing new: keep what is recorded.
	case b.LeaseStateCarried():
		// The replacement is starting; the carried state stands until the
		// grantor has spoken about this binding.
	default:
		v.State = holdfastv1.LeasePending
	}
	return v
}

func sameIncarnation(a, b *holdfastv1.RuntimeIncarnation) bool {
	return a != nil && b != nil && *a == *b
}

// startupStart is when the current runtime process started to be reachable:
// the binding's first address, or later when the pod was re-created or its
// container restarted. Zero when there is no pod and no address yet.
func startupStart(b *holdfastv1.RuntimeBinding, pod *corev1.Pod) time.Time {
	var t time.Time
	if b.FirstAddressAt != nil {
		t = b.FirstAddressAt.Time
	}
	if pod == nil {
		return t
	}
	if t.IsZero() || pod.CreationTimestamp.After(t) {
		t = pod.CreationTimestamp.Time
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != RuntimeContainer || cs.RestartCount == 0 {
			continue
		}
		if r := cs.State.Running; r != nil && r.StartedAt.After(t) {
			t = r.StartedAt.Time
		}
		if term := cs.LastTerminationState.Terminated; term != nil && term.FinishedAt.After(t) {
			t = term.FinishedAt.Time
		}
	}
	return t
}

// noteLeaseState writes what the grantor observed. A state equal to the
// recorded one is a transition when the recorded one was carried over from
// the previous binding (LeaseStateCarried): the replacement's own expiry is
// recorded once, stamped with its epoch, which is what stops the next pass
// from recording it again. A state with no epoch is the binding's own, so an
// upgrade records nothing anew. It reports whether it produced a record.
func noteLeaseState(p *Plan, in *Inputs) bool {
	u := in.Unit
	t := p.terms
	b := p.Status.RuntimeBinding
	v := observeLease(b, t, in.Pod, in.Obs, in.Now)
	if !v.Deadline.IsZero() {
		p.at(in, v.Deadline)
	}

	// Whichever operator first sees an acknowledgement writes the
	// incarnation, once; a pass with no acknowledged contact writes none.
	if v.Acked && b.LeaseEstablishedBy == nil && v.AckedBy != nil {
		inc := *v.AckedBy
		b.LeaseEstablishedBy = &inc
	}
	transition := v.State != "" && (v.State != b.LeaseState || b.LeaseStateCarried())
	if v.Acked && (b.LastAcknowledgedRenewal == nil || transition || v.LastAck.Sub(b.LastAcknowledgedRenewal.Time) >= t.lease/3) {
		t := metav1.NewMicroTime(v.LastAck)
		b.LastAcknowledgedRenewal = &t
	}
	if !transition {
		leaseStateGauges(u, b.LeaseState)
		return false
	}

	prev, carried := b.LeaseState, b.LeaseStateCarried()
	b.LeaseState, b.LeaseStateEpoch = v.State, b.Epoch
	leaseStateGauges(u, v.State)
	var r *Record
	switch v.State {
	case holdfastv1.LeasePending:
		// A fresh binding: status only.
	case holdfastv1.LeaseHeld:
		if prev == holdfastv1.LeaseExpired {
			r = normal(EventLeaseReestablished)
			r.Message = fmt.Sprintf("Renewal acknowledged at epoch %d on node %s after an expiry", b.Epoch, nodeOrUnknown(b.Node))
			if carried {
				r.Message = fmt.Sprintf("The runtime at epoch %d on node %s took the lease: renewal acknowledged; the data gap since the previous binding's expiry closes here", b.Epoch, nodeOrUnknown(b.Node))
			}
			r.count = func() { leaseEstablished.WithLabelValues(u.Namespace, u.Name, "reestablished").Inc() }
		} else {
			r = normal(EventLeaseEstablished)
			r.Message = fmt.Sprintf("First renewal acknowledged at epoch %d on node %s", b.Epoch, nodeOrUnknown(b.Node))
			r.count = func() { leaseEstablished.WithLabelValues(u.Namespace, u.Name, "established").Inc() }
		}
		if by := b.LeaseEstablishedBy; by != nil {
			r.Message += fmt.Sprintf(" (runtime pod UID %s, restart %d)", by.PodUID, by.RestartCount)
		}
		// L5: a runtime confirmed operating normally settles the ledger
		// and lifts a suspension, through the same edge.
		if len(b.UnsettledRebinds) > 0 || len(b.UnplacedRebinds) > 0 {
			r.Message += fmt.Sprintf("; the re-bind ledger (%s) is settled", ledgerSummary(b))
			b.UnsettledRebinds, b.UnplacedRebinds = nil, nil
		}
		if meta.IsStatusConditionTrue(p.Status.Conditions, holdfastv1.ConditionFailoverSuspended) {
			setCondition(&p.Status, metav1.Condition{Type: holdfastv1.ConditionFailoverSuspended, Status: metav1.ConditionFalse,
				Reason: holdfastv1.ReasonRuntimeConfirmed, Message: r.Message}, in.Now)
			r.Message += "; automatic re-binding resumes"
			count := r.count
			r.count = func() { count(); budgetExhausted.WithLabelValues(u.Namespace, u.Name).Set(0) }
		}
	case holdfastv1.LeaseExpired:
		b.Expiry = verdict(b, in, v)
		if b.HandOver != nil {
			// A planned hand-over stopped the grants: the expiry is its
			// fence, recorded without the alarm of an unplanned one.
			b.Expiry.Message = fmt.Sprintf("planned hand-over: no grant sent since %s", b.HandOver.Since.UTC().Format(time.RFC3339))
			break
		}
		r = warning(EventLeaseExpired)
		r.Verdict = string(b.Expiry.Verdict) + "/" + string(b.Expiry.LastAttempt)
		r.Message = expiryMessage(b, t, in)
		verdictName := string(b.Expiry.Verdict)
		r.count = func() { leaseExpiries.WithLabelValues(u.Namespace, u.Name, verdictName).Inc() }
	}
	leaseCondition(&p.Status, t, b, in.Now)
	if r == nil {
		return false
	}
	r.Epoch, r.Node = b.Epoch, b.Node
	p.Record = r
	p.RequeueAfter = time.Millisecond
	return true
}

// verdict is captured at the transition: whether any renewal had been
// acknowledged at this binding is exactly what a late answer would erase.
func verdict(b *holdfastv1.RuntimeBinding, in *Inputs, v leaseView) *holdfastv1.LeaseExpiryRecord {
	rec := &holdfastv1.LeaseExpiryRecord{
		Verdict:     holdfastv1.VerdictStartupFailed,
		LastAttempt: holdfastv1.RenewalNotAttempted,
		// Rounded up to the second the API keeps: the margin runs from
		// here, and an earlier instant would start a new writer early.
		At:    metav1.NewTime(policy.CeilSecond(v.Deadline)),
		Epoch: b.Epoch,
	}
	if v.Established {
		rec.Verdict = holdfastv1.VerdictSelfFenced
	}
	if o := in.Obs; o != nil && o.Attempts > 0 {
		switch o.LastAttempt.Outcome {
		case grantor.Refused:
			rec.LastAttempt = holdfastv1.RenewalRefused
		case grantor.Unreachable:
			rec.LastAttempt = holdfastv1.RenewalUnreachable
		}
		rec.Message = o.LastAttempt.Message
	}
	if rec.Message == "" && rec.LastAttempt == holdfastv1.RenewalNotAttempted {
		rec.Message = "the runtime never had an address to renew at"
		if b.Node == "" {
			rec.Message += ": " + unplacedWhy(b, in.Pod)
		}
	}
	return rec
}

func expiryMessage(b *holdfastv1.RuntimeBinding, t terms, in *Inputs) string {
	e := b.Expiry
	attempt := fmt.Sprintf("last renewal attempt %s", e.LastAttempt)
	if e.Message != "" {
		attempt += ": " + e.Message
	}
	if e.Verdict == holdfastv1.VerdictStartupFailed {
		from := "its pod's creation"
		if b.FirstAddressAt != nil {
			from = "its first address at " + b.FirstAddressAt.UTC().Format(time.RFC3339)
		}
		return fmt.Sprintf("The runtime at epoch %d on node %s did not come up: no renewal acknowledged within the start-up grace of %v from %s (%s). Nothing was fenced: no lease was ever granted at this binding",
			b.Epoch, nodeOrUnknown(b.Node), t.grace, from, attempt)
	}
	last := "before this controller's leadership"
	if b.LastAcknowledgedRenewal != nil {
		last = b.LastAcknowledgedRenewal.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("Control lease at epoch %d on node %s expired at %s: no renewal acknowledged since %s (%s). By its own clock the runtime has held its outputs for up to %v and fenced itself: output writes stopped, reads go on",
		b.Epoch, nodeOrUnknown(b.Node), e.At.UTC().Format(time.RFC3339Nano), last, attempt, t.holdBound)
}

// leaseCondition is the LeaseExpired condition of the binding's state.
func leaseCondition(st *holdfastv1.UnitStatus, t terms, b *holdfastv1.RuntimeBinding, now time.Time) {
	c := metav1.Condition{Type: holdfastv1.ConditionLeaseExpired, Status: metav1.ConditionFalse}
	switch {
	case t.mode != holdfastv1.Failover:
		c.Reason, c.Message = holdfastv1.ReasonAutonomy, "An Autonomy runtime holds no lease and never fences itself"
	case b.LeaseState == holdfastv1.LeaseExpired && b.Expiry != nil:
		c.Status, c.Reason = metav1.ConditionTrue, string(b.Expiry.Verdict)
		c.Message = fmt.Sprintf("Epoch %d: %s (last attempt %s)", b.Expiry.Epoch, b.Expiry.Verdict, b.Expiry.LastAttempt)
	case b.LeaseState == holdfastv1.LeaseHeld:
		c.Reason, c.Message = holdfastv1.ReasonLeaseRenewed, fmt.Sprintf("Lease held at epoch %d", b.Epoch)
	default:
		c.Reason, c.Message = holdfastv1.ReasonAwaitingFirstRenewal, fmt.Sprintf("No renewal acknowledged yet at epoch %d", b.Epoch)
	}
	setCondition(st, c, now)
}

// ownExpiry is the current binding's own Expired, not one carried over.
func ownExpiry(b *holdfastv1.RuntimeBinding) bool {
	return b.LeaseState == holdfastv1.LeaseExpired && !b.LeaseStateCarried() && b.Expiry != nil && b.Expiry.Epoch == b.Epoch
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
		p.Rebind = &Rebind{Origin: holdfastv1.OriginAutomatic}
		r := warning(EventRebound)
		r.Message = fmt.Sprintf("Re-bound from node %s (epoch %d, lease expired at %s, %s) to epoch %d after the margin of %v; the scheduler places it on an untried standby: %s",
			nodeOrUnknown(b.Node), b.Epoch, exp.UTC().Format(time.RFC3339), b.Expiry.Verdict, in.nextEpoch(holdfastv1.OriginAutomatic), t.margin, strings.Join(untried, ", "))
		if n := len(b.UnplacedRebinds); n > 0 {
			r.Message += fmt.Sprintf(" (%d attempt(s) left: %d re-bind(s) never placed count against the budget)", left, n)
		}
		r.count = func() { rebinds.WithLabelValues(u.Namespace, u.Name, "automatic").Inc() }
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

// staleConfirmation removes a fence confirmation that certifies another
// epoch than the binding's, or none, and says why: it certifies nothing
// (policy.ConfirmedFence), and a person reading the Unit must not think it
// does. It waits for a pass with no other record of consequence.
func staleConfirmation(p *Plan, in *Inputs) {
	_, stale := policy.ConfirmedFence(in.Unit)
	if stale == "" || p.Record != nil || p.Rebind != nil {
		return
	}
	u, b := in.Unit, in.Unit.Status.RuntimeBinding
	r := warning(EventInvalidRequest)
	r.Message = "The fence confirmation certifies nothing and is removed: " + stale
	r.Manual, r.RequestID, r.Epoch, r.Node = true, u.Annotations[holdfastv1.AnnotationRequestID], b.Epoch, b.Node
	r.count = func() { requestOutcomes.WithLabelValues(u.Namespace, u.Name, EventInvalidRequest).Inc() }
	p.Record, p.ConsumeConfirm = r, true
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

// holdOff shows the wait and reports whether the pass must wait: before the
// hold-off deadline a new leader reads no expiry as a fence, unless a person
// certified the fence.
func holdOff(p *Plan, in *Inputs, what string) bool {
	if in.HoldOffUntil.IsZero() || !in.Now.Before(in.HoldOffUntil) {
		return false
	}
	if how, _ := policy.ConfirmedFence(in.Unit); how != "" {
		return false
	}
	p.holdOffWait = true
	p.at(in, in.HoldOffUntil)
	prev := meta.FindStatusCondition(p.Status.Conditions, holdfastv1.ConditionFailoverRequest)
	waiting := prev != nil && prev.Reason == holdfastv1.ReasonLeadershipHoldOff
	msg := fmt.Sprintf("Until %s no lease expiry is read as a fence (%s waits): this controller took leadership recently, and a predecessor that lost it may still be renewing; holdfast.io/failover-confirm-fenced bypasses the wait",
		in.HoldOffUntil.UTC().Format(time.RFC3339), what)
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
	confirm, stale := policy.ConfirmedFence(u)
	if stale != "" {
		stale = "; the confirmation on the Unit certifies nothing: " + stale
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
				policy.ConfirmAnnotations(b.Epoch), nodeOrUnknown(b.Node), stale))
		}
		fenced := ownExpiry(b) && (b.Expiry.Verdict == holdfastv1.VerdictStartupFailed || !in.Now.Before(b.Expiry.At.Add(t.margin)))
		if !fenced && !neverGranted(b, in) {
			if ownExpiry(b) {
				p.at(in, b.Expiry.At.Add(t.margin)) // fenced once the margin has passed
				return true
			}
			return refuse(fmt.Sprintf("The runtime at epoch %d on node %s holds its lease and may still be writing: set %s to how the node was fenced, or wait for its lease to expire%s",
				b.Epoch, nodeOrUnknown(b.Node), policy.ConfirmAnnotations(b.Epoch), stale))
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

func leaseStateGauges(u *holdfastv1.Unit, s holdfastv1.LeaseState) {
	for _, st := range []holdfastv1.LeaseState{holdfastv1.LeasePending, holdfastv1.LeaseHeld, holdfastv1.LeaseExpired} {
		v := 0.0
		if st == s {
			v = 1
		}
		leaseStateGauge.WithLabelValues(u.Namespace, u.Name, string(st)).Set(v)
	}
}
