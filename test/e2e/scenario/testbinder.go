package scenario

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/units"
)

// TestOnlyBinder stands in for holdfast-scheduler (issue 4) until it lands
// on main: it places the pods that name it, with UnitPlacement's rules cut
// to what the drills use, and binds them the way its PreBind does: the node
// is first recorded in the Unit's binding with an optimistic-concurrency
// write, then the pod is bound. It is test-only and deliberately small:
// it is no scheduler (no resources, no scoring), and a drill asserting on
// placement asserts on holdfast's rules, which this applies:
//   - a pod whose epoch is not the unit's binding epoch is never placed;
//   - a pod pinned to a node (a person's failover) goes there;
//   - the first binding goes to a node matching the pod's nodeSelector;
//   - a re-bind goes to a target that is neither the node being left
//     (previousNode) nor in unsettledRebinds;
//   - never to a cordoned node. (Readiness is not judged: with no
//     controller-manager nothing marks a cut node NotReady.)
//
// Candidates are taken in the cluster's node order, so placement is
// deterministic.
type TestOnlyBinder struct {
	c     client.Client
	nodes []string
	logf  func(string, ...any)

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// StartTestOnlyBinder starts binding every pending pod of
// holdfast-scheduler, polling every 200ms, until Stop.
func StartTestOnlyBinder(c client.Client, nodes []string, logf func(string, ...any)) *TestOnlyBinder {
	b := &TestOnlyBinder{c: c, nodes: nodes, logf: logf, stop: make(chan struct{}), done: make(chan struct{})}
	go b.run()
	return b
}

// Stop stops it and waits for its loop to end.
func (b *TestOnlyBinder) Stop() {
	b.once.Do(func() { close(b.stop) })
	<-b.done
}

func (b *TestOnlyBinder) run() {
	defer close(b.done)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		b.pass(ctx)
		cancel()
	}
}

func (b *TestOnlyBinder) pass(ctx context.Context) {
	var pods corev1.PodList
	if err := b.c.List(ctx, &pods, client.MatchingFieldsSelector{Selector: fields.AndSelectors(
		fields.OneTermEqualSelector("spec.schedulerName", holdfastv1.SchedulerName),
		fields.OneTermEqualSelector("spec.nodeName", ""))}); err != nil {
		return
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !pod.DeletionTimestamp.IsZero() {
			continue
		}
		node, err := b.place(ctx, pod)
		if err != nil {
			b.logf("test-only binder: %s/%s: %v", pod.Namespace, pod.Name, err)
			continue
		}
		if node != "" {
			b.logf("test-only binder: bound %s/%s to %s", pod.Namespace, pod.Name, node)
		}
	}
}

// place records and binds one pod; "" with no error means not now.
func (b *TestOnlyBinder) place(ctx context.Context, pod *corev1.Pod) (string, error) {
	epoch, ok := units.PodEpoch(pod)
	unitName := pod.Labels[holdfastv1.LabelUnit]
	if !ok || unitName == "" {
		return "", nil
	}
	var u holdfastv1.Unit
	if err := b.c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: unitName}, &u); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	bd := u.Status.RuntimeBinding
	if bd == nil || bd.Epoch != epoch {
		return "", nil // not the unit's authorised epoch: unschedulable
	}
	node := bd.Node
	if node == "" {
		var err error
		if node, err = b.choose(ctx, pod, &u); err != nil || node == "" {
			return "", err
		}
		// PreBind: the Unit's resourceVersion makes this write fail if
		// anything changed the binding since it was read.
		now := metav1.Now()
		bd.Node, bd.BoundAt = node, &now
		if err := b.c.Status().Update(ctx, &u); err != nil {
			if apierrors.IsConflict(err) {
				return "", nil
			}
			return "", fmt.Errorf("recording node %s: %w", node, err)
		}
	}
	err := b.c.SubResource("binding").Create(ctx, pod, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	})
	if err != nil {
		return "", fmt.Errorf("binding to %s: %w", node, err)
	}
	return node, nil
}

func (b *TestOnlyBinder) choose(ctx context.Context, pod *corev1.Pod, u *holdfastv1.Unit) (string, error) {
	bd := u.Status.RuntimeBinding
	pinned := pinnedNode(pod)
	rebind := bd.Origin == holdfastv1.OriginAutomatic || (bd.Origin == "" && bd.Epoch > 1 && pinned == "")
	var targets *holdfastv1.FailoverTargets
	if u.Spec.Availability.Targets != nil {
		targets = u.Spec.Availability.Targets
	}
	for _, name := range b.nodes {
		var n corev1.Node
		if err := b.c.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
			continue
		}
		if n.Spec.Unschedulable {
			continue
		}
		if pinned != "" && name != pinned {
			continue
		}
		if !labels.SelectorFromSet(pod.Spec.NodeSelector).Matches(labels.Set(n.Labels)) {
			continue
		}
		if rebind {
			if name == bd.PreviousNode || slices.Contains(bd.UnsettledRebinds, name) || !isTarget(targets, &n) {
				continue
			}
		}
		return name, nil
	}
	return "", nil
}

func isTarget(t *holdfastv1.FailoverTargets, n *corev1.Node) bool {
	if t == nil {
		return false
	}
	if slices.Contains(t.Nodes, n.Name) {
		return true
	}
	if t.Selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(t.Selector)
		return err == nil && sel.Matches(labels.Set(n.Labels))
	}
	return false
}

// pinnedNode is the node a pod's required affinity names by metadata.name.
func pinnedNode(pod *corev1.Pod) string {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
}
