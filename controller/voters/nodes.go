package voters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

// ErrBudgetRefused: a disruption budget allows no eviction now (another
// replica not ready yet, or its status not computed). It is the cluster's
// state, looked at again on a later pass, not a fault.
var ErrBudgetRefused = errors.New("a disruption budget refuses it now")

// EvictTimeout bounds one Evict action, all its pods.
const EvictTimeout = 5 * time.Second

// budgetRefused: the eviction a failed because a disruption budget allows
// none now.
func budgetRefused(a *Action, err error) bool {
	return a.Kind == Evict && errors.Is(err, ErrBudgetRefused)
}

// Nodes writes what the voter controller changes on Nodes and pods.
type Nodes struct {
	Client client.Client
	// Reader lists a node's pods (uncached: a drain is judged from the
	// pods as they are).
	Reader client.Reader
}

// Cordon marks the node unschedulable and taints it TaintVoterSwap=<swap
// ID>:NoSchedule in one write, conditional on the version read: the taint
// list is replaced whole, so a concurrent change must not be lost.
func (w *Nodes) Cordon(ctx context.Context, name, swapID string) error {
	n := &corev1.Node{}
	if err := w.Client.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
		return err
	}
	patch := client.MergeFromWithOptions(n.DeepCopy(), client.MergeFromWithOptimisticLock{})
	n.Spec.Unschedulable = true
	var taints []corev1.Taint
	for _, t := range n.Spec.Taints {
		if t.Key != holdfastv1.TaintVoterSwap {
			taints = append(taints, t)
		}
	}
	n.Spec.Taints = append(taints, corev1.Taint{Key: holdfastv1.TaintVoterSwap, Value: swapID, Effect: corev1.TaintEffectNoSchedule})
	return w.Client.Patch(ctx, n, patch)
}

// Uncordon removes the swap's taint and makes the node schedulable again.
// A node without the taint is left as it is: a swap uncordons only what it
// cordoned.
func (w *Nodes) Uncordon(ctx context.Context, name string) error {
	n := &corev1.Node{}
	if err := w.Client.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
		return err
	}
	var taints []corev1.Taint
	found := false
	for _, t := range n.Spec.Taints {
		if t.Key == holdfastv1.TaintVoterSwap {
			found = true
			continue
		}
		taints = append(taints, t)
	}
	if !found {
		return nil
	}
	patch := client.MergeFromWithOptions(n.DeepCopy(), client.MergeFromWithOptimisticLock{})
	n.Spec.Taints = taints
	n.Spec.Unschedulable = false
	return w.Client.Patch(ctx, n, patch)
}

// SetRoleStep sets the role step of a swap with the desired role it goes
// with (policy's role-step table), and the members to join for a promote,
// for the node's plugin. role-join is removed for any other step.
func (w *Nodes) SetRoleStep(ctx context.Context, name, swapID, step, join string) error {
	desired, ok := policy.RoleForStep(step)
	if !ok {
		return fmt.Errorf("node %s: role step %q is not one of %v", name, step, policy.RoleSteps())
	}
	var joinVal *string
	if join != "" {
		joinVal = &join
	}
	return w.patchMeta(ctx, name, map[string]*string{holdfastv1.LabelDesiredRole: &desired}, map[string]*string{
		holdfastv1.AnnotationRoleSwap: &swapID,
		holdfastv1.AnnotationRoleStep: &step,
		holdfastv1.AnnotationRoleJoin: joinVal,
	})
}

// ClearRoleStep removes the role step annotations; the desired role stays.
func (w *Nodes) ClearRoleStep(ctx context.Context, name string) error {
	return w.patchMeta(ctx, name, nil, map[string]*string{
		holdfastv1.AnnotationRoleSwap: nil, holdfastv1.AnnotationRoleStep: nil, holdfastv1.AnnotationRoleJoin: nil,
	})
}

// SetEtcdLabel labels a new voter's node with the etcd role.
func (w *Nodes) SetEtcdLabel(ctx context.Context, name string) error {
	v := "true"
	return w.patchMeta(ctx, name, map[string]*string{holdfastv1.LabelEtcdRole: &v}, nil)
}

// ClearRoleLabels removes the etcd, control-plane and master role labels and k3s's
// etcd annotations of a node whose member is gone (the webhook refuses it
// while VoterPolicy status still lists the member).
func (w *Nodes) ClearRoleLabels(ctx context.Context, name string) error {
	n := &corev1.Node{}
	if err := w.Client.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
		return err
	}
	ann := map[string]*string{}
	for k := range n.Annotations {
		if strings.HasPrefix(k, etcdAnnotationPrefix) {
			ann[k] = nil
		}
	}
	return w.patchMeta(ctx, name, map[string]*string{holdfastv1.LabelEtcdRole: nil, holdfastv1.LabelControlPlaneRole: nil, holdfastv1.LabelMasterRole: nil}, ann)
}

// patchMeta merge-patches labels and annotations (nil removes a key).
func (w *Nodes) patchMeta(ctx context.Context, name string, labels, ann map[string]*string) error {
	meta := map[string]any{}
	if len(labels) > 0 {
		meta["labels"] = labels
	}
	if len(ann) > 0 {
		meta["annotations"] = ann
	}
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	return w.Client.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.RawPatch(types.MergePatchType, body))
}

// PodsOn lists the pods bound to a node.
func (w *Nodes) PodsOn(ctx context.Context, node string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := w.Reader.List(ctx, &pods, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("spec.nodeName", node)}); err != nil {
		return nil, err
	}
	return pods.Items, nil
}

// Evict evicts pods through the Eviction API, so PodDisruptionBudgets hold;
// a budget that refuses now is tried again on a later pass.
func (w *Nodes) Evict(ctx context.Context, pods []types.NamespacedName) error {
	// A budget the server has not processed yet answers "try again in
	// 10 s", which the client obeys up to ten times: bounded, so a pass
	// never holds off the next one (and the swap Lease's renewal) for long.
	ctx, cancel := context.WithTimeout(ctx, EvictTimeout)
	defer cancel()
	var errs []error
	for _, p := range pods {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}
		err := w.Client.SubResource("eviction").Create(ctx, pod, ev)
		switch {
		case err == nil, apierrors.IsNotFound(err):
		case apierrors.IsTooManyRequests(err):
			errs = append(errs, fmt.Errorf("evicting %s: %w: %w", p, ErrBudgetRefused, err))
		default:
			errs = append(errs, fmt.Errorf("evicting %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}
