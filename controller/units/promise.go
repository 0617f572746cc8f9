package units

import (
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

// Events of a planned hand-over (docs/design.md §3 L11).
const (
	EventHandOver          = "HandOver"
	EventHandedOver        = "HandedOver"
	EventHandOverCancelled = "HandOverCancelled"
)

var handOvers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "holdfast_unit_handover_in_progress",
	Help: "1 while a unit's binding is handed over to a new runtime process (a change of mode or spec.runtime): the unit is held and its old runtime is being stopped.",
}, []string{"namespace", "unit"})

func init() { metrics.Registry.MustRegister(handOvers) }

// terms are what every decision about the current binding reads: its
// recorded promise, never the Unit's spec alone (L11).
type terms struct {
	mode             holdfastv1.AvailabilityMode
	lease, holdBound time.Duration
	margin           time.Duration
	// grace is the start-up grace of L4, never below the recorded lease.
	grace time.Duration
}

func termsOf(u *holdfastv1.Unit, b *holdfastv1.RuntimeBinding) terms {
	pr := b.Promise
	if pr == nil {
		np := policy.NewPromise(u)
		pr = &np
	}
	return terms{mode: pr.Mode, lease: pr.LeaseDuration(), holdBound: pr.HoldBound(), margin: pr.RebindMargin(),
		grace: max(u.Spec.Availability.StartupGrace(), pr.LeaseDuration())}
}

// notePromise records the binding's promise when it has none (a binding
// made before promises were: its runtime runs in the mode its pod's
// environment says), then moves it toward the Unit's availability as
// policy.NextPromise allows, and sets the pass's terms from it.
func notePromise(p *Plan, in *Inputs) {
	u := in.Unit
	b := p.Status.RuntimeBinding
	if b.Promise == nil {
		pr := policy.NewPromise(u)
		if m := podEnv(in.Pod, holdfastv1.RuntimeEnvMode); m != "" {
			pr.Mode = holdfastv1.AvailabilityMode(m)
		}
		b.Promise = &pr
	}
	var granting time.Duration
	if in.Obs != nil {
		granting = in.Obs.Target.Duration
	}
	next, wake := policy.NextPromise(*b.Promise, u, policy.PromiseInputs{Now: in.Now, HoldOffUntil: in.HoldOffUntil, Granting: granting})
	b.Promise = &next
	if !wake.IsZero() {
		p.at(in, wake)
	}
	p.terms = termsOf(u, b)
}

func podEnv(pod *corev1.Pod, name string) string {
	if pod == nil {
		return ""
	}
	for _, c := range pod.Spec.Containers {
		if c.Name != holdfastv1.RuntimeContainer {
			continue
		}
		for _, e := range c.Env {
			if e.Name == name {
				return e.Value
			}
		}
	}
	return ""
}

// neverGranted: no renewal was ever acknowledged at the binding, by this
// process or, as recorded, by another, so no grant at it extended anything
// (L1: a grant extends only with an acknowledged age).
func neverGranted(b *holdfastv1.RuntimeBinding, in *Inputs) bool {
	acked := in.Obs != nil && in.Obs.Acked()
	return b.LeaseEstablishedBy == nil && !acked && (b.LeaseState != holdfastv1.LeaseHeld || b.LeaseStateCarried())
}

