// Package role drives the host's role actuator from its own Node: the
// holdfast.io/desired-role label and the holdfast.io/role-* annotations the
// voter controller sets (docs/design.md §5, §6). It checks that the step may be
// carried out (the swap Lease held for this swap ID, the host provisioned,
// a known role), carries it out through the actuator, and reports each
// outcome as holdfast.io/actuator on its own Node.
package role

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/policy"
)

// Actuator is the host half of a swap (actuator.Actuator).
type Actuator interface {
	Provisioned(ctx context.Context) (bool, error)
	Promote(ctx context.Context, join string) (time.Time, error)
	StepDown(ctx context.Context) error
	FinishDemote(ctx context.Context) error
	Rollback(ctx context.Context) error
	Guard(ctx context.Context) (bool, string, error)
}

// Reconciler acts on its own Node's role step.
type Reconciler struct {
	// Client patches the Node; Reader reads the Node and the swap Lease
	// uncached, so a step and its authority are never judged from a stale
	// copy.
	Client   client.Client
	Reader   client.Reader
	NodeName string
	Actuator Actuator
	State    hoststate.State
	Clock    clock.PassiveClock
	// GuardEvery is how often the server guard is re-applied without a Node
	// change (a person unmasking the unit).
	GuardEvery time.Duration
	// Removal asks the cluster's member list whether the local member is
	// gone, writing the tombstone when it is (tombstone.Watcher.Check); nil
	// without etcd access. It also runs as soon as a VoterSwap naming this
	// node records a member's removal, so the tombstone (which the swap
	// waits for) follows the removal instead of the watcher's next check.
	Removal func(ctx context.Context) (bool, error)
	// Done, when set, runs after a step is reported done (the reporter's
	// Kick: the switched role, and the tombstone finish-demote and rollback
	// retire, show on the Node at once; the swap waits for them).
	Done func()
}

// removalKey is the request a VoterSwap's record of a removal maps to:
// apart from the Node's own, so it runs the removal check only.
const removalKey = "removal-recorded"

// SetupWithManager watches the own Node.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.GuardEvery == 0 {
		r.GuardEvery = time.Minute
	}
	own := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == r.NodeName })
	// Kubelet status heartbeats change neither; the guard runs every
	// GuardEvery regardless.
	meta := predicate.Or(predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{})
	b := ctrl.NewControllerManagedBy(mgr).Named("role").
		For(&corev1.Node{}, builder.WithPredicates(own, meta))
	if r.Removal != nil {
		b = b.Watches(&holdfastv1.VoterSwap{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if s, ok := o.(*holdfastv1.VoterSwap); ok && RecordsRemovalOf(s, r.NodeName) {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: removalKey, Name: r.NodeName}}}
			}
			return nil
		}))
	}
	return b.Complete(r)
}

// RecordsRemovalOf says whether the swap records the removal of a member
// of node: its outgoing member removed, or its incoming learner removed by
// a rollback. Only a hint to look: the removal check itself asks the
// member list.
func RecordsRemovalOf(s *holdfastv1.VoterSwap, node string) bool {
	in := s.Status.Incoming
	if in == "" {
		in = s.Spec.Incoming
	}
	for _, h := range s.Status.History {
		switch {
		case s.Spec.Outgoing == node && h.Reason == holdfastv1.SwapReasonMemberRemoved && h.Outcome == holdfastv1.SwapOutcomeDone,
			in == node && h.Step == holdfastv1.StepRollback && h.Outcome == holdfastv1.SwapReasonLearnerRemoved:
			return true
		}
	}
	return false
}

