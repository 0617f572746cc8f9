package voters

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/audit"
)

// maxHistory bounds a swap's history: the oldest retries go first.
const maxHistory = 200

// record writes the action's change to the swap, then its Event and audit
// line: a line on the trail means the change was committed first.
func (r *Reconciler) record(ctx context.Context, o *Observation, swap *holdfastv1.VoterSwap, a *Action) error {
	msg := a.Message
	if swap == nil && a.Swap != "" {
		swap = findSwap(o.Swaps, a.Swap)
	}
	var regarding runtime.Object = o.Policy
	if swap != nil {
		regarding = swap
	}
	warning := false
	if a.Then != nil && swap != nil {
		s := swap.DeepCopy()
		r.apply(s, a.Then, o.Now)
		if err := r.Client.Status().Update(ctx, s); err != nil {
			return fmt.Errorf("recording %s on VoterSwap %s: %w", a.Kind, swap.Name, err)
		}
		*swap = *s
		warning = a.Then.Warning
		if msg == "" && len(a.Then.History) > 0 {
			msg = a.Then.History[len(a.Then.History)-1].Message
		}
	}
	if msg == "" {
		msg = fmt.Sprintf("%s %s", a.Kind, a.Node)
	}
	reason := a.Reason
	if reason == "" && a.Then != nil && len(a.Then.History) > 0 {
		h := a.Then.History[len(a.Then.History)-1]
		reason = h.Reason
		if reason == "" {
			reason = string(h.Step) + h.Outcome
		}
	}
	if reason == "" {
		reason = string(a.Kind)
	}
	if a.Kind == Record && (a.Then == nil || len(a.Then.History) == 0) {
		return nil
	}
	if r.Recorder != nil {
		typ := corev1.EventTypeNormal
		if warning {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(regarding, nil, typ, reason, string(a.Kind), "%s", truncate(msg, 1000))
	}
	if r.Audit != nil {
		id := a.SwapID
		if swap != nil && swap.Status.SwapID != "" {
			id = swap.Status.SwapID
		}
		actor := r.Actor
		if actor == "" {
			actor = "holdfast-controller/" + r.Settings.Identity
		}
		var obj *audit.Object
		switch {
		case swap != nil:
			obj = &audit.Object{Kind: "VoterSwap", Name: swap.Name}
		case o.Policy != nil:
			obj = &audit.Object{Kind: "VoterPolicy", Name: o.Policy.Name}
		}
		if err := r.Audit.Write(audit.Record{Object: obj, Swap: id, Node: a.Node, Actor: actor, Reason: reason, Message: msg}); err != nil {
			klog.FromContext(ctx).Error(err, "Writing the audit line", "swap", id, "reason", reason)
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// apply changes a swap's status as ch says, at now.
func (r *Reconciler) apply(s *holdfastv1.VoterSwap, ch *Change, now time.Time) {
	st := &s.Status
	t := metav1.NewTime(now)
	if ch.Phase != "" {
		st.Phase = ch.Phase
	}
	if ch.Step != "" && ch.Step != st.Step {
		if start, ok := r.stepStart[s.Name]; ok && st.Step != "" {
			stepSeconds.WithLabelValues(string(st.Step)).Observe(now.Sub(start).Seconds())
		}
		r.stepStart[s.Name] = now
		st.Step = ch.Step
	}
	if ch.Outcome != "" {
		st.Outcome = ch.Outcome
	}
	if ch.SwapID != "" {
		st.SwapID = ch.SwapID
	}
	if ch.Incoming != "" {
		st.Incoming = ch.Incoming
	}
	if ch.StartedAt {
		st.StartedAt = &t
	}
	if ch.FinishedAt {
		st.FinishedAt = &t
		swapsFinished.WithLabelValues(string(st.Phase)).Inc()
		delete(r.stepStart, s.Name)
	}
	if ch.ClearDeadline {
		st.Deadline = nil
	}
	if ch.Deadline != nil {
		st.Deadline = &metav1.Time{Time: *ch.Deadline}
	}
	if ch.IncomingMember != "" {
		st.IncomingMemberID = ch.IncomingMember
	}
	if ch.OutgoingMember != "" {
		st.OutgoingMemberID = ch.OutgoingMember
	}
	if ch.Snapshot != nil {
		st.Snapshot = ch.Snapshot
	}
	for _, h := range ch.History {
		h.At = t
		st.History = append(st.History, h)
	}
	if n := len(st.History); n > maxHistory {
		st.History = st.History[n-maxHistory:]
	}
	switch {
	case st.Phase.Finished():
		status := metav1.ConditionFalse
		setCondition(&st.Conditions, metav1.Condition{Type: holdfastv1.ConditionProgressing, Status: status, Reason: string(st.Phase),
			Message: lastMessage(st), ObservedGeneration: s.Generation}, t)
	case len(ch.History) > 0:
		h := ch.History[len(ch.History)-1]
		reason := h.Reason
		if reason == "" {
			reason = string(h.Step) + h.Outcome
		}
		msg := h.Message
		if msg == "" {
			msg = fmt.Sprintf("step %s %s", h.Step, h.Outcome)
		}
		setCondition(&st.Conditions, metav1.Condition{Type: holdfastv1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: reason,
			Message: truncate(msg, 32000), ObservedGeneration: s.Generation}, t)
	}
	if ch.Phase == holdfastv1.SwapRunning && ch.StartedAt {
		setCondition(&st.Conditions, metav1.Condition{Type: holdfastv1.ConditionGatesPassed, Status: metav1.ConditionTrue, Reason: holdfastv1.SwapReasonGatesPassed,
			Message: "every gate held when the swap started", ObservedGeneration: s.Generation}, t)
	}
	if ch.Phase == holdfastv1.SwapRefused {
		setCondition(&st.Conditions, metav1.Condition{Type: holdfastv1.ConditionGatesPassed, Status: metav1.ConditionFalse, Reason: holdfastv1.SwapReasonGatesFailed,
			Message: truncate(lastMessage(st), 32000), ObservedGeneration: s.Generation}, t)
	}
}

func lastMessage(st *holdfastv1.VoterSwapStatus) string {
	for i := len(st.History) - 1; i >= 0; i-- {
		if st.History[i].Message != "" {
			return st.History[i].Message
		}
	}
	return ""
}

// recordRetry keeps a failed action in the swap's history (once per
// distinct message) and in its Progressing condition; the next pass tries
// again.
func (r *Reconciler) recordRetry(ctx context.Context, o *Observation, swap *holdfastv1.VoterSwap, a *Action, err error) error {
	step := swap.Status.Step
	if step == "" {
		step = holdfastv1.StepGates
	}
	msg := truncate(fmt.Sprintf("%s failed, tried again: %v", a.Kind, err), 2000)
	h := swap.Status.History
	if len(h) > 0 && h[len(h)-1].Message == msg {
		return nil
	}
	s := swap.DeepCopy()
	r.apply(s, &Change{History: []holdfastv1.SwapStepRecord{rec(step, holdfastv1.SwapOutcomeRetried, a.Reason, msg)}}, o.Now)
	if err := r.Client.Status().Update(ctx, s); err != nil {
		return err
	}
	*swap = *s
	return nil
}

// setProgressing records what a swap waits for, when it changed.
func (r *Reconciler) setProgressing(ctx context.Context, swap *holdfastv1.VoterSwap, status metav1.ConditionStatus, reason, msg string) error {
	if reason == "" {
		reason = "Waiting"
	}
	msg = truncate(msg, 32000)
	if c := meta.FindStatusCondition(swap.Status.Conditions, holdfastv1.ConditionProgressing); c != nil &&
		c.Status == status && c.Reason == reason && c.Message == msg {
		return nil
	}
	s := swap.DeepCopy()
	if s.Status.Phase == "" {
		s.Status.Phase = holdfastv1.SwapPending
	}
	setCondition(&s.Status.Conditions, metav1.Condition{Type: holdfastv1.ConditionProgressing, Status: status, Reason: reason,
		Message: msg, ObservedGeneration: s.Generation}, metav1.NewTime(r.Clock.Now()))
	return r.Client.Status().Update(ctx, s)
}