// handOver carries out a planned hand-over (L11): a Unit that asks for
// another mode or another spec.runtime needs another runtime process, and
// the new one starts at a new epoch on the same node only once the old one
// has provably stopped writing. A Failover runtime is sent no grant from
// the start and fences by its own lease (the recorded lease and margin
// after the start, or its recorded expiry plus the margin, and never
// before the leadership hold-off); an Autonomy runtime never fences, so its
// pod is deleted and the new epoch waits for the apiserver to confirm it
// gone. The unit is held from the start; a person's restart clears the
// Hold once the new runtime is ready. It reports whether the pass produced
// a record or waits on the hand-over.
func handOver(p *Plan, in *Inputs) bool {
	u := in.Unit
	b := p.Status.RuntimeBinding
	t := p.terms
	why := strings.Join(policy.HandOverReasons(u, b.Promise), "; ")
	h := b.HandOver
	switch {
	case h == nil && why == "":
		return false
	case h == nil:
		startHandOver(p, in, why)
		return true
	case why == "" && t.mode == holdfastv1.Failover && !ownExpiry(b) && !in.PodGone:
		// Edited back before the runtime stopped: it goes on.
		b.HandOver = nil
		msg := fmt.Sprintf("The Unit asks again for the runtime at epoch %d on node %s as it runs: the hand-over is cancelled and granting resumes; the Hold stays until a person restarts the unit",
			b.Epoch, nodeOrUnknown(b.Node))
		setCondition(&p.Status, metav1.Condition{Type: holdfastv1.ConditionRuntimeHandOver, Status: metav1.ConditionFalse,
			Reason: holdfastv1.ReasonHandOverCancelled, Message: msg}, in.Now)
		r := normal(EventHandOverCancelled)
		r.Message, r.Epoch, r.Node = msg, b.Epoch, b.Node
		r.count = func() { handOvers.WithLabelValues(u.Namespace, u.Name).Set(0) }
		p.Record = r
		p.RequeueAfter = time.Millisecond
		return true
	case why != "":
		h.Reason = why
	}

	w := stopState(b, t, in)
	switch {
	case w.done:
	case t.mode != holdfastv1.Failover:
		p.DeletePod = true
		msg := fmt.Sprintf("Hand-over of epoch %d (%s): pod %s is being deleted; %s, so epoch %d starts on node %s only once it has provably stopped; awaiting %s",
			b.Epoch, h.Reason, b.Pod, w.evidence, b.Epoch+1, nodeOrUnknown(b.Node), w.awaiting)
		setCondition(&p.Status, metav1.Condition{Type: holdfastv1.ConditionRuntimeHandOver, Status: metav1.ConditionTrue,
			Reason: holdfastv1.ReasonAwaitingPodGone, Message: msg}, in.Now)
		p.at(in, in.Now.Add(5*time.Second))
		return true
	default:
		msg := fmt.Sprintf("Hand-over of epoch %d (%s): no grant sent since %s; %s; epoch %d starts on node %s at %s, or earlier on %s",
			b.Epoch, h.Reason, h.Since.UTC().Format(time.RFC3339), w.evidence, b.Epoch+1, nodeOrUnknown(b.Node), w.due.UTC().Format(time.RFC3339), w.awaiting)
		setCondition(&p.Status, metav1.Condition{Type: holdfastv1.ConditionRuntimeHandOver, Status: metav1.ConditionTrue,
			Reason: holdfastv1.ReasonAwaitingFence, Message: msg}, in.Now)
		p.at(in, w.due)
		p.at(in, in.Now.Add(5*time.Second))
		return true
	}
	evidence := w.evidence
	p.ConsumeConfirm = w.byPerson

	rb := &Rebind{Origin: holdfastv1.OriginHandOver, Node: b.Node}
	p.Rebind = rb
	r := warning(EventHandedOver)
	r.Message = fmt.Sprintf("Handed over from epoch %d to epoch %d on node %s (%s): the old runtime stopped writing (%s); the new runtime starts held until a person restarts the unit",
		b.Epoch, b.Epoch+1, nodeOrUnknown(b.Node), h.Reason, evidence)
	r.count = func() {
		rebinds.WithLabelValues(u.Namespace, u.Name, "handover").Inc()
		handOvers.WithLabelValues(u.Namespace, u.Name).Set(0)
	}
	p.Record = r
	applyRebind(p, in, rb)
	setCondition(&p.Status, metav1.Condition{Type: holdfastv1.ConditionRuntimeHandOver, Status: metav1.ConditionFalse,
		Reason: holdfastv1.ReasonHandedOver, Message: r.Message}, in.Now)
	return true
}

// stopWait is where a binding handed over stands in stopping its runtime:
// done, with the evidence that it stopped writing; or what it waits on
// (evidence, awaiting: what would end the wait, for people), and until when
// (zero: only the node's report or a person ends the wait).
type stopWait struct {
	done     bool
	evidence string
	awaiting string
	due      time.Time
	// byPerson: a person's holdfast.io/failover-confirm-fenced ended it.
	byPerson bool
}