// Reconcile carries out the Node's role step, once; for a removal recorded
// on a VoterSwap, it runs the removal check.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := klog.FromContext(ctx)
	if req.Namespace == removalKey {
		gone, err := r.Removal(ctx)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("checking the local member's removal: %w", err)
		}
		log.V(1).Info("Removal check on a swap's record of a removal", "gone", gone)
		return ctrl.Result{}, nil
	}
	if _, why, err := r.Actuator.Guard(ctx); err != nil {
		return ctrl.Result{}, fmt.Errorf("guarding the server unit: %w", err)
	} else if why != "" {
		log.V(2).Info("Server unit guarded", "reason", why)
	}
	// Uncached: a step is judged from the Node as it is now, never from a
	// cache that has not seen this plugin's own last report yet.
	node := &corev1.Node{}
	if err := r.Reader.Get(ctx, req.NamespacedName, node); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	step := node.Annotations[holdfastv1.AnnotationRoleStep]
	if step == "" {
		return ctrl.Result{RequeueAfter: r.GuardEvery}, nil
	}
	swap := node.Annotations[holdfastv1.AnnotationRoleSwap]
	prev := current(node)
	if prev != nil && prev.Swap == swap && prev.Step == step && prev.Phase == holdfastv1.ActuatorDone {
		return ctrl.Result{RequeueAfter: r.GuardEvery}, nil
	}
	report := holdfastv1.ActuatorReport{Swap: swap, Step: step}
	if prev != nil && prev.Swap == swap && prev.Step == step {
		report.StartedAt = prev.StartedAt
	}

	if why, err := r.refusal(ctx, node, step, swap); err != nil {
		return ctrl.Result{}, err
	} else if why != "" {
		log.Info("Role step refused", "node", klog.KObj(node), "swap", swap, "step", step, "reason", why)
		return ctrl.Result{RequeueAfter: r.GuardEvery}, r.reportRefused(ctx, node, prev, report, why)
	}
	// A step already reported running (one that waits for the kubelet, or
	// one cut short by a crash) is not reported again: the report is a Node
	// change, which would run this again at once.
	if prev == nil || prev.Swap != swap || prev.Step != step || prev.Phase != holdfastv1.ActuatorRunning {
		if err := r.report(ctx, node, report, holdfastv1.ActuatorRunning, ""); err != nil {
			return ctrl.Result{}, err
		}
	}
	log.Info("Carrying out role step", "node", klog.KObj(node), "swap", swap, "step", step)
	var err error
	switch step {
	case holdfastv1.RoleStepPromote:
		var started time.Time
		started, err = r.Actuator.Promote(ctx, node.Annotations[holdfastv1.AnnotationRoleJoin])
		if !started.IsZero() {
			report.StartedAt = &metav1.Time{Time: started}
		}
	case holdfastv1.RoleStepStepDown:
		err = r.Actuator.StepDown(ctx)
	case holdfastv1.RoleStepFinishDemote:
		err = r.Actuator.FinishDemote(ctx)
	case holdfastv1.RoleStepRollback:
		err = r.Actuator.Rollback(ctx)
	}
	if after, waiting := actuator.IsWaiting(err); waiting {
		// Its part is done and the kubelet's is not: still running, looked
		// at again after the actuator's recheck, reported only when what it
		// waits for changes.
		log.V(2).Info("Role step waiting", "node", klog.KObj(node), "swap", swap, "step", step, "reason", err.Error())
		if !sameReport(prev, report, holdfastv1.ActuatorRunning, err.Error()) {
			if rerr := r.report(ctx, node, report, holdfastv1.ActuatorRunning, err.Error()); rerr != nil {
				return ctrl.Result{}, rerr
			}
		}
		return ctrl.Result{RequeueAfter: after}, nil
	}
	switch {
	case actuator.IsRefused(err):
		return ctrl.Result{RequeueAfter: r.GuardEvery}, r.reportRefused(ctx, node, prev, report, err.Error())
	case err != nil:
		log.Error(err, "Role step failed", "node", klog.KObj(node), "swap", swap, "step", step)
		if rerr := r.report(ctx, node, report, holdfastv1.ActuatorFailed, err.Error()); rerr != nil {
			return ctrl.Result{}, rerr
		}
		// Retried with backoff: every step is safe to repeat.
		return ctrl.Result{}, err
	}
	log.Info("Role step done", "node", klog.KObj(node), "swap", swap, "step", step)
	if err := r.report(ctx, node, report, holdfastv1.ActuatorDone, ""); err != nil {
		return ctrl.Result{}, err
	}
	if r.Done != nil {
		r.Done()
	}
	return ctrl.Result{RequeueAfter: r.GuardEvery}, nil
}

