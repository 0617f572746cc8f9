package policy

import (
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
// terminating runtime may still write. The controller's free standbys and
// StandbyColocation's filter both judge by it, so the controller never
// re-binds to a standby the scheduler refuses.
func HostsOtherRuntime(pod *corev1.Pod, unit types.NamespacedName) bool {
	other, ok := RuntimeUnit(pod)
	return ok && other != unit && pod.Spec.NodeName != ""
}
