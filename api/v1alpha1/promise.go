package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RuntimePromise is what the runtime process of a binding was started with
// and may have been granted (docs/design.md §3 L11). Every expiry, Hold,
// margin and hold-off decision about the binding reads it, never
// spec.availability alone: an edit of a live Unit never makes holdfast
// believe its runtime stops writing earlier than it will.
type RuntimePromise struct {
	// mode the runtime process runs in. Its pod's environment fixes it for
	// the process's life: a Failover runtime holds a lease, holds and fences;
	// an Autonomy runtime never fences. A Unit whose mode differs is handed
	// over to a new runtime process (handOver).
	// +required
	Mode AvailabilityMode `json:"mode"`
	// leaseDurationSeconds is the longest lease any grant at this epoch may
	// carry. It is raised before the grantor sends a longer grant, and
	// lowered only once no grant under it can be in force (shorterLease).
	// +required
	// +kubebuilder:validation:Minimum=1
	LeaseDurationSeconds int32 `json:"leaseDurationSeconds"`
	// holdBoundMillis is the hold bound that follows from
	// leaseDurationSeconds (L3): how long past its deadline the runtime may
	// still drive its outputs to their hold values.
	// +required
	HoldBoundMillis int64 `json:"holdBoundMillis"`
	// rebindMarginMillis is how long after an expiry a new writer may
	// start: the longest margin the Unit asked for at this epoch, never
	// below the hold bound. A shorter margin takes effect at the next
	// binding.
	// +required
	RebindMarginMillis int64 `json:"rebindMarginMillis"`
	// runtimeDigest names the spec.runtime the runtime pod was built from
	// (image, args, env and ports: what defines the writing process). A Unit
	// whose spec.runtime no longer matches it is handed over to a new
	// runtime process.
	// +optional
	RuntimeDigest string `json:"runtimeDigest,omitempty"`
	// shorterLease is a shorter lease the Unit asks for that has not taken
	// effect yet: grants carry it already, decisions read
	// leaseDurationSeconds until no grant under it can be in force.
	// +optional
	ShorterLease *ShorterLease `json:"shorterLease,omitempty"`
}

// ShorterLease is a shortening of the lease on its way to taking effect.
type ShorterLease struct {
	// leaseDurationSeconds the Unit asks for.
	// +required
	// +kubebuilder:validation:Minimum=1
	LeaseDurationSeconds int32 `json:"leaseDurationSeconds"`
	// since: every grant of a longer lease was sent before this instant.
	// +required
	Since metav1.Time `json:"since"`
	// effectiveAt is when the shorter lease takes effect: since plus the
	// recorded lease and its hold bound (the last instant a runtime granted
	// the longer lease may write), or the end of a new leader's hold-off
	// when that is later.
	// +required
	EffectiveAt metav1.Time `json:"effectiveAt"`
}

// HandOver is a planned hand-over of a binding to a new runtime process,
// started because the Unit asks for a process the binding's promise does
// not describe (another mode, another spec.runtime). The new epoch starts
// on the same node only once the old runtime has provably stopped writing:
// fenced by its own lease (Failover), its pod confirmed gone and its node's
// plugin reporting no container of it (RuntimesReport), or a person's
// certification (AnnotationFailoverConfirmFenced).
type HandOver struct {
	// reason names the fields that need another runtime process.
	// +required
	Reason string `json:"reason"`
	// since is when the hand-over started: holdfast sent no grant at this
	// binding after it, and asks for an Autonomy runtime's pod to be
	// deleted from it.
	// +required
	Since metav1.Time `json:"since"`
	// podGoneAt is when holdfast first found the apiserver without the
	// runtime's pod. A pod gone is not a process gone (a Node's deletion
	// or a forced delete removes the object without the kubelet): the pod's
	// absence counts only with a report of the node's plugin that answers
	// this time (RuntimesReport.Answers), so listed after it.
	// +optional
	PodGoneAt *metav1.Time `json:"podGoneAt,omitempty"`
}

// OriginHandOver: a planned hand-over to a new runtime process on the same
// node (docs/design.md §3 L11).
const OriginHandOver BindingOrigin = "HandOver"

// LeaseDuration is the longest lease a grant at the binding may carry.
func (p *RuntimePromise) LeaseDuration() time.Duration {
	return time.Duration(p.LeaseDurationSeconds) * time.Second
}

// HoldBound is the hold bound of the recorded lease.
func (p *RuntimePromise) HoldBound() time.Duration {
	return HoldBound(p.LeaseDuration())
}

// RebindMargin is the recorded margin, never below the hold bound (L3).
func (p *RuntimePromise) RebindMargin() time.Duration {
	return max(time.Duration(p.RebindMarginMillis)*time.Millisecond, p.HoldBound())
}

// WritesEndBy is the last instant a runtime held to p writes, given the
// last acknowledged renewal: every grant it took dates its deadline no later
// than lastAck plus its duration (L1), which is at most the recorded lease,
// and it holds for at most the hold bound of that duration (L3), which the
// recorded lease's hold bound covers.
func (p *RuntimePromise) WritesEndBy(lastAck time.Time) time.Time {
	return lastAck.Add(p.LeaseDuration() + p.HoldBound())
}

// PromisedLease is the lease decisions about the unit's current runtime
// read: its binding's recorded promise, or the spec before one is recorded.
func (u *Unit) PromisedLease() time.Duration {
	if b := u.Status.RuntimeBinding; b != nil && b.Promise != nil {
		return b.Promise.LeaseDuration()
	}
	return u.Spec.Availability.LeaseDuration()
}

// PromisedHoldBound is the hold bound of PromisedLease.
func (u *Unit) PromisedHoldBound() time.Duration {
	return HoldBound(u.PromisedLease())
}
