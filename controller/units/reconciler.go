// Package units is the unit availability controller (docs/design.md §3, §4): it
// binds each Unit's runtime to an epoch, builds the runtime pod, reads the
// grantor's evidence against the two deadlines, and decides the Hold, the
// re-bind and the suspension. It decides when a unit moves and with which
// epoch; the scheduler decides where.
package units

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/grantor"
	"github.com/holdfast-io/holdfast/internal/audit"
	"github.com/holdfast-io/holdfast/policy"
)

// HoldOff gives the hold-off deadline of a unit's lease and margin (the
// grantor's leadership tenure, controller/leadership).
type HoldOff interface {
	HoldOffUntil(lease, margin time.Duration) time.Time
}

// Reconciler is the unit availability controller.
type Reconciler struct {
	Client client.Client
	// APIReader reads past the cache: a pass about to record a decision
	// first checks that it decided on the object as it is now.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Grantor   *grantor.Grantor
	HoldOff   HoldOff
	Audit     *audit.Logger
	// Epochs is the cluster's epoch record: every new binding's epoch is
	// above it and reserved in it before the binding is written (L13).
	Epochs *EpochRecord
	// Timings are this grantor's: a Failover unit whose lease is below
	// their floor is reported (L14).
	Timings policy.GrantorTimings
	Clock   clock.PassiveClock
	// Actor names this process in audit lines.
	Actor string
	// Notify carries the grantor's observations into the queue.
	Notify chan event.GenericEvent
	// InsecurePlaintextLease builds runtime pods that serve their lease
	// endpoint over plain HTTP (--insecure-plaintext-lease).
	InsecurePlaintextLease bool
}

// SetupWithManager registers the controller. Pods and Nodes are watched
// through their caches; the grantor's observations arrive on Notify.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Notify == nil {
		r.Notify = make(chan event.GenericEvent, 1024)
	}
	nodeToUnits := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, node client.Object) []reconcile.Request {
		// A node becoming fit or unfit can change any Failover unit's
		// free targets; units are few.
		var list holdfastv1.UnitList
		if err := r.Client.List(ctx, &list); err != nil {
			return nil
		}
		var out []reconcile.Request
		for _, u := range list.Items {
			// A handed-over binding on the node waits on its runtimes report.
			if b := u.Status.RuntimeBinding; u.Spec.Availability.Mode == holdfastv1.Failover || (b != nil && b.HandOver != nil && b.Node == node.GetName()) {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: u.Namespace, Name: u.Name}})
			}
		}
		return out
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("units").
		// One per manager; tests run several managers in one process.
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		For(&holdfastv1.Unit{}).
		Owns(&corev1.Pod{}).
		Watches(&corev1.Node{}, nodeToUnits, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool { return nodeFitChanged(e.ObjectOld, e.ObjectNew) },
		})).
		WatchesRawSource(source.Channel(r.Notify, &handler.EnqueueRequestForObject{})).
		Complete(r)
}

// NotifyFunc is the grantor's Notify: it queues the unit, never blocking.
func (r *Reconciler) NotifyFunc() func(types.NamespacedName) {
	if r.Notify == nil {
		r.Notify = make(chan event.GenericEvent, 1024)
	}
	ch := r.Notify
	return func(u types.NamespacedName) {
		obj := &holdfastv1.Unit{}
		obj.Namespace, obj.Name = u.Namespace, u.Name
		select {
		case ch <- event.GenericEvent{Object: obj}:
		default:
			// The queue is full or nobody listens (standing down); the
			// periodic requeue catches up.
		}
	}
}

func nodeFitChanged(o, n client.Object) bool {
	a, ok1 := o.(*corev1.Node)
	b, ok2 := n.(*corev1.Node)
	if !ok1 || !ok2 {
		return true
	}
	return nodeFit(a) != nodeFit(b) || !equality.Semantic.DeepEqual(a.Labels, b.Labels) ||
		a.Annotations[holdfastv1.AnnotationRuntimes] != b.Annotations[holdfastv1.AnnotationRuntimes]
}

