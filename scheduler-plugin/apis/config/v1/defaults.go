package v1

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// Defaults of the plugin args.
const (
	// DefaultDedicatedStandbyWeight above DefaultLoadWeight makes a dedicated
	// standby win over a shared one whatever their loads.
	DefaultDedicatedStandbyWeight int64 = 2
	DefaultLoadWeight             int64 = 1
	DefaultColocationPolicy             = holdfastv1.ColocationWarn
	DefaultPenaltyPerRuntime      int64 = 50
	DefaultVoterPolicyName              = holdfastv1.VoterPolicyName
	DefaultFsyncWeight            int64 = 1
	DefaultPeerRTTWeight          int64 = 1
)

// RegisterDefaults adds the args' defaulting functions to a scheme.
func RegisterDefaults(scheme *runtime.Scheme) error {
	scheme.AddTypeDefaultingFunc(&UnitPlacementArgs{}, func(obj any) { SetDefaults_UnitPlacementArgs(obj.(*UnitPlacementArgs)) })
	scheme.AddTypeDefaultingFunc(&StandbyColocationArgs{}, func(obj any) { SetDefaults_StandbyColocationArgs(obj.(*StandbyColocationArgs)) })
	scheme.AddTypeDefaultingFunc(&VoterEligibilityArgs{}, func(obj any) { SetDefaults_VoterEligibilityArgs(obj.(*VoterEligibilityArgs)) })
	return nil
}

// SetDefaults_UnitPlacementArgs fills the unset UnitPlacement args.
func SetDefaults_UnitPlacementArgs(obj *UnitPlacementArgs) {
	if obj.DedicatedStandbyWeight == nil {
		obj.DedicatedStandbyWeight = ptr.To(DefaultDedicatedStandbyWeight)
	}
	if obj.LoadWeight == nil {
		obj.LoadWeight = ptr.To(DefaultLoadWeight)
	}
}

// SetDefaults_StandbyColocationArgs fills the unset StandbyColocation args.
func SetDefaults_StandbyColocationArgs(obj *StandbyColocationArgs) {
	if obj.DefaultPolicy == nil {
		obj.DefaultPolicy = ptr.To(DefaultColocationPolicy)
	}
	if obj.PenaltyPerRuntime == nil {
		obj.PenaltyPerRuntime = ptr.To(DefaultPenaltyPerRuntime)
	}
}

// SetDefaults_VoterEligibilityArgs fills the unset VoterEligibility args.
func SetDefaults_VoterEligibilityArgs(obj *VoterEligibilityArgs) {
	if obj.VoterPolicyName == nil {
		obj.VoterPolicyName = ptr.To(DefaultVoterPolicyName)
	}
	if obj.FsyncWeight == nil {
		obj.FsyncWeight = ptr.To(DefaultFsyncWeight)
	}
	if obj.PeerRTTWeight == nil {
		obj.PeerRTTWeight = ptr.To(DefaultPeerRTTWeight)
	}
}
