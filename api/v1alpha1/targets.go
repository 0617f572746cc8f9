package v1alpha1

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Names reports whether the targets name the node, by name or by label. It
// says nothing about whether the node is fit today (Ready, schedulable):
// that is the caller's question.
func (t *FailoverTargets) Names(node *corev1.Node) (bool, error) {
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
	// An empty selector would name every node; the targets must name nodes
	// deliberately.
	if sel.Empty() {
		return false, nil
	}
	return sel.Matches(labels.Set(node.Labels)), nil
}