// Reconcile is one pass over a unit.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := klog.FromContext(ctx).WithValues("unit", req.NamespacedName)
	var u holdfastv1.Unit
	if err := r.Client.Get(ctx, req.NamespacedName, &u); err != nil {
		if apierrors.IsNotFound(err) {
			r.Grantor.Forget(req.NamespacedName)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	deleting := !u.DeletionTimestamp.IsZero()
	if deleting && !controllerutil.ContainsFinalizer(&u, holdfastv1.FinalizerRuntimeStopped) {
		r.Grantor.Forget(req.NamespacedName)
		return reconcile.Result{}, nil
	}
	if !deleting && !controllerutil.ContainsFinalizer(&u, holdfastv1.FinalizerRuntimeStopped) {
		// Before any binding is written: a Unit deleted from here on is
		// held until its runtime has provably stopped writing (L13).
		patch := client.MergeFromWithOptions(u.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(&u, holdfastv1.FinalizerRuntimeStopped)
		if err := r.Client.Patch(ctx, &u, patch); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				return reconcile.Result{Requeue: true}, nil
			}
			return reconcile.Result{}, fmt.Errorf("adding finalizer %s: %w", holdfastv1.FinalizerRuntimeStopped, err)
		}
	}

	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(u.Namespace), client.MatchingLabels{holdfastv1.LabelUnit: u.Name}); err != nil {
		return reconcile.Result{}, err
	}
	pod, err := r.ensurePods(ctx, &u, pods.Items)
	if err != nil {
		return reconcile.Result{}, err
	}
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes); err != nil {
		return reconcile.Result{}, err
	}
	warm, err := r.ensureWarmPods(ctx, &u, pods.Items, nodes.Items)
	if err != nil {
		return reconcile.Result{}, err
	}
	r.ensureLoop(&u, pod, false)
	r.ensureWatch(&u, pod)

	in, err := r.inputs(ctx, &u, pod)
	if err != nil {
		return reconcile.Result{}, err
	}
	in.Warm = warm
	plan := Decide(in)
	stops := func(p Plan) bool { return p.StopGranting || p.Rebind != nil }
	if stops(plan) {
		// No acknowledgement may arrive behind the decision: stop the old
		// binding's loop, then decide again on its final observation. A
		// hand-over records its start after the last grant went out.
		final, ok := r.Grantor.Pause(req.NamespacedName)
		in.Now = r.Clock.Now()
		in.Obs = nil
		if ok {
			in.Obs = &final
		}
		plan = Decide(in)
		if !stops(plan) {
			log.Info("Decision withdrawn: the runtime answered while it was taken")
			r.ensureLoop(&u, pod, false)
			return reconcile.Result{Requeue: true}, nil
		}
	}
	if plan.Record != nil && r.APIReader != nil {
		var fresh holdfastv1.Unit
		if err := r.APIReader.Get(ctx, req.NamespacedName, &fresh); err != nil {
			return reconcile.Result{}, err
		}
		if fresh.ResourceVersion != u.ResourceVersion {
			// The cache is behind: a decision taken on it would be
			// announced and then refused by the write.
			if stops(plan) {
				r.ensureLoop(&u, pod, false)
			}
			return reconcile.Result{RequeueAfter: 50 * time.Millisecond}, nil
		}
	}
	if e, ok := newEpoch(&u, plan); ok {
		// Reserved before any object names it: a crash after this burns
		// the epoch, never repeats it.
		if err := r.Epochs.Reserve(ctx, e); err != nil {
			if stops(plan) {
				r.ensureLoop(&u, pod, false)
			}
			log.Info("Deciding again: the epoch could not be reserved", "epoch", e, "err", err.Error())
			return reconcile.Result{RequeueAfter: 50 * time.Millisecond}, nil
		}
	}
	wrote := !equality.Semantic.DeepEqual(u.Status, plan.Status)
	if err := r.execute(ctx, &u, pod, plan); err != nil {
		if stops(plan) {
			r.ensureLoop(&u, pod, false)
		}
		if apierrors.IsConflict(err) {
			return reconcile.Result{Requeue: true}, nil
		}
		return reconcile.Result{}, err
	}
	if plan.Release {
		r.Grantor.Forget(req.NamespacedName)
		patch := client.MergeFromWithOptions(u.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.RemoveFinalizer(&u, holdfastv1.FinalizerRuntimeStopped)
		if err := r.Client.Patch(ctx, &u, patch); err != nil {
			if apierrors.IsNotFound(err) {
				return reconcile.Result{}, nil
			}
			if apierrors.IsConflict(err) {
				return reconcile.Result{Requeue: true}, nil
			}
			return reconcile.Result{}, fmt.Errorf("removing finalizer %s: %w", holdfastv1.FinalizerRuntimeStopped, err)
		}
		log.Info("Deletion completes: no runtime of the Unit can still write", "epoch", epochOf(&u))
		return reconcile.Result{}, nil
	}
	if plan.Rebind == nil {
		// The promise as written now: a longer lease is granted only from
		// here, after its record (L11).
		r.ensureLoop(&u, pod, wrote)
	}
	return reconcile.Result{RequeueAfter: plan.RequeueAfter}, nil
}

