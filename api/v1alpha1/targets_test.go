package v1alpha1

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTargetsNameNodesByNameOrLabelAndNeverByAnEmptySelector(t *testing.T) {
	standby := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "standby-1", Labels: map[string]string{"holdfast.io/standby-for": "kiln"}}}
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-9"}}
	for _, tc := range []struct {
		name    string
		targets *FailoverTargets
		node    *corev1.Node
		want    bool
	}{
		{"no targets", nil, standby, false},
		{"by name", &FailoverTargets{Nodes: []string{"standby-1"}}, standby, true},
		{"by label", &FailoverTargets{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"holdfast.io/standby-for": "kiln"}}}, standby, true},
		{"label does not match", &FailoverTargets{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"holdfast.io/standby-for": "kiln"}}}, other, false},
		{"an empty selector names nothing", &FailoverTargets{Selector: &metav1.LabelSelector{}}, other, false},
	} {
		got, err := tc.targets.Names(tc.node)
		if err != nil || got != tc.want {
			t.Errorf("%s: Names(%s) = %v, %v; want %v", tc.name, tc.node.Name, got, err, tc.want)
		}
	}
	bad := &FailoverTargets{Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}}
	if _, err := bad.Names(standby); err == nil {
		t.Error("an invalid selector must be an error naming spec.availability.targets.selector")
	}
}