// refusal says why the step must not be carried out, "" when it may.
func (r *Reconciler) refusal(ctx context.Context, node *corev1.Node, step, swap string) (string, error) {
	if why := policy.RoleStepRefusal(step, node.Labels[holdfastv1.LabelDesiredRole]); why != "" {
		return why, nil
	}
	if step == holdfastv1.RoleStepPromote {
		ok, err := r.Actuator.Provisioned(ctx)
		if err != nil {
			return "", err
		}
		if !ok {
			if e, ok := r.Actuator.(interface{ NotProvisioned() (string, error) }); ok {
				return e.NotProvisioned()
			}
			return "host not provisioned: the server unit is not installed", nil
		}
	}
	held, why, err := r.leaseHeld(ctx, swap)
	if err != nil {
		return "", err
	}
	if held {
		return "", nil
	}
	// Finishing a member that is provably gone needs no Lease: it can never
	// cost quorum, so a host that was down for its whole swap finishes on
	// its return, whatever its role file says (its step-down never ran).
	if step == holdfastv1.RoleStepFinishDemote {
		proof, err := r.memberGone(ctx, node.Name, swap)
		if err != nil {
			return "", err
		}
		if proof != "" {
			klog.FromContext(ctx).Info("Finishing a removed member without the swap Lease", "node", klog.KObj(node), "swap", swap, "proof", proof)
			return "", nil
		}
		return why + "; and its member is not provably gone: no tombstone (holdfast's or the server's own), no VoterSwap " + swap +
			" recording its removal, and the member list still names it or could not be read", nil
	}
	return why, nil
}

// memberGone says how the local member is known to be removed from its
// cluster, "" when it is not: a tombstone (holdfast's or the server's own),
// the swap's record of the removal of this host's member, or the member list
// as the other members answer it.
func (r *Reconciler) memberGone(ctx context.Context, node, swap string) (string, error) {
	if why, err := r.State.Removed(); err != nil || why != "" {
		return why, err
	}
	m, err := r.State.Member()
	if err != nil {
		return "", err
	}
	var swaps holdfastv1.VoterSwapList
	if err := r.Reader.List(ctx, &swaps); err != nil {
		return "", fmt.Errorf("listing VoterSwaps: %w", err)
	}
	if proof := RemovalRecorded(swaps.Items, node, swap, m); proof != "" {
		return proof, nil
	}
	if r.Removal == nil {
		return "", nil
	}
	if gone, err := r.Removal(ctx); err != nil || !gone {
		return "", err
	}
	return r.State.Removed()
}

// RemovalRecorded says whether the VoterSwap of swapID records the removal
// of node's member m (the local member as this host recorded it): the swap
// names node as outgoing, its outgoing member is m, and its history records
// the member removed. "" when it does not; a record of another node, of
// another member, or of a swap that has not removed it yet proves nothing.
func RemovalRecorded(swaps []holdfastv1.VoterSwap, node, swapID string, m *hoststate.Member) string {
	if m == nil || swapID == "" {
		return ""
	}
	for i := range swaps {
		s := &swaps[i]
		if s.Status.SwapID != swapID || s.Spec.Outgoing != node || s.Status.OutgoingMemberID != m.ID {
			continue
		}
		for _, h := range s.Status.History {
			if h.Reason == holdfastv1.SwapReasonMemberRemoved && h.Outcome == holdfastv1.SwapOutcomeDone {
				return fmt.Sprintf("VoterSwap %s records the removal of member %s of %s at %s", s.Name, m.ID, node, h.At.UTC().Format(time.RFC3339))
			}
		}
	}
	return ""
}

