package voters

import (
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

// SwapGates is every gate of docs/design.md §6 step 1 the swap fails now, each with
// its field path ("spec.incoming: Forbidden: ..."); empty when every gate
// holds. The gates themselves are policy.SwapGates, the one rule the webhook,
// holdfast-scheduler and kubectl holdfast swap apply too; this is only their
// messages, as the swap's history records them.
//
// It judges from in.Policy.Status: the controller passes the status it just
// computed from etcd; `kubectl holdfast swap` passes the recorded one to say,
// before it creates a VoterSwap, whether the swap would be accepted now and
// why not.
func SwapGates(spec holdfastv1.VoterSwapSpec, in policy.GateInput) []string {
	var out []string
	for _, e := range policy.SwapGates(&spec, in) {
		out = append(out, e.Error())
	}
	return out
}
