package policy

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// RuntimeUnit names the unit whose runtime pod this is (its
// holdfast.io/unit label), if it is one.
func RuntimeUnit(pod *corev1.Pod) (types.NamespacedName, bool) {
	name, ok := pod.Labels[holdfastv1.LabelUnit]
	if !ok {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: pod.Namespace, Name: name}, true
}

// HostsOtherRuntime reports whether pod makes its node a standby that
// already hosts a runtime of a unit other than unit (colocation): a runtime
// pod of another unit bound to the node, terminating or not, since a
// terminating runtime may still write, and a warm standby pod of another
// unit, which any grant may make a writer there. The controller's free standbys and
// StandbyColocation's filter both judge by it, so the controller never
// re-binds to a standby the scheduler refuses.
func HostsOtherRuntime(pod *corev1.Pod, unit types.NamespacedName) bool {
	other, ok := RuntimeUnit(pod)
	return ok && other != unit && pod.Spec.NodeName != ""
}

// WarmStandbyNode names the standby node a warm standby pod is kept on (its
// holdfast.io/warm-standby label), if pod is one: a runtime pod of its unit
// that holds no epoch until a binding promotes it (docs/design.md §3, Warm
// standby).
func WarmStandbyNode(pod *corev1.Pod) (string, bool) {
	if _, ok := RuntimeUnit(pod); !ok {
		return "", false
	}
	node, ok := pod.Labels[holdfastv1.LabelWarmStandby]
	return node, ok
}

// WarmStandbyRefusal says why node may not keep a warm standby pod of u, or
// "" when it may: u is a Failover unit with spec.availability.warmStandby,
// node is one of its designated standbys, and it is not the node u is bound
// to (where its runtime already runs). The webhook admits a warm pod and
// UnitPlacement places one by it.
func WarmStandbyRefusal(u *holdfastv1.Unit, node *corev1.Node) string {
	a := &u.Spec.Availability
	switch {
	case a.Mode != holdfastv1.Failover || !a.WarmStandby:
		return fmt.Sprintf("unit %s keeps no warm standby: set spec.availability.warmStandby on a Failover unit", u.Name)
	case !EligibleTarget(u, node):
		return fmt.Sprintf("node %s is not a designated standby of unit %s (spec.availability.targets)", node.Name, u.Name)
	case u.Status.RuntimeBinding != nil && u.Status.RuntimeBinding.Node == node.Name:
		return fmt.Sprintf("node %s is where unit %s is bound; a warm standby is kept on another designated standby", node.Name, u.Name)
	}
	return ""
}