// newEpoch is the epoch of the binding a plan writes, when it writes a new
// one.
func newEpoch(u *holdfastv1.Unit, plan Plan) (int64, bool) {
	nb := plan.Status.RuntimeBinding
	if nb == nil {
		return 0, false
	}
	if b := u.Status.RuntimeBinding; b != nil && b.Epoch == nb.Epoch {
		return 0, false
	}
	return nb.Epoch, true
}

// ensurePods deletes the pods of earlier epochs, creates the current
// binding's pod when it is missing, and returns it (nil if none yet).
func (r *Reconciler) ensurePods(ctx context.Context, u *holdfastv1.Unit, pods []corev1.Pod) (*corev1.Pod, error) {
	b := u.Status.RuntimeBinding
	var cur *corev1.Pod
	for i := range pods {
		p := &pods[i]
		e, ok := PodEpoch(p)
		if !ok && promotedWarm(b, p) && p.DeletionTimestamp.IsZero() {
			// A promotion recorded, its label not yet (a crash between
			// the two steps): label it now.
			lp, err := r.promoteWarm(ctx, u, p)
			if err != nil {
				return nil, err
			}
			if lp != nil {
				cur = lp
			}
			continue
		}
		if b != nil && ok && e == b.Epoch && p.Name == b.Pod && (b.PodUID == "" || string(p.UID) == b.PodUID) {
			cur = p
			continue
		}
		if b != nil && ok && e < b.Epoch && p.DeletionTimestamp.IsZero() {
			// The node plugin stops its container at once; the object
			// stays until the kubelet confirms, so a partitioned node's
			// runtime stays in sight.
			if err := r.Client.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
				return nil, err
			}
			klog.FromContext(ctx).Info("Deleted the runtime pod of an earlier epoch", "pod", klog.KObj(p), "epoch", e, "current", b.Epoch)
		}
	}
	if b == nil || cur != nil {
		if cur != nil && !cur.DeletionTimestamp.IsZero() {
			return nil, nil
		}
		return cur, nil
	}
	if !u.DeletionTimestamp.IsZero() {
		// A deleted Unit's binding is being retired: no new process.
		return nil, nil
	}
	if b.HandOver != nil || (b.Promise != nil && len(policy.HandOverReasons(u, b.Promise)) > 0) {
		// The binding is handed over to a new process at a new epoch; its
		// own pod is not made again.
		return nil, nil
	}
	if b.PodUID != "" {
		// A promoted warm pod that is gone is not made again: the
		// binding names that pod alone, and it is a replacement that
		// never came up (L4).
		return nil, nil
	}
	pod := r.runtimePod(u, b)
	if err := r.Client.Create(ctx, pod); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, nil // the cache is behind; the watch brings it
		}
		return nil, fmt.Errorf("creating runtime pod %s: %w", pod.Name, err)
	}
	klog.FromContext(ctx).Info("Created runtime pod", "pod", klog.KObj(pod), "epoch", b.Epoch)
	return nil, nil
}