// stopState judges whether the runtime of binding b, handed over (no grant
// sent since b.HandOver.Since), has provably stopped writing. The hand-over
// and a deleted Unit's retirement both judge by it (L11, L13). A pod gone
// from the apiserver is not a process gone: PodGC removes every pod of a
// deleted Node, and a forced delete removes the object without the kubelet,
// while the process on a node cut from the control network still writes.
// So the pod's absence counts only with the report of the one component
// that sees the process, the node plugin on the binding's node, listed
// after the pod was seen gone (it answers b.HandOver.PodGoneAt, recorded
// here on the first pass that finds the pod gone) and listing no container
// of the unit at the binding's epoch or an earlier one. Without that, a
// Failover runtime is fenced by its own lease and the margin (fenceDue) and
// an Autonomy runtime, which never fences itself, waits for the report or
// for a person's certification (holdfast.io/failover-confirm-fenced).
func stopState(b *holdfastv1.RuntimeBinding, t terms, in *Inputs) stopWait {
	h := b.HandOver
	switch {
	case in.PodGone && h.PodGoneAt == nil:
		at := metav1.NewTime(policy.CeilSecond(in.Now))
		h.PodGoneAt = &at
	case !in.PodGone && h.PodGoneAt != nil:
		// The pod is back: a report answering its earlier absence says
		// nothing of the process it runs.
		h.PodGoneAt = nil
	}
	switch c, _ := policy.ConfirmedFence(in.Unit, in.Running); {
	case c != "":
		return stopWait{done: true, byPerson: true, evidence: fmt.Sprintf("a person certified it (%s: %q)", holdfastv1.AnnotationFailoverConfirmFenced, c)}
	case in.PodGone && b.Node == "":
		// The scheduler records the node before it binds the pod: a
		// binding with no node had its pod on none, so it never ran.
		return stopWait{done: true, evidence: fmt.Sprintf("its pod %s is gone and was never placed on a node, so it never ran", b.Pod)}
	}
	node := nodeOrUnknown(b.Node)
	confirm := fmt.Sprintf("a person who has stopped it sets %s on the Unit to how", policy.ConfirmAnnotations(b.Epoch, in.Running))
	var awaiting string
	switch running := nodeRuntimesOf(b, in.Unit, in.NodeRuntimes); {
	case !in.PodGone:
		awaiting = fmt.Sprintf("the apiserver to confirm pod %s gone and then node %s's plugin to list no container of it (%s on Node %s); if the node is down for good, %s",
			b.Pod, node, holdfastv1.AnnotationRuntimes, node, confirm)
	case in.NodeRuntimes == nil || !answers(in.NodeRuntimes, in.Unit, h.PodGoneAt):
		awaiting = fmt.Sprintf("pod %s is gone from the apiserver since %s, which is no proof its process stopped: waiting for node %s's plugin to list the node's runtimes after that (%s on Node %s); if the node is down or cut off for good, %s",
			b.Pod, h.PodGoneAt.UTC().Format(time.RFC3339), node, holdfastv1.AnnotationRuntimes, node, confirm)
	case len(running) > 0:
		awaiting = fmt.Sprintf("pod %s is gone from the apiserver but node %s's plugin lists its runtime still running there (%s): stop it on the node (its kubelet does once it reaches the apiserver), or %s",
			b.Pod, node, strings.Join(running, ", "), confirm)
	default:
		return stopWait{done: true, evidence: fmt.Sprintf("its pod %s is gone and node %s's plugin, listing the node after that, runs no container of it at epoch %d or earlier",
			b.Pod, node, b.Epoch)}
	}
	if t.mode != holdfastv1.Failover {
		return stopWait{evidence: "an Autonomy runtime never fences itself", awaiting: awaiting}
	}
	due, fence := fenceDue(b, t, in)
	return stopWait{done: !in.Now.Before(due), evidence: fence, awaiting: awaiting, due: due}
}

// answers says whether report r was listed after its node's plugin read the
// unit's hand-over's podGoneAt, so after the pod was seen gone: the order
// needs no comparison of the two machines' clocks.
func answers(r *holdfastv1.RuntimesReport, u *holdfastv1.Unit, podGoneAt *metav1.Time) bool {
	if podGoneAt == nil {
		return false
	}
	for _, a := range r.Answers {
		if a.Namespace == u.Namespace && a.Unit == u.Name && a.PodGoneAt.Equal(podGoneAt) {
			return true
		}
	}
	return false
}

