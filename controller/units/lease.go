package units

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/grantor"
	"github.com/holdfast-io/holdfast/policy"
)

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
		c := policy.Incarnation(pod)
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
		if cs.Name != holdfastv1.RuntimeContainer || cs.RestartCount == 0 {
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

func leaseStateGauges(u *holdfastv1.Unit, s holdfastv1.LeaseState) {
	for _, st := range []holdfastv1.LeaseState{holdfastv1.LeasePending, holdfastv1.LeaseHeld, holdfastv1.LeaseExpired} {
		v := 0.0
		if st == s {
			v = 1
		}
		leaseStateGauge.WithLabelValues(u.Namespace, u.Name, string(st)).Set(v)
	}
}