// runtimePod is the runtime pod of the binding b.
func (r *Reconciler) runtimePod(u *holdfastv1.Unit, b *holdfastv1.RuntimeBinding) *corev1.Pod {
	pod := RuntimePod(u, b.Epoch, placementFor(u, b))
	if r.InsecurePlaintextLease {
		PlaintextLease(pod)
	}
	return pod
}

// placementFor: a first binding goes to the primary selector; a binding
// whose node is recorded stays there; a person's failover goes where they
// asked; an automatic re-bind is the scheduler's choice among the targets.
func placementFor(u *holdfastv1.Unit, b *holdfastv1.RuntimeBinding) Placement {
	switch {
	case b.Node != "":
		return Placement{Node: b.Node}
	case b.Origin == holdfastv1.OriginManual:
		if t := u.Annotations[holdfastv1.AnnotationFailoverTo]; t != "" && RequestKey(u) == b.RequestID {
			return Placement{Node: t}
		}
		return Placement{}
	case b.Origin == holdfastv1.OriginAutomatic:
		return Placement{}
	default:
		return Placement{PrimarySelector: true}
	}
}

// ensureLoop starts, retargets or stops the unit's renewal loop. Only
// written is the status this process has just written: a status read from
// the cache may be older than the record, so from it a running loop's lease
// is never raised (L11: never a grant longer than the record).
func (r *Reconciler) ensureLoop(u *holdfastv1.Unit, pod *corev1.Pod, written bool) {
	key := types.NamespacedName{Namespace: u.Namespace, Name: u.Name}
	if t, ok := LeaseTargetFor(u, pod); ok {
		if obs, running := r.Grantor.Observe(key); running && !written && obs.Target.Epoch == t.Epoch && obs.Target.Duration < t.Duration {
			t.Duration = obs.Target.Duration
		}
		r.Grantor.Ensure(t)
		return
	}
	if obs, ok := r.Grantor.Observe(key); ok {
		b := u.Status.RuntimeBinding
		if b != nil && b.HandOver != nil && obs.Target.Epoch == b.Epoch {
			// Handed over: no grant, and the observation stays for the
			// hand-over to read.
			r.Grantor.Pause(key)
			return
		}
		if b == nil || obs.Target.Epoch != b.Epoch || pod == nil || b.Promise == nil || b.Promise.Mode != holdfastv1.Failover {
			// Nothing we know is at that address any more: stop granting.
			r.Grantor.Forget(key)
		}
	}
}

