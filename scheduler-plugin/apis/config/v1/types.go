package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// UnitPlacementArgs are the arguments of the UnitPlacement plugin.
//
// +kubebuilder:object:root=true
type UnitPlacementArgs struct {
	metav1.TypeMeta `json:",inline"`

	// dedicatedStandbyWeight is the share of the node score earned by a node
	// that no other unit names as a failover target. Default 2.
	DedicatedStandbyWeight *int64 `json:"dedicatedStandbyWeight,omitempty"`
	// loadWeight is the share of the node score earned by the node's free
	// CPU and memory. Default 1.
	LoadWeight *int64 `json:"loadWeight,omitempty"`
}

// StandbyColocationArgs are the arguments of the StandbyColocation plugin.
//
// +kubebuilder:object:root=true
type StandbyColocationArgs struct {
	metav1.TypeMeta `json:",inline"`

	// defaultPolicy applies to a Unit whose spec.availability.colocation is
	// empty: Refuse or Warn. Default Warn, as the Unit CRD defaults it.
	DefaultPolicy *holdfastv1.ColocationPolicy `json:"defaultPolicy,omitempty"`
	// penaltyPerRuntime is taken off the highest node score for every other
	// unit's runtime the node hosts, under Warn. Default 50.
	PenaltyPerRuntime *int64 `json:"penaltyPerRuntime,omitempty"`
}

// VoterEligibilityArgs are the arguments of the VoterEligibility plugin.
//
// +kubebuilder:object:root=true
type VoterEligibilityArgs struct {
	metav1.TypeMeta `json:",inline"`

	// voterPolicyName names the cluster's VoterPolicy. Default "default".
	VoterPolicyName *string `json:"voterPolicyName,omitempty"`
	// fsyncWeight is the weight of the fsync latency in a node's fitness.
	// Default 1.
	FsyncWeight *int64 `json:"fsyncWeight,omitempty"`
	// peerRTTWeight is the weight of the peer round trip in a node's
	// fitness. Default 1.
	PeerRTTWeight *int64 `json:"peerRTTWeight,omitempty"`
}