// leaseHeld says whether the swap Lease is held, unexpired, for swap.
func (r *Reconciler) leaseHeld(ctx context.Context, swap string) (bool, string, error) {
	if swap == "" {
		return false, fmt.Sprintf("no swap ID: metadata.annotations[%s] is empty", holdfastv1.AnnotationRoleSwap), nil
	}
	lease := &coordinationv1.Lease{}
	err := r.Reader.Get(ctx, types.NamespacedName{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName}, lease)
	if apierrors.IsNotFound(err) {
		return false, fmt.Sprintf("no Lease held for swap %s: %s/%s does not exist", swap, holdfastv1.SwapLeaseNamespace, holdfastv1.SwapLeaseName), nil
	}
	if err != nil {
		return false, "", err
	}
	if id := lease.Annotations[holdfastv1.AnnotationSwapID]; id != swap {
		return false, fmt.Sprintf("no Lease held for swap %s: the Lease names swap %q", swap, id), nil
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		return false, fmt.Sprintf("no Lease held for swap %s: the Lease has no holder", swap), nil
	}
	if lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
		return false, fmt.Sprintf("no Lease held for swap %s: the Lease was never renewed", swap), nil
	}
	expiry := lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)
	if !r.Clock.Now().Before(expiry) {
		return false, fmt.Sprintf("no Lease held for swap %s: the Lease expired at %s", swap, expiry.UTC().Format(time.RFC3339)), nil
	}
	return true, "", nil
}

// sameReport says whether prev already says rep with phase and msg.
func sameReport(prev *holdfastv1.ActuatorReport, rep holdfastv1.ActuatorReport, phase, msg string) bool {
	if prev == nil || prev.Swap != rep.Swap || prev.Step != rep.Step || prev.Phase != phase || prev.Message != msg {
		return false
	}
	if (prev.StartedAt == nil) != (rep.StartedAt == nil) {
		return false
	}
	// The annotation keeps whole seconds.
	return prev.StartedAt == nil || prev.StartedAt.Unix() == rep.StartedAt.Unix()
}

func current(node *corev1.Node) *holdfastv1.ActuatorReport {
	return holdfastv1.ActuatorReportOf(node.Annotations)
}

// reportRefused reports a refused step, counted each time it is judged but
// written only when the report says something new: the write is a Node
// change, which would judge the step again at once, a loop that rewrites
// the Node every second while the refusal stands.
func (r *Reconciler) reportRefused(ctx context.Context, node *corev1.Node, prev *holdfastv1.ActuatorReport, rep holdfastv1.ActuatorReport, why string) error {
	if sameReport(prev, rep, holdfastv1.ActuatorRefused, why) {
		steps.WithLabelValues(stepLabel(rep.Step), holdfastv1.ActuatorRefused).Inc()
		return nil
	}
	return r.report(ctx, node, rep, holdfastv1.ActuatorRefused, why)
}

// report writes the actuator annotation on the own Node.
func (r *Reconciler) report(ctx context.Context, node *corev1.Node, rep holdfastv1.ActuatorReport, phase, msg string) error {
	role, err := r.State.Role()
	if err != nil {
		return err
	}
	rep.Phase, rep.Message, rep.Role = phase, msg, role
	steps.WithLabelValues(stepLabel(rep.Step), phase).Inc()
	rep.At = metav1.Time{Time: r.Clock.Now()}
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	return PatchAnnotations(ctx, r.Client, node.Name, map[string]*string{holdfastv1.AnnotationActuator: new(string(b))})
}

// PatchAnnotations sets (or, for nil, removes) annotations on a Node with a
// merge patch, which touches nothing else.
func PatchAnnotations(ctx context.Context, c client.Client, node string, ann map[string]*string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return err
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	return c.Patch(ctx, n, client.RawPatch(types.MergePatchType, body))
}