func (r *Reconciler) inputs(ctx context.Context, u *holdfastv1.Unit, pod *corev1.Pod) (Inputs, error) {
	in := Inputs{Unit: u, Pod: pod, Now: r.Clock.Now(), Timings: r.Timings}
	last, err := r.Epochs.Last(ctx)
	if err != nil {
		return in, err
	}
	in.EpochFloor = policy.EpochFloor(last, in.Now)
	a := &u.Spec.Availability
	if b := u.Status.RuntimeBinding; b != nil {
		if r.HoldOff != nil {
			// The hold-off covers what a predecessor may have granted: the
			// recorded terms, not the Unit's (L11).
			t := termsOf(u, b)
			in.HoldOffUntil = r.HoldOff.HoldOffUntil(t.lease, t.margin)
		}
		if obs, ok := r.Grantor.Observe(types.NamespacedName{Namespace: u.Namespace, Name: u.Name}); ok && obs.Target.Epoch == b.Epoch {
			in.Obs = &obs
		}
		in.Running = policy.IncarnationOf(pod)
		if _, ok := u.Annotations[holdfastv1.AnnotationFailoverConfirmFenced]; ok {
			running, err := r.runningPast(ctx, u.Namespace, b.Pod)
			if err != nil {
				return in, err
			}
			in.Running = running
		}
		if b.HandOver != nil {
			gone, err := r.podGone(ctx, u.Namespace, b.Pod)
			if err != nil {
				return in, err
			}
			in.PodGone = gone
		}
	}
	in.Devices = r.deviceReport(u, in.Obs)
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes); err != nil {
		return in, err
	}
	names := map[string]bool{}
	for _, n := range nodes.Items {
		names[n.Name] = true
		if b := u.Status.RuntimeBinding; b != nil && b.HandOver != nil && b.Node == n.Name {
			in.NodeRuntimes = holdfastv1.RuntimesReportOf(n.Annotations)
		}
	}
	in.NodeExists = func(n string) bool { return names[n] }
	if a.Mode == holdfastv1.Failover && u.Status.RuntimeBinding != nil {
		var others []corev1.Pod
		if a.Colocation == holdfastv1.ColocationRefuse {
			var all corev1.PodList
			if err := r.Client.List(ctx, &all, client.HasLabels{holdfastv1.LabelUnit}); err != nil {
				return in, err
			}
			others = all.Items
		}
		in.FreeTargets, in.Unavailable = TargetAvailability(u, nodes.Items, others)
	}
	return in, nil
}

// podGone reads past the cache whether the pod is gone: a hand-over starts
// a new writer on it, so a cache that has not seen the pod yet must not
// pass for its absence.
func (r *Reconciler) podGone(ctx context.Context, ns, name string) (bool, error) {
	_, err := r.podPast(ctx, ns, name)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return false, err
}

