package policy

import (
	"testing"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

func TestBindingClaimAllowsOnlyThePodOfTheAuthorisedEpoch(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    *holdfastv1.RuntimeBinding
		pod  string
		want string
	}{
		{"no binding", nil, "kiln-rt-3", "unit plant/kiln has no authorised binding"},
		{"another epoch", &holdfastv1.RuntimeBinding{Epoch: 4}, "kiln-rt-3", "epoch 3 is not the authorised epoch 4 of unit plant/kiln"},
		{"another pod's, bound", &holdfastv1.RuntimeBinding{Epoch: 3, Pod: "other", Node: "edge-1"}, "kiln-rt-3",
			"epoch 3 of unit plant/kiln is already bound to node edge-1 by pod other"},
		{"another pod's", &holdfastv1.RuntimeBinding{Epoch: 3, Pod: "other"}, "kiln-rt-3", "epoch 3 of unit plant/kiln belongs to pod other"},
		{"bound, no pod named", &holdfastv1.RuntimeBinding{Epoch: 3, Node: "edge-1"}, "kiln-rt-3", "epoch 3 of unit plant/kiln is already bound to node edge-1"},
		{"this pod's", &holdfastv1.RuntimeBinding{Epoch: 3, Pod: "kiln-rt-3"}, "kiln-rt-3", ""},
		{"this pod's, recorded", &holdfastv1.RuntimeBinding{Epoch: 3, Pod: "kiln-rt-3", Node: "edge-1"}, "kiln-rt-3", ""},
		{"no pod named yet", &holdfastv1.RuntimeBinding{Epoch: 3}, "kiln-rt-3", ""},
	} {
		if got := BindingClaim(tc.b, "plant/kiln", 3, tc.pod); got != tc.want {
			t.Errorf("%s: BindingClaim = %q, want %q", tc.name, got, tc.want)
		}
	}
}
