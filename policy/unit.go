package policy

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// AvailabilityErrors lists the docs/design.md §3 inequalities an availability policy
// breaks: the lease within its limits, the start-up grace never below the
// lease (L4), and the re-bind margin never below the hold bound (L3), all
// through api/v1alpha1's HoldBound and RebindMargin. The CRD's CEL rules state
// the same; this is the copy components check in Go.
func AvailabilityErrors(path *field.Path, a *holdfastv1.Availability) field.ErrorList {
	var errs field.ErrorList
	lease := a.LeaseDuration()
	if lease < holdfastv1.MinLeaseDuration || lease > holdfastv1.MaxLeaseDuration {
		errs = append(errs, field.Invalid(path.Child("leaseDurationSeconds"), a.LeaseDurationSeconds, fmt.Sprintf(
			"must be between %d and %d seconds", int(holdfastv1.MinLeaseDuration.Seconds()), int(holdfastv1.MaxLeaseDuration.Seconds()))))
	}
	if a.StartupGrace() < lease {
		errs = append(errs, field.Invalid(path.Child("runtimeStartupGraceSeconds"), a.RuntimeStartupGraceSeconds,
			fmt.Sprintf("must be at least leaseDurationSeconds (%d)", a.LeaseDurationSeconds)))
	}
	if margin, bound := a.RebindMargin(), a.HoldBound(); margin < bound {
		errs = append(errs, field.Invalid(path.Child("rebindMarginSeconds"), *a.RebindMarginSeconds, fmt.Sprintf(
			"must be at least the hold bound %v (half the lease, clamped to 5s..30s), so a new writer starts only after the old one has fenced", bound)))
	}
	return errs
}

// RebindPending reports whether a re-bind is under way or due: the binding's
// lease expired (the controller re-binds after the margin, or has re-bound
// and the new runtime has not renewed yet), or a new leader holds off before
// reading the expiry as a fence.
func RebindPending(u *holdfastv1.Unit) bool {
	if b := u.Status.RuntimeBinding; b != nil && b.LeaseState == holdfastv1.LeaseExpired {
		return true
	}
	c := meta.FindStatusCondition(u.Status.Conditions, holdfastv1.ConditionFailoverRequest)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == holdfastv1.ReasonLeadershipHoldOff
}

// IsPrimary reports whether the node is one of the unit's primary nodes (it
// matches spec.nodeSelector).
func IsPrimary(u *holdfastv1.Unit, n *corev1.Node) bool {
	return PrimaryMatcher(u)(n)
}

// PrimaryMatcher is IsPrimary with the unit's selector built once, for a
// caller that judges many nodes (the scheduler, over a whole cluster).
func PrimaryMatcher(u *holdfastv1.Unit) func(*corev1.Node) bool {
	if len(u.Spec.NodeSelector) == 0 {
		return func(*corev1.Node) bool { return false }
	}
	s := labels.SelectorFromSet(u.Spec.NodeSelector)
	return func(n *corev1.Node) bool { return s.Matches(labels.Set(n.Labels)) }
}

// EligibleTarget reports whether the node is one of the unit's failover
// targets, by name or by selector. A selector that does not parse selects
// nothing.
func EligibleTarget(u *holdfastv1.Unit, n *corev1.Node) bool {
	return TargetMatcher(u)(n)
}

// TargetMatcher is EligibleTarget with the unit's selector parsed once, for
// a caller that judges many nodes (the scheduler, over a whole cluster).
func TargetMatcher(u *holdfastv1.Unit) func(*corev1.Node) bool {
	t := u.Spec.Availability.Targets
	if t == nil {
		return func(*corev1.Node) bool { return false }
	}
	var s labels.Selector
	if t.Selector != nil {
		if sel, err := metav1.LabelSelectorAsSelector(t.Selector); err == nil && !sel.Empty() {
			s = sel
		}
	}
	names := t.Nodes
	return func(n *corev1.Node) bool {
		return slices.Contains(names, n.Name) || (s != nil && s.Matches(labels.Set(n.Labels)))
	}
}

// TargetsIncludingPrimary lists the failover targets that are primary nodes
// of the same unit: a standby must be another node, or a failover could land
// on the node it is leaving. Nodes that do not exist are not judged.
func TargetsIncludingPrimary(u *holdfastv1.Unit, nodes []corev1.Node) field.ErrorList {
	t := u.Spec.Availability.Targets
	if t == nil {
		return nil
	}
	byName := make(map[string]*corev1.Node, len(nodes))
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	var errs field.ErrorList
	path := field.NewPath("spec", "availability", "targets")
	for i, name := range t.Nodes {
		if n := byName[name]; n != nil && IsPrimary(u, n) {
			errs = append(errs, field.Invalid(path.Child("nodes").Index(i), name,
				"is a primary node of this unit (matches spec.nodeSelector); a failover target must be another node"))
		}
	}
	if t.Selector != nil {
		s, err := metav1.LabelSelectorAsSelector(t.Selector)
		if err != nil {
			return append(errs, field.Invalid(path.Child("selector"), t.Selector.String(), err.Error()))
		}
		var both []string
		for i := range nodes {
			if !s.Empty() && s.Matches(labels.Set(nodes[i].Labels)) && IsPrimary(u, &nodes[i]) {
				both = append(both, nodes[i].Name)
			}
		}
		if len(both) > 0 {
			sort.Strings(both)
			errs = append(errs, field.Invalid(path.Child("selector"), s.String(), fmt.Sprintf(
				"selects primary nodes of this unit (%s); a failover target must be another node", strings.Join(both, ", "))))
		}
	}
	return errs
}
