// Package runtimepod holds what UnitPlacement and StandbyColocation both
// know about unit runtime pods: which unit a pod belongs to, and when a
// change to a Unit can make a rejected runtime pod schedulable.
package runtimepod

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// Unit is the Unit a runtime pod belongs to: holdfast.io/unit, in the pod's
// namespace. ok is false for any other pod.
func Unit(pod *corev1.Pod) (key types.NamespacedName, ok bool) {
	name, ok := pod.Labels[holdfastv1.LabelUnit]
	if !ok {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: pod.Namespace, Name: name}, true
}

// Display names a unit as a person reading the pod's events knows it: by
// name in the pod's own namespace, namespace/name elsewhere.
func Display(unit types.NamespacedName, fromNamespace string) string {
	if unit.Namespace == fromNamespace {
		return unit.Name
	}
	return unit.String()
}

// QueueOnOwnUnitChange requeues a runtime pod when its own Unit was added or
// changed (a new epoch authorised, targets edited, the ledger cleared), and
// skips every other Unit's change: renewals update Units all the time.
func QueueOnOwnUnitChange(logger klog.Logger, pod *corev1.Pod, _, newObj any) (fwk.QueueingHint, error) {
	unit, ok := Unit(pod)
	if !ok {
		return fwk.QueueSkip, nil
	}
	if tomb, ok := newObj.(cache.DeletedFinalStateUnknown); ok {
		newObj = tomb.Obj
	}
	obj, err := meta.Accessor(newObj)
	if err != nil {
		return fwk.Queue, fmt.Errorf("reading the changed Unit: %w", err)
	}
	if obj.GetNamespace() != unit.Namespace || obj.GetName() != unit.Name {
		return fwk.QueueSkip, nil
	}
	logger.V(5).Info("Unit changed; its runtime pod may now be schedulable", "pod", klog.KObj(pod), "unit", klog.KObj(obj))
	return fwk.Queue, nil
}