// nodeRuntimesOf names the unit's runtimes report r lists at the binding's
// epoch or an earlier one: each may still write.
func nodeRuntimesOf(b *holdfastv1.RuntimeBinding, u *holdfastv1.Unit, r *holdfastv1.RuntimesReport) []string {
	if r == nil {
		return nil
	}
	var out []string
	for _, rt := range r.Runtimes {
		if rt.Namespace == u.Namespace && rt.Unit == u.Name && rt.Epoch <= b.Epoch {
			out = append(out, fmt.Sprintf("pod %s uid %s at epoch %d", rt.Pod, rt.PodUID, rt.Epoch))
		}
	}
	return out
}

// fenceDue is when a Failover runtime handed over has certainly stopped
// writing, and the evidence: every grant it may hold went out before the
// hand-over started (the reconciler paused the loop first), so it writes no
// later than since plus the recorded lease and hold bound, which the margin
// covers; an expiry already recorded at the binding brings that earlier; a
// runtime never granted anything writes nothing. A predecessor grantor may
// renew until this leader's hold-off ends (L6).
func fenceDue(b *holdfastv1.RuntimeBinding, t terms, in *Inputs) (time.Time, string) {
	since := b.HandOver.Since.Time
	due := since.Add(t.lease + t.margin)
	why := fmt.Sprintf("it fences by its own lease (%v) and the margin (%v) after that", t.lease, t.margin)
	switch {
	case neverGranted(b, in):
		due, why = since, "no renewal was ever acknowledged at this binding, so it holds no lease"
	case ownExpiry(b) && b.Expiry.At.Add(t.margin).Before(due):
		due = b.Expiry.At.Add(t.margin)
		why = fmt.Sprintf("its lease expired at %s (%s) and the margin (%v) has passed", b.Expiry.At.UTC().Format(time.RFC3339), b.Expiry.Verdict, t.margin)
	}
	if in.HoldOffUntil.After(due) {
		due = in.HoldOffUntil
		why += ", and this controller's leadership hold-off has ended"
	}
	return due, why
}

// startHandOver holds the unit and stops the old runtime: the grants stop
// (StopGranting) or its pod is deleted (DeletePod).
func startHandOver(p *Plan, in *Inputs, why string) {
	u := in.Unit
	b := p.Status.RuntimeBinding
	t := p.terms
	b.HandOver = &holdfastv1.HandOver{Reason: why, Since: metav1.NewTime(policy.CeilSecond(in.Now))}
	msg := fmt.Sprintf("Hand-over of epoch %d on node %s to a new runtime process: %s. ", b.Epoch, nodeOrUnknown(b.Node), why)
	reason := holdfastv1.ReasonAwaitingFence
	if t.mode == holdfastv1.Failover {
		p.StopGranting = true
		msg += fmt.Sprintf("No grant is sent from now: the runtime holds its outputs and fences by its own lease (%v, hold bound %v), and epoch %d starts on the same node after the margin (%v)",
			t.lease, t.holdBound, b.Epoch+1, t.margin)
	} else {
		p.DeletePod = true
		reason = holdfastv1.ReasonAwaitingPodGone
		msg += fmt.Sprintf("An Autonomy runtime never fences itself: its pod %s is deleted, and epoch %d starts on the same node once the pod is gone and node %s's plugin lists no container of it (%s), or a person certifies it stopped (%s)",
			b.Pod, b.Epoch+1, nodeOrUnknown(b.Node), holdfastv1.AnnotationRuntimes, policy.ConfirmAnnotations(b.Epoch, in.Running))
	}
	msg += "; the unit is held until a person restarts it"
	setCondition(&p.Status, metav1.Condition{Type: holdfastv1.ConditionRuntimeHandOver, Status: metav1.ConditionTrue, Reason: reason, Message: msg}, in.Now)
	newlyHeld := !meta.IsStatusConditionTrue(p.Status.Conditions, holdfastv1.ConditionHeld)
	if newlyHeld {
		setCondition(&p.Status, metav1.Condition{Type: holdfastv1.ConditionHeld, Status: metav1.ConditionTrue, Reason: holdfastv1.ReasonHandOver, Message: msg}, in.Now)
	}
	r := warning(EventHandOver)
	r.Message, r.Epoch, r.Node = msg, b.Epoch, b.Node
	r.count = func() {
		handOvers.WithLabelValues(u.Namespace, u.Name).Set(1)
		if newlyHeld {
			holds.WithLabelValues(u.Namespace, u.Name, holdfastv1.ReasonHandOver).Inc()
		}
	}
	p.Record = r
	p.RequeueAfter = time.Millisecond
}
