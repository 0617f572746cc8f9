package votereligibility

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

// Why a node cannot become an etcd voter: the short lowercase phrases the
// scheduler's FailedScheduling events show, node by node.
const (
	RefusalNotVoterEligible = "not voter-eligible"
	RefusalPinned           = "pinned"
	RefusalNotProvisioned   = "not provisioned"
	RefusalNotReady         = "not ready"
	RefusalEtcdMember       = "already an etcd member"
	RefusalTombstone        = "carries a tombstone of this cluster"
)

// refusalClass is each refusal's reason code in
// holdfast_scheduler_filter_refusals_total: short, stable, snake case, as
// the other plugins' codes are.
var refusalClass = map[string]string{
	RefusalNotVoterEligible: "not_voter_eligible",
	RefusalPinned:           "pinned",
	RefusalNotProvisioned:   "not_provisioned",
	RefusalNotReady:         "not_ready",
	RefusalEtcdMember:       "etcd_member",
	RefusalTombstone:        "tombstone",
}

// candidateRules judge nodes against one VoterPolicy with the rules the
// webhook's swap gates use (policy), so a node the scheduler offers is
// one a person could have named as spec.incoming.
type candidateRules struct {
	policy    *holdfastv1.VoterPolicy
	members   map[string]bool
	clusterID string
}

func newCandidateRules(p *holdfastv1.VoterPolicy) *candidateRules {
	return &candidateRules{policy: p, members: policy.Members(p), clusterID: p.Status.ClusterID}
}

// refusal is why node may not become a voter, or "" when it may. A member
// is a node the policy status lists as voter or learner, or one carrying the
// etcd role label. A tombstone is judged by rules.TombstoneOfCluster, as the
// swap gates judge it: a removed member never comes back by doubt.
func (r *candidateRules) refusal(node *corev1.Node) string {
	switch {
	case !policy.NodeEligible(r.policy, node):
		return RefusalNotVoterEligible
	case policy.NodePinned(node):
		return RefusalPinned
	case !policy.NodeProvisioned(node):
		return RefusalNotProvisioned
	case !policy.NodeReady(node):
		return RefusalNotReady
	case r.members[node.Name]:
		return RefusalEtcdMember
	}
	if _, ok := node.Labels[holdfastv1.LabelEtcdRole]; ok {
		return RefusalEtcdMember
	}
	if policy.TombstoneOfCluster(node, r.clusterID) {
		return RefusalTombstone
	}
	return ""
}

// fitnessMillis reads the node plugin's fitness report: the fsync p99 and
// the worst round trip to the voters' peers, in milliseconds. ok is false
// for a report that cannot be judged: unreadable, without fsync samples,
// without peers, or with a peer that did not answer.
func fitnessMillis(f *holdfastv1.Fitness) (fsync, rtt float64, ok bool) {
	if f.FsyncSamples <= 0 || f.FsyncP99Micros < 0 || len(f.PeerRTTMicros) == 0 {
		return 0, 0, false
	}
	rtts := slices.Collect(maps.Values(f.PeerRTTMicros))
	if slices.Min(rtts) < 0 {
		return 0, 0, false
	}
	return float64(f.FsyncP99Micros) / 1000, float64(slices.Max(rtts)) / 1000, true
}
