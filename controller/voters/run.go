package voters

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

// ElectionID is the voter controller's own leader-election Lease (in the
// release namespace), apart from the grantor's.
const ElectionID = "holdfast-voters"

// passKey is the one request every event maps to: a pass sees everything.
var passKey = reconcile.Request{NamespacedName: types.NamespacedName{Name: "voters"}}

// Scheme holds the kinds the voter controller reads and writes.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = holdfastv1.AddToScheme(s)
	return s
}

// CacheOptions keep the cache to what the passes read through it: Nodes,
// the voter-candidate pods, and the swap Lease by name.
func CacheOptions() cache.Options {
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{holdfastv1.LabelRole: holdfastv1.RoleVoterCandidate})},
		&coordinationv1.Lease{}: {
			Namespaces: map[string]cache.Config{holdfastv1.SwapLeaseNamespace: {}},
			Field:      fields.OneTermEqualSelector("metadata.name", holdfastv1.SwapLeaseName),
		},
	}}
}

// SetupWithManager runs a pass on every change that can matter and every
// RunningEvery / IdleEvery.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.defaults()
	toPass := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{passKey}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("voters").
		WithOptions(r.controllerOptions()).
		Watches(&holdfastv1.VoterSwap{}, toPass).
		Watches(&holdfastv1.VoterPolicy{}, toPass, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Node{}, toPass, builder.WithPredicates(predicate.Funcs{UpdateFunc: nodeMatters})).
		Watches(&corev1.Pod{}, toPass).
		Watches(&coordinationv1.Lease{}, toPass, builder.WithPredicates(predicate.Funcs{UpdateFunc: leaseMatters})).
		Complete(r)
}

// controllerOptions: one pass at a time; a failed pass is tried again with
// a backoff that never exceeds RunningEvery, since passes renew the swap
// Lease and a backoff past its duration would let it lapse mid-swap.
func (r *Reconciler) controllerOptions() controller.Options {
	return controller.Options{MaxConcurrentReconciles: 1, SkipNameValidation: new(true),
		RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, r.RunningEvery)}
}

// nodeMatters: a Node change a pass acts on. A bare heartbeat matters only
// on a Node that holds a swap's role step: the swap waits for a Ready
// heartbeat after its host's report (readyAfter), and goes on at that
// heartbeat rather than on the next RunningEvery.
func nodeMatters(e event.UpdateEvent) bool {
	a, ok1 := e.ObjectOld.(*corev1.Node)
	b, ok2 := e.ObjectNew.(*corev1.Node)
	if !ok1 || !ok2 {
		return true
	}
	if b.Annotations[holdfastv1.AnnotationRoleStep] != "" && !readyHeartbeat(a).Equal(readyHeartbeat(b)) {
		return true
	}
	return !equality.Semantic.DeepEqual(a.Labels, b.Labels) || !equality.Semantic.DeepEqual(a.Annotations, b.Annotations) ||
		!equality.Semantic.DeepEqual(a.Spec, b.Spec) || policy.NodeReady(a) != policy.NodeReady(b)
}

// leaseMatters: a change of holder or swap, not a renewal.
func leaseMatters(e event.UpdateEvent) bool {
	a, ok1 := e.ObjectOld.(*coordinationv1.Lease)
	b, ok2 := e.ObjectNew.(*coordinationv1.Lease)
	if !ok1 || !ok2 {
		return true
	}
	return policy.SwapLeaseHolder(a) != policy.SwapLeaseHolder(b) || !equality.Semantic.DeepEqual(a.Annotations, b.Annotations)
}
