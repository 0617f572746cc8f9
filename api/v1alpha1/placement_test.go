package v1alpha1

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestRuntimePodNameAndEpoch(t *testing.T) {
	if got := RuntimePodName("boiler-1", 12); got != "boiler-1-runtime-e12" {
		t.Errorf("RuntimePodName = %q", got)
	}
	for v, want := range map[string]int64{"1": 1, "12": 12} {
		if got, err := ParseEpoch(v); err != nil || got != want {
			t.Errorf("ParseEpoch(%q) = %d, %v; want %d", v, got, err, want)
		}
	}
	for _, v := range []string{"", "0", "-3", "e12", "1.5"} {
		if _, err := ParseEpoch(v); err == nil {
			t.Errorf("ParseEpoch(%q) accepted", v)
		}
	}
}

func node(name string, labels map[string]string, ready corev1.ConditionStatus) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if ready != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse}, {Type: corev1.NodeReady, Status: ready}}
	}
	return n
}

func TestTargetMatcher(t *testing.T) {
	spare := node("spare-1", map[string]string{"pool": "spare"}, "")
	named := node("standby-1", nil, "")
	other := node("other", map[string]string{"pool": "main"}, "")
	for _, tc := range []struct {
		name    string
		targets *FailoverTargets
		want    map[string]bool
		wantErr bool
	}{
		{name: "no targets", want: map[string]bool{"spare-1": false, "standby-1": false, "other": false}},
		{name: "by name", targets: &FailoverTargets{Nodes: []string{"standby-1"}}, want: map[string]bool{"spare-1": false, "standby-1": true, "other": false}},
		{name: "by selector and name", targets: &FailoverTargets{Nodes: []string{"standby-1"}, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "spare"}}},
			want: map[string]bool{"spare-1": true, "standby-1": true, "other": false}},
		{name: "invalid selector matches nothing", targets: &FailoverTargets{Nodes: []string{"standby-1"}, Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: "Near"}}}},
			want: map[string]bool{"spare-1": false, "standby-1": false, "other": false}, wantErr: true},
	} {
		a := Availability{Targets: tc.targets}
		m, err := a.TargetMatcher()
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: error %v, want error %v", tc.name, err, tc.wantErr)
		}
		for _, n := range []*corev1.Node{spare, named, other} {
			if got := m.Matches(n); got != tc.want[n.Name] {
				t.Errorf("%s: Matches(%s) = %v, want %v", tc.name, n.Name, got, tc.want[n.Name])
			}
		}
	}
}

func TestIsPrimary(t *testing.T) {
	u := Unit{}
	if u.IsPrimary(node("n", map[string]string{"x": "y"}, "")) {
		t.Error("a unit without nodeSelector has every node as primary")
	}
	u.Spec.NodeSelector = map[string]string{"holdfast.io/device": "kiln-1", "zone": "a"}
	for labels, want := range map[*map[string]string]bool{
		{"holdfast.io/device": "kiln-1", "zone": "a", "x": "y"}: true,
		{"holdfast.io/device": "kiln-1"}:                        false,
		{"holdfast.io/device": "kiln-2", "zone": "a"}:           false,
	} {
		if got := u.IsPrimary(node("n", *labels, "")); got != want {
			t.Errorf("IsPrimary(%v) = %v, want %v", *labels, got, want)
		}
	}
}

func TestNodeReady(t *testing.T) {
	for status, want := range map[corev1.ConditionStatus]bool{corev1.ConditionTrue: true, corev1.ConditionFalse: false, corev1.ConditionUnknown: false, "": false} {
		if got := NodeReady(node("n", nil, status)); got != want {
			t.Errorf("Ready=%q: NodeReady = %v, want %v", status, got, want)
		}
	}
}

func TestBindingKinds(t *testing.T) {
	b := RuntimeBinding{Epoch: 3, PreviousNode: "a", UnsettledRebinds: []string{"b"}}
	if !b.IsRebind() || b.IsManual() || !b.Tried("b") || b.Tried("c") {
		t.Errorf("automatic re-bind misread: %+v", b)
	}
	b.RequestedNode = "c"
	if !b.IsManual() {
		t.Error("manual re-bind misread")
	}
	if (&RuntimeBinding{Epoch: 1}).IsRebind() {
		t.Error("first binding read as a re-bind")
	}
}
