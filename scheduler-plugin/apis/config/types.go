package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// UnitPlacementArgs are the arguments of the UnitPlacement plugin.
//
// +kubebuilder:object:root=true
type UnitPlacementArgs struct {
	metav1.TypeMeta

	// DedicatedStandbyWeight is the share of the node score earned by a node
	// that no other unit names as a failover target. Above LoadWeight, a
	// dedicated standby always beats a shared one, however loaded.
	DedicatedStandbyWeight int64
	// LoadWeight is the share of the node score earned by the node's free
	// CPU and memory (the least-loaded node scores highest).
	LoadWeight int64
}

// StandbyColocationArgs are the arguments of the StandbyColocation plugin.
//
// +kubebuilder:object:root=true
type StandbyColocationArgs struct {
	metav1.TypeMeta

	// DefaultPolicy applies to a Unit whose spec.availability.colocation is
	// empty (a Unit stored before the field was defaulted).
	DefaultPolicy holdfastv1.ColocationPolicy
	// PenaltyPerRuntime is taken off the highest node score for every other
	// unit's runtime the node hosts, under Warn.
	PenaltyPerRuntime int64
}

// VoterEligibilityArgs are the arguments of the VoterEligibility plugin.
//
// +kubebuilder:object:root=true
type VoterEligibilityArgs struct {
	metav1.TypeMeta

	// VoterPolicyName names the cluster's VoterPolicy, whose eligibility
	// selector, member list, cluster ID and fitness thresholds the plugin
	// reads.
	VoterPolicyName string
	// FsyncWeight is the weight of the fsync latency (against the policy's
	// maxFsyncMillis) in a node's fitness.
	FsyncWeight int64
	// PeerRTTWeight is the weight of the peer round trip (against the
	// policy's maxPeerRTTMillis) in a node's fitness.
	PeerRTTWeight int64
}
