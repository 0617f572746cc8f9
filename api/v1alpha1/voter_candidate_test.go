package v1alpha1

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseNodeReports(t *testing.T) {
	if tb, err := ParseTombstone(`{"memberID":"8e9e05c52164694d","clusterID":"cdf818194e3a8c32"}`); err != nil || tb.ClusterID != "cdf818194e3a8c32" || tb.MemberID != "8e9e05c52164694d" {
		t.Errorf("ParseTombstone = %+v, %v", tb, err)
	}
	for _, v := range []string{"", "removed", `{"memberID":"1"}`} {
		if _, err := ParseTombstone(v); err == nil {
			t.Errorf("ParseTombstone(%q) accepted", v)
		}
	}
	if f, err := ParseNodeFitness(`{"fsyncP99Millis":2.5,"peerRTTMillis":1,"at":"2026-09-03T10:00:00Z"}`); err != nil || f.FsyncP99Millis != 2.5 || f.At.IsZero() {
		t.Errorf("ParseNodeFitness = %+v, %v", f, err)
	}
	for _, v := range []string{"fast", `{"fsyncP99Millis":-1}`} {
		if _, err := ParseNodeFitness(v); err == nil {
			t.Errorf("ParseNodeFitness(%q) accepted", v)
		}
	}
}

func TestPinnedAndProvisioned(t *testing.T) {
	n := &corev1.Node{}
	if NodePinned(n) || NodeProvisioned(n) {
		t.Error("a bare node reads as pinned or provisioned")
	}
	for v, want := range map[string]bool{"true": true, "": true, "yes": true, "false": false} {
		n.Labels = map[string]string{LabelPinned: v}
		if got := NodePinned(n); got != want {
			t.Errorf("pinned=%q: NodePinned = %v, want %v", v, got, want)
		}
	}
	for v, want := range map[string]bool{"true": true, "": false, "yes": false} {
		n.Annotations = map[string]string{AnnotationProvisioned: v}
		if got := NodeProvisioned(n); got != want {
			t.Errorf("provisioned=%q: NodeProvisioned = %v, want %v", v, got, want)
		}
	}
}

func TestCandidateRulesUseThePolicySelector(t *testing.T) {
	p := &VoterPolicy{Spec: VoterPolicySpec{EligibleSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "control"}}}, Status: VoterPolicyStatus{ClusterID: "c1"}}
	rules, err := p.CandidateRules()
	if err != nil {
		t.Fatal(err)
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"tier": "control"}, Annotations: map[string]string{AnnotationProvisioned: "true"}},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	if got := rules.Refusal(n); got != "" {
		t.Errorf("eligible node refused: %q", got)
	}
	n.Labels = map[string]string{LabelVoterEligible: "true"}
	if got := rules.Refusal(n); got != RefusalNotVoterEligible {
		t.Errorf("Refusal = %q, want %q: the policy's selector decides, not the default label", got, RefusalNotVoterEligible)
	}
	if rules, _ := (&VoterPolicy{}).CandidateRules(); rules.Refusal(n) == RefusalNotVoterEligible {
		t.Error("a policy without a selector does not fall back to holdfast.io/voter-eligible=true")
	}
}
