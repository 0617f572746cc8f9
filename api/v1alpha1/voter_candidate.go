package v1alpha1

import (
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Tombstone is the value of AnnotationTombstone: the etcd member a node was
// until it was removed, and the cluster it was a member of. A node never
// rejoins the cluster its tombstone names as a server.
type Tombstone struct {
	// MemberID is the removed member's ID (hex).
	MemberID string `json:"memberID"`
	// ClusterID is the etcd cluster ID (hex) the member belonged to.
	ClusterID string `json:"clusterID"`
	// RemovedAt is when the member was removed.
	RemovedAt *metav1.Time `json:"removedAt,omitempty"`
}

// ParseTombstone reads an AnnotationTombstone value.
func ParseTombstone(v string) (Tombstone, error) {
	var t Tombstone
	if err := json.Unmarshal([]byte(v), &t); err != nil {
		return Tombstone{}, fmt.Errorf("tombstone %q: %w", v, err)
	}
	if t.ClusterID == "" {
		return Tombstone{}, fmt.Errorf("tombstone %q names no clusterID", v)
	}
	return t, nil
}

// NodeFitness is the value of AnnotationFitness: the node plugin's latest
// fitness probe results, judged against VoterPolicy spec.fitness.
type NodeFitness struct {
	// FsyncP99Millis is the p99 fsync latency on the member data directory.
	FsyncP99Millis float64 `json:"fsyncP99Millis"`
	// PeerRTTMillis is the round trip to the etcd peers.
	PeerRTTMillis float64 `json:"peerRTTMillis"`
	// At is when the probes ran.
	At metav1.Time `json:"at"`
}

// ParseNodeFitness reads an AnnotationFitness value.
func ParseNodeFitness(v string) (NodeFitness, error) {
	var f NodeFitness
	if err := json.Unmarshal([]byte(v), &f); err != nil {
		return NodeFitness{}, fmt.Errorf("fitness %q: %w", v, err)
	}
	if f.FsyncP99Millis < 0 || f.PeerRTTMillis < 0 {
		return NodeFitness{}, fmt.Errorf("fitness %q: latencies must not be negative", v)
	}
	return f, nil
}

// NodeProvisioned reports whether the node plugin found the server unit
// installed on the host.
func NodeProvisioned(node *corev1.Node) bool {
	return node.Annotations[AnnotationProvisioned] == "true"
}

// NodePinned reports whether an admin pinned the node. Any value but
// "false" pins: a pin someone meant to set is never ignored.
func NodePinned(node *corev1.Node) bool {
	v, ok := node.Labels[LabelPinned]
	return ok && v != "false"
}

// Why a node cannot become an etcd voter: short lowercase phrases that the
// scheduler's FailedScheduling events and the voter controller's gates show.
const (
	RefusalNotVoterEligible = "not voter-eligible"
	RefusalNotProvisioned   = "not provisioned"
	RefusalPinned           = "pinned"
	RefusalNotReady         = "not ready"
	RefusalEtcdMember       = "already an etcd member"
	RefusalTombstone        = "carries a tombstone of this cluster"
)

// VoterCandidateRules decide, for many nodes, whether each may become an
// etcd voter under one VoterPolicy.
//
// +kubebuilder:object:generate=false
type VoterCandidateRules struct {
	eligible  labels.Selector
	members   []string
	clusterID string
}

// CandidateRules compiles the policy's eligibility selector and the members
// its status lists.
func (p *VoterPolicy) CandidateRules() (*VoterCandidateRules, error) {
	eligible := labels.SelectorFromSet(labels.Set{LabelVoterEligible: "true"})
	if p.Spec.EligibleSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.EligibleSelector)
		if err != nil {
			return nil, fmt.Errorf("spec.eligibleSelector: %w", err)
		}
		eligible = sel
	}
	return &VoterCandidateRules{
		eligible:  eligible,
		members:   slices.Concat(p.Status.Voters, p.Status.Learners),
		clusterID: p.Status.ClusterID,
	}, nil
}

// Refusal is why node may not become a voter, or "" when it may. A member
// is a node the policy status lists as voter or learner, or one carrying the
// etcd role label. A tombstone that does not parse, or any tombstone while
// the cluster ID is not yet known, counts as one of this cluster.
func (r *VoterCandidateRules) Refusal(node *corev1.Node) string {
	switch {
	case !r.eligible.Matches(labels.Set(node.Labels)):
		return RefusalNotVoterEligible
	case NodePinned(node):
		return RefusalPinned
	case !NodeProvisioned(node):
		return RefusalNotProvisioned
	case !NodeReady(node):
		return RefusalNotReady
	case slices.Contains(r.members, node.Name):
		return RefusalEtcdMember
	}
	if _, ok := node.Labels[LabelEtcdRole]; ok {
		return RefusalEtcdMember
	}
	if v, ok := node.Annotations[AnnotationTombstone]; ok {
		t, err := ParseTombstone(v)
		if err != nil || r.clusterID == "" || t.ClusterID == r.clusterID {
			return RefusalTombstone
		}
	}
	return ""
}
