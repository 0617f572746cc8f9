package v1

import (
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/holdfast-io/holdfast/scheduler-plugin/apis/config"
)

// The conversions are written by hand: three small types do not warrant
// conversion-gen. Defaulting runs before conversion, so a nil pointer only
// reaches here from a caller that skipped it, and converts to the zero value,
// which validation then refuses.

// RegisterConversions adds the args' conversion functions to a scheme.
func RegisterConversions(s *runtime.Scheme) error {
	for _, err := range []error{
		s.AddConversionFunc((*UnitPlacementArgs)(nil), (*config.UnitPlacementArgs)(nil), func(a, b any, scope conversion.Scope) error {
			return Convert_v1_UnitPlacementArgs_To_config_UnitPlacementArgs(a.(*UnitPlacementArgs), b.(*config.UnitPlacementArgs), scope)
		}),
		s.AddConversionFunc((*config.UnitPlacementArgs)(nil), (*UnitPlacementArgs)(nil), func(a, b any, scope conversion.Scope) error {
			return Convert_config_UnitPlacementArgs_To_v1_UnitPlacementArgs(a.(*config.UnitPlacementArgs), b.(*UnitPlacementArgs), scope)
		}),
		s.AddConversionFunc((*StandbyColocationArgs)(nil), (*config.StandbyColocationArgs)(nil), func(a, b any, scope conversion.Scope) error {
			return Convert_v1_StandbyColocationArgs_To_config_StandbyColocationArgs(a.(*StandbyColocationArgs), b.(*config.StandbyColocationArgs), scope)
		}),
		s.AddConversionFunc((*config.StandbyColocationArgs)(nil), (*StandbyColocationArgs)(nil), func(a, b any, scope conversion.Scope) error {
			return Convert_config_StandbyColocationArgs_To_v1_StandbyColocationArgs(a.(*config.StandbyColocationArgs), b.(*StandbyColocationArgs), scope)
		}),
		s.AddConversionFunc((*VoterEligibilityArgs)(nil), (*config.VoterEligibilityArgs)(nil), func(a, b any, scope conversion.Scope) error {
			return Convert_v1_VoterEligibilityArgs_To_config_VoterEligibilityArgs(a.(*VoterEligibilityArgs), b.(*config.VoterEligibilityArgs), scope)
		}),
		s.AddConversionFunc((*config.VoterEligibilityArgs)(nil), (*VoterEligibilityArgs)(nil), func(a, b any, scope conversion.Scope) error {
			return Convert_config_VoterEligibilityArgs_To_v1_VoterEligibilityArgs(a.(*config.VoterEligibilityArgs), b.(*VoterEligibilityArgs), scope)
		}),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// Convert_v1_UnitPlacementArgs_To_config_UnitPlacementArgs converts v1 to internal.
func Convert_v1_UnitPlacementArgs_To_config_UnitPlacementArgs(in *UnitPlacementArgs, out *config.UnitPlacementArgs, _ conversion.Scope) error {
	out.DedicatedStandbyWeight = ptr.Deref(in.DedicatedStandbyWeight, 0)
	out.LoadWeight = ptr.Deref(in.LoadWeight, 0)
	return nil
}

// Convert_config_UnitPlacementArgs_To_v1_UnitPlacementArgs converts internal to v1.
func Convert_config_UnitPlacementArgs_To_v1_UnitPlacementArgs(in *config.UnitPlacementArgs, out *UnitPlacementArgs, _ conversion.Scope) error {
	out.DedicatedStandbyWeight = ptr.To(in.DedicatedStandbyWeight)
	out.LoadWeight = ptr.To(in.LoadWeight)
	return nil
}

// Convert_v1_StandbyColocationArgs_To_config_StandbyColocationArgs converts v1 to internal.
func Convert_v1_StandbyColocationArgs_To_config_StandbyColocationArgs(in *StandbyColocationArgs, out *config.StandbyColocationArgs, _ conversion.Scope) error {
	out.DefaultPolicy = ptr.Deref(in.DefaultPolicy, "")
	out.PenaltyPerRuntime = ptr.Deref(in.PenaltyPerRuntime, 0)
	return nil
}

// Convert_config_StandbyColocationArgs_To_v1_StandbyColocationArgs converts internal to v1.
func Convert_config_StandbyColocationArgs_To_v1_StandbyColocationArgs(in *config.StandbyColocationArgs, out *StandbyColocationArgs, _ conversion.Scope) error {
	out.DefaultPolicy = ptr.To(in.DefaultPolicy)
	out.PenaltyPerRuntime = ptr.To(in.PenaltyPerRuntime)
	return nil
}

// Convert_v1_VoterEligibilityArgs_To_config_VoterEligibilityArgs converts v1 to internal.
func Convert_v1_VoterEligibilityArgs_To_config_VoterEligibilityArgs(in *VoterEligibilityArgs, out *config.VoterEligibilityArgs, _ conversion.Scope) error {
	out.VoterPolicyName = ptr.Deref(in.VoterPolicyName, "")
	out.FsyncWeight = ptr.Deref(in.FsyncWeight, 0)
	out.PeerRTTWeight = ptr.Deref(in.PeerRTTWeight, 0)
	return nil
}

// Convert_config_VoterEligibilityArgs_To_v1_VoterEligibilityArgs converts internal to v1.
func Convert_config_VoterEligibilityArgs_To_v1_VoterEligibilityArgs(in *config.VoterEligibilityArgs, out *VoterEligibilityArgs, _ conversion.Scope) error {
	out.VoterPolicyName = ptr.To(in.VoterPolicyName)
	out.FsyncWeight = ptr.To(in.FsyncWeight)
	out.PeerRTTWeight = ptr.To(in.PeerRTTWeight)
	return nil
}
