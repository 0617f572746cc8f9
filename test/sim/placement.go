package sim

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/units"
	"github.com/holdfast-io/holdfast/policy"
)

// The scheduler and kube-controller-manager's node lifecycle, simulated at
// their contracts on the apiserver's machine.

const (
	// nodeMonitorGrace: a node whose kubelet has not been heard for this
	// long is NotReady (kube-controller-manager's default).
	nodeMonitorGrace = 40 * time.Second
	heartbeatEvery   = 10 * time.Second
)

// placementDue runs a scheduling pass shortly after a pod appears.
func (s *Sim) placementDue(obj client.Object, deleted bool) {
	if pod, ok := obj.(*corev1.Pod); ok && !deleted && pod.Spec.NodeName == "" {
		s.after(s.api.p, 20*time.Millisecond, s.api.schedule)
	}
}

// schedule places every unplaced runtime pod as holdfast-scheduler's
// UnitPlacement does: only the authorised epoch; a first binding on a
// primary, a re-bind on a target, never the node being left, never a
// standby already tried on the automatic path, never a NotReady or
// cordoned node; the node recorded in the binding with an update
// conditioned on the Unit's resourceVersion, then the pod bound.
func (a *apiserver) schedule() {
	for _, o := range a.st.sorted("Pod", "", nil) {
		pod := o.(*corev1.Pod)
		if pod.Spec.SchedulerName != holdfastv1.SchedulerName || pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
			continue
		}
		uo, ok := a.st.get("Unit", pod.Namespace, pod.Labels[holdfastv1.LabelUnit])
		if !ok {
			continue
		}
		u := uo.(*holdfastv1.Unit)
		epoch, ok := units.PodEpoch(pod)
		b := u.Status.RuntimeBinding
		if !ok || b == nil || b.Epoch != epoch || (b.Pod != "" && b.Pod != pod.Name) {
			continue
		}
		if b.Origin == holdfastv1.OriginAutomatic && u.Spec.Availability.Mode != holdfastv1.Failover {
			continue
		}
		var fit []string
		primary, target := policy.PrimaryMatcher(u), policy.TargetMatcher(u)
		for _, no := range a.st.sorted("Node", "", nil) {
			n := no.(*corev1.Node)
			switch {
			case !policy.NodeReady(n) || n.Spec.Unschedulable:
				continue
			case b.Node != "":
				if n.Name != b.Node {
					continue
				}
			case n.Name == b.PreviousNode:
				continue
			case b.Origin == holdfastv1.OriginManual:
				if !target(n) || !pinnedTo(pod, n.Name) {
					continue
				}
			case b.Origin == holdfastv1.OriginAutomatic:
				if !target(n) || slices.Contains(b.UnsettledRebinds, n.Name) {
					continue
				}
			default:
				if !primary(n) {
					continue
				}
			}
			fit = append(fit, n.Name)
		}
		if len(fit) == 0 {
			continue
		}
		node := fit[a.s.rng.IntN(len(fit))]
		if b.Node == "" {
			nu := u.DeepCopy()
			nb := nu.Status.RuntimeBinding
			nb.Node, nb.Pod = node, pod.Name
			t := metav1.NewTime(a.now())
			nb.BoundAt = &t
			if _, err := a.update(user{name: a.opts.Scheduler}, nu, "status"); err != nil {
				continue
			}
		}
		np := pod.DeepCopy()
		np.Spec.NodeName = node
		a.store(np)
		a.s.log(a.p.host, u.Namespace+"/"+u.Name, kState, "scheduler: pod %s placed on %s", pod.Name, node)
	}
}

func pinnedTo(pod *corev1.Pod, node string) bool {
	af := pod.Spec.Affinity
	if af == nil || af.NodeAffinity == nil || af.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	for _, t := range af.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range t.MatchFields {
			if f.Key == "metadata.name" && slices.Contains(f.Values, node) {
				return true
			}
		}
	}
	return false
}

// lifecycle marks a node NotReady when its kubelet has gone unheard past
// the grace, and Ready again when it is heard (kube-controller-manager).
func (a *apiserver) lifecycle() {
	now := a.now()
	for _, no := range a.st.sorted("Node", "", nil) {
		n := no.(*corev1.Node)
		ready := now.Sub(a.heartbeats[n.Name]) <= nodeMonitorGrace
		a.setReady(n, ready)
	}
	a.s.after(a.p, 5*time.Second, a.lifecycle)
}

// heartbeat is a kubelet's node status update, on arrival.
func (a *apiserver) heartbeat(node string) {
	a.heartbeats[node] = a.now()
	if no, ok := a.st.get("Node", "", node); ok {
		a.setReady(no.(*corev1.Node), true)
	}
}

func (a *apiserver) setReady(n *corev1.Node, ready bool) {
	want := corev1.ConditionTrue
	if !ready {
		want = corev1.ConditionUnknown
	}
	if policy.NodeReady(n) == ready {
		return
	}
	nn := n.DeepCopy()
	for i := range nn.Status.Conditions {
		if nn.Status.Conditions[i].Type == corev1.NodeReady {
			nn.Status.Conditions[i].Status = want
			nn.Status.Conditions[i].LastTransitionTime = metav1.NewTime(a.now())
		}
	}
	a.store(nn)
	a.s.log(a.p.host, "", kState, "node lifecycle: %s Ready=%s", n.Name, want)
}
