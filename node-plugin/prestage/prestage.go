// Package prestage pulls, through the CRI image service, the runtime image
// of every unit that names this node as a failover target, so a re-bind
// onto this node never waits on an image pull (docs/design.md §5).
package prestage

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// Images is the part of the CRI image service pre-staging uses
// (k8s.io/cri-api ImageManagerService satisfies it).
type Images interface {
	ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error)
	PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, podSandboxConfig *runtimeapi.PodSandboxConfig) (string, error)
}

// Reconciler pre-stages one unit's runtime image.
type Reconciler struct {
	Client   client.Client
	NodeName string
	Images   Images
	// Recheck is how often a staged image is checked again (the kubelet's
	// image GC may remove it).
	Recheck time.Duration
}

// SetupWithManager watches Units, and this Node's labels (a selector
// target may start or stop matching).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Recheck == 0 {
		r.Recheck = 10 * time.Minute
	}
	return ctrl.NewControllerManagedBy(mgr).Named("prestage").
		For(&holdfastv1.Unit{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.allUnits)).
		Complete(r)
}

func (r *Reconciler) allUnits(ctx context.Context, o client.Object) []reconcile.Request {
	if o.GetName() != r.NodeName {
		return nil
	}
	var list holdfastv1.UnitList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, u := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: u.Namespace, Name: u.Name}})
	}
	return reqs
}

// Targets says whether the unit names node as a failover target, by name
// or by its selector.
func Targets(u *holdfastv1.Unit, node *corev1.Node) (bool, error) {
	t := u.Spec.Availability.Targets
	if t == nil {
		return false, nil
	}
	if slices.Contains(t.Nodes, node.Name) {
		return true, nil
	}
	if t.Selector == nil {
		return false, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(t.Selector)
	if err != nil {
		return false, fmt.Errorf("spec.availability.targets.selector: %w", err)
	}
	return !sel.Empty() && sel.Matches(labels.Set(node.Labels)), nil
}

// Reconcile pulls the unit's runtime image when this node is one of its
// targets and the image is not present.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := klog.FromContext(ctx)
	u := &holdfastv1.Unit{}
	if err := r.Client.Get(ctx, req.NamespacedName, u); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: r.NodeName}, node); err != nil {
		return ctrl.Result{}, err
	}
	ok, err := Targets(u, node)
	if err != nil {
		log.Error(err, "Unit has an invalid target selector", "unit", klog.KObj(u))
		return ctrl.Result{}, nil
	}
	if !ok || u.Spec.Runtime.Image == "" {
		return ctrl.Result{}, nil
	}
	spec := &runtimeapi.ImageSpec{Image: u.Spec.Runtime.Image}
	st, err := r.Images.ImageStatus(ctx, spec, false)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("image status of %s: %w", spec.Image, err)
	}
	if st.Image != nil && u.Spec.Runtime.ImagePullPolicy != corev1.PullAlways {
		return ctrl.Result{RequeueAfter: r.Recheck}, nil
	}
	start := time.Now()
	ref, err := r.Images.PullImage(ctx, spec, nil, nil)
	if err != nil {
		pulls.WithLabelValues("failed").Inc()
		return ctrl.Result{}, fmt.Errorf("pre-staging %s for unit %s: %w", spec.Image, req.NamespacedName, err)
	}
	pulls.WithLabelValues("pulled").Inc()
	log.Info("Pre-staged runtime image", "unit", klog.KObj(u), "image", spec.Image, "ref", ref, "took", time.Since(start).Round(time.Millisecond))
	return ctrl.Result{RequeueAfter: r.Recheck}, nil
}
