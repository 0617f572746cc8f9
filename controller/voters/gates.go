package voters

import (
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/webhook/rules"
)

// SwapGates is every gate of DESIGN §6 step 1 the swap fails now, each with
// its field path; empty when every gate holds. It is the webhook's
// (rules.SwapGates, on the VoterPolicy status) and what only the voter
// controller applies: a node labelled as an etcd voter whose member does not
// vote, a tombstone of this cluster on the incoming node, an outgoing node
// that does not exist.
//
// It judges from in.Policy.Status: the controller passes the status it just
// computed from etcd; `kubectl holdfast swap` passes the recorded one to say,
// before it creates a VoterSwap, whether the swap would be accepted now and
// why not.
func SwapGates(spec holdfastv1.VoterSwapSpec, in rules.GateInput) []string {
	var out []string
	for _, e := range rules.SwapGates(&spec, in) {
		out = append(out, e.Error())
	}
	if in.Policy == nil {
		return out
	}
	out = append(out, labelledNotVoting(in.Policy, in.Nodes)...)
	if spec.Incoming != "" {
		if n := in.Nodes[spec.Incoming]; n != nil {
			if why := tombstoneOfCluster(n, in.Policy.Status.ClusterID); why != "" {
				out = append(out, field("spec.incoming", why))
			}
		}
	}
	if _, ok := in.Nodes[spec.Outgoing]; !ok {
		out = append(out, field("spec.outgoing", fmt.Sprintf("node %s does not exist", spec.Outgoing)))
	}
	return out
}

// labelledNotVoting: a node labelled node-role.kubernetes.io/etcd whose
// member does not vote (a learner, or no member at all) is "member but not a
// voter", and blocks: a label is never taken for a vote. Judged only once
// etcd's voters are known.
func labelledNotVoting(p *holdfastv1.VoterPolicy, nodes map[string]*corev1.Node) []string {
	st := &p.Status
	if len(st.Voters) == 0 {
		return nil
	}
	var out []string
	names := make([]string, 0, len(nodes))
	for name := range nodes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, ok := nodes[name].Labels[holdfastv1.LabelEtcdRole]; ok && !slices.Contains(st.Voters, name) {
			what := "has no etcd member"
			if slices.Contains(st.Learners, name) {
				what = "is a learner"
			}
			out = append(out, field("spec", fmt.Sprintf("node %s is labelled %s but %s (member but not a voter); a voter is judged by etcd's own vote",
				name, holdfastv1.LabelEtcdRole, what)))
		}
	}
	return out
}
