package v1alpha1

import (
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The rules below say where a unit's runtime may go (DESIGN §4). The
// scheduler enforces them; the controller reads the same rules to know which
// standbys remain for its automatic path (§3 L5).

// RuntimePodName is the name of the runtime pod of a unit's binding epoch.
func RuntimePodName(unit string, epoch int64) string {
	return fmt.Sprintf("%s-runtime-e%d", unit, epoch)
}

// ParseEpoch reads the LabelEpoch value of a runtime pod: a positive decimal.
func ParseEpoch(v string) (int64, error) {
	epoch, err := strconv.ParseInt(v, 10, 64)
	if err != nil || epoch < 1 {
		return 0, fmt.Errorf("epoch %q is not a positive decimal number", v)
	}
	return epoch, nil
}

// IsRebind reports whether the binding replaces another one: it has a node
// being left.
func (b *RuntimeBinding) IsRebind() bool { return b.PreviousNode != "" }

// IsManual reports whether a person named the node of this binding.
func (b *RuntimeBinding) IsManual() bool { return b.RequestedNode != "" }

// Tried reports whether the automatic path already sent a re-bind to node
// since a runtime was last confirmed (L5).
func (b *RuntimeBinding) Tried(node string) bool {
	return slices.Contains(b.UnsettledRebinds, node)
}

// IsPrimary reports whether node is one of the unit's primaries: it carries
// every label of spec.nodeSelector. A unit without a nodeSelector (the CRD
// requires one) has no primary, rather than every node.
func (u *Unit) IsPrimary(node *corev1.Node) bool {
	if len(u.Spec.NodeSelector) == 0 {
		return false
	}
	for k, v := range u.Spec.NodeSelector {
		if got, ok := node.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// TargetMatcher decides, for many nodes, whether each is one of a unit's
// failover targets (by name or by selector).
//
// +kubebuilder:object:generate=false
type TargetMatcher struct {
	names    []string
	selector labels.Selector
}

// TargetMatcher compiles availability.targets. A unit without targets
// matches no node; a selector that does not parse is an error, and the
// caller matches nothing.
func (a *Availability) TargetMatcher() (TargetMatcher, error) {
	m := TargetMatcher{selector: labels.Nothing()}
	if a.Targets == nil {
		return m, nil
	}
	m.names = a.Targets.Nodes
	if a.Targets.Selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(a.Targets.Selector)
		if err != nil {
			return TargetMatcher{selector: labels.Nothing()}, fmt.Errorf("spec.availability.targets.selector: %w", err)
		}
		m.selector = sel
	}
	return m, nil
}

// Matches reports whether node is a failover target.
func (m TargetMatcher) Matches(node *corev1.Node) bool {
	return slices.Contains(m.names, node.Name) || m.selector.Matches(labels.Set(node.Labels))
}

// NodeReady reports whether the node's Ready condition is True.
func NodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
