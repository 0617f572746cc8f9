// Package validation checks the holdfast plugin args. Every error carries the
// field path and a short reason; a plugin with invalid args refuses to start.
package validation

import (
	"k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/scheduler-plugin/apis/config"
)

// MaxWeight bounds every weight and penalty: scores run from 0 to 100.
const MaxWeight = 100

// ValidateUnitPlacementArgs checks UnitPlacement args at path.
func ValidateUnitPlacementArgs(path *field.Path, args *config.UnitPlacementArgs) error {
	var errs field.ErrorList
	errs = append(errs, validateWeight(path.Child("dedicatedStandbyWeight"), args.DedicatedStandbyWeight)...)
	errs = append(errs, validateWeight(path.Child("loadWeight"), args.LoadWeight)...)
	if len(errs) == 0 && args.DedicatedStandbyWeight+args.LoadWeight == 0 {
		errs = append(errs, field.Invalid(path.Child("loadWeight"), args.LoadWeight, "must be above 0 when dedicatedStandbyWeight is 0"))
	}
	return errs.ToAggregate()
}

// ValidateStandbyColocationArgs checks StandbyColocation args at path.
func ValidateStandbyColocationArgs(path *field.Path, args *config.StandbyColocationArgs) error {
	var errs field.ErrorList
	switch args.DefaultPolicy {
	case holdfastv1.ColocationRefuse, holdfastv1.ColocationWarn:
	default:
		errs = append(errs, field.NotSupported(path.Child("defaultPolicy"), args.DefaultPolicy,
			[]holdfastv1.ColocationPolicy{holdfastv1.ColocationRefuse, holdfastv1.ColocationWarn}))
	}
	errs = append(errs, validateWeight(path.Child("penaltyPerRuntime"), args.PenaltyPerRuntime)...)
	return errs.ToAggregate()
}

// ValidateVoterEligibilityArgs checks VoterEligibility args at path.
func ValidateVoterEligibilityArgs(path *field.Path, args *config.VoterEligibilityArgs) error {
	var errs field.ErrorList
	if args.VoterPolicyName == "" {
		errs = append(errs, field.Required(path.Child("voterPolicyName"), "must name the VoterPolicy"))
	} else {
		for _, msg := range validation.NameIsDNSSubdomain(args.VoterPolicyName, false) {
			errs = append(errs, field.Invalid(path.Child("voterPolicyName"), args.VoterPolicyName, msg))
		}
	}
	errs = append(errs, validateWeight(path.Child("fsyncWeight"), args.FsyncWeight)...)
	errs = append(errs, validateWeight(path.Child("peerRTTWeight"), args.PeerRTTWeight)...)
	if len(errs) == 0 && args.FsyncWeight+args.PeerRTTWeight == 0 {
		errs = append(errs, field.Invalid(path.Child("peerRTTWeight"), args.PeerRTTWeight, "must be above 0 when fsyncWeight is 0"))
	}
	return errs.ToAggregate()
}

func validateWeight(path *field.Path, w int64) field.ErrorList {
	if w < 0 || w > MaxWeight {
		return field.ErrorList{field.Invalid(path, w, "must be between 0 and 100")}
	}
	return nil
}