// runningPast is the process of the runtime pod ns/name as the apiserver
// has it, read past the cache (nil: no such pod): a fence confirmation
// names one process, and a cache a restart behind would take it for the
// one the kubelet started since.
func (r *Reconciler) runningPast(ctx context.Context, ns, name string) (*holdfastv1.RuntimeIncarnation, error) {
	if name == "" {
		return nil, nil
	}
	p, err := r.podPast(ctx, ns, name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return policy.IncarnationOf(p), nil
}

func (r *Reconciler) podPast(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	var p corev1.Pod
	if err := reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// FreeTargets are the eligible standbys fit to take the unit now: named by
// its targets (policy.EligibleTarget, the webhook's own rule), Ready, not
// cordoned, not the node it is leaving, and, under colocation Refuse,
// hosting no other unit's runtime (policy.HostsOtherRuntime, the
// scheduler's own rule). Sorted.
func FreeTargets(u *holdfastv1.Unit, nodes []corev1.Node, runtimePods []corev1.Pod) []string {
	free, _ := TargetAvailability(u, nodes, runtimePods)
	return free
}

// TargetAvailability is FreeTargets, and for every other eligible standby
// why it is not free now.
func TargetAvailability(u *holdfastv1.Unit, nodes []corev1.Node, runtimePods []corev1.Pod) (free []string, unavailable map[string]string) {
	a := &u.Spec.Availability
	b := u.Status.RuntimeBinding
	busy := map[string]bool{}
	key := types.NamespacedName{Namespace: u.Namespace, Name: u.Name}
	for i := range runtimePods {
		if p := &runtimePods[i]; policy.HostsOtherRuntime(p, key) {
			busy[p.Spec.NodeName] = true
		}
	}
	unavailable = map[string]string{}
	for i := range nodes {
		n := &nodes[i]
		if !policy.EligibleTarget(u, n) {
			continue
		}
		switch {
		case b != nil && n.Name == b.Node:
			unavailable[n.Name] = "the node the current binding is on"
		case !policy.NodeReady(n):
			unavailable[n.Name] = "NotReady"
		case n.Spec.Unschedulable:
			unavailable[n.Name] = "cordoned"
		case a.Colocation == holdfastv1.ColocationRefuse && busy[n.Name]:
			unavailable[n.Name] = "hosts another unit's runtime (colocation Refuse)"
		default:
			free = append(free, n.Name)
		}
	}
	sort.Strings(free)
	return free, unavailable
}

// nodeFit: Ready and not cordoned.
func nodeFit(n *corev1.Node) bool {
	return !n.Spec.Unschedulable && policy.NodeReady(n)
}

// execute carries out a plan: the Event, then the status (the conditions),
// then the metric, then the audit line; then the pods and the request.
func (r *Reconciler) execute(ctx context.Context, u *holdfastv1.Unit, pod *corev1.Pod, plan Plan) error {
	log := klog.FromContext(ctx)
	rec := plan.Record
	if rec != nil {
		r.Recorder.Eventf(u, nil, rec.Type, rec.Reason, rec.Reason, "%s", truncate(rec.Message, 1000))
	}
	if !equality.Semantic.DeepEqual(u.Status, plan.Status) {
		before := u.DeepCopy()
		u.Status = plan.Status
		if err := r.Client.Status().Update(ctx, u); err != nil {
			u.Status = before.Status
			return err
		}
	}
	if rec != nil {
		if rec.count != nil {
			rec.count()
		}
		actor := r.Actor
		if rec.Manual {
			// Only admission sees the requester: the webhook's record of
			// the request names them, and this line refers to it.
			actor = "person (request " + rec.RequestID + ", requester in the webhook's audit record)"
			if rec.RequestID == "" {
				actor = "person (no " + holdfastv1.AnnotationRequestID + "; requester in the webhook's audit record of this unit's annotation change)"
			}
		}
		if err := r.Audit.Write(audit.Record{
			Object: audit.Unit(u.Namespace, u.Name), Epoch: rec.Epoch, Node: rec.Node, Verdict: rec.Verdict,
			Actor: actor, RequestID: rec.RequestID, Reason: rec.Reason, Message: rec.Message,
		}); err != nil {
			log.Error(err, "Writing the audit line")
		}
		log.Info(rec.Message, "reason", rec.Reason, "epoch", rec.Epoch)
	}
	if plan.DeletePod && pod != nil {
		if err := r.Client.Delete(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting runtime pod %s for the hand-over: %w", pod.Name, err)
		}
		log.Info("Deleted the runtime pod for a hand-over", "pod", klog.KObj(pod))
	}
	if plan.Rebind != nil {
		key := types.NamespacedName{Namespace: u.Namespace, Name: u.Name}
		r.Grantor.Forget(key)
		if pod != nil {
			if err := r.Client.Delete(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
				log.Error(err, "Deleting the runtime pod of the previous epoch", "pod", klog.KObj(pod))
			}
		}
		if b := u.Status.RuntimeBinding; b.PodUID != "" {
			if err := r.labelPromoted(ctx, u); err != nil {
				return err
			}
		} else {
			np := r.runtimePod(u, b)
			if err := r.Client.Create(ctx, np); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating runtime pod %s: %w", np.Name, err)
			}
			log.Info("Created runtime pod", "pod", klog.KObj(np), "epoch", b.Epoch, "origin", b.Origin)
		}
	}
	if plan.ConsumeRequest || plan.ConsumeConfirm {
		patch := client.MergeFrom(u.DeepCopy())
		if plan.ConsumeRequest {
			delete(u.Annotations, holdfastv1.AnnotationFailoverTo)
		}
		delete(u.Annotations, holdfastv1.AnnotationFailoverConfirmFenced)
		delete(u.Annotations, holdfastv1.AnnotationFailoverConfirmEpoch)
		delete(u.Annotations, holdfastv1.AnnotationFailoverConfirmIncarnation)
		if err := r.Client.Patch(ctx, u, patch); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("removing the carried-out failover request: %w", err)
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

func epochOf(u *holdfastv1.Unit) int64 {
	if b := u.Status.RuntimeBinding; b != nil {
		return b.Epoch
	}
	return 0
}
