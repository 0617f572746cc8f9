package policy

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// EpochFloor is the least epoch a new binding of any unit may take
// (docs/design.md §3 L13): above recorded, the highest epoch the cluster's
// epoch record holds (every grantor reserves an epoch there before any
// binding names it), and not below now in milliseconds since 1970. The
// record keeps epochs unique within the cluster whatever the clocks do; the
// clock keeps a cluster that lost its record (rebuilt, restored) above the
// epochs an earlier one issued, as far as its clock is not behind theirs.
// A clock past MaxEpoch is broken and is not read.
func EpochFloor(recorded int64, now time.Time) int64 {
	floor := recorded + 1
	if ms := now.UnixMilli(); ms <= holdfastv1.MaxEpoch {
		floor = max(floor, ms)
	}
	return floor
}

// NextEpoch is the epoch of a unit's next binding: above its current one
// (zero when it has none) and at least floor (EpochFloor).
func NextEpoch(current, floor int64) int64 {
	return max(current+1, floor)
}

// UnitNameErrors checks a new Unit's name: a DNS label of at most
// MaxUnitNameLength characters, so every runtime pod name
// <unit>-runtime-e<epoch> is a DNS label and the unit's name is a label
// value on its pods. Names never change, so only a create is judged.
func UnitNameErrors(name string) field.ErrorList {
	p := field.NewPath("metadata", "name")
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(name) {
		errs = append(errs, field.Invalid(p, name, msg))
	}
	if len(name) > holdfastv1.MaxUnitNameLength {
		errs = append(errs, field.TooLong(p, "", holdfastv1.MaxUnitNameLength))
		errs[len(errs)-1].Detail = fmt.Sprintf("must be at most %d characters, so that runtime pod %s stays a DNS label",
			holdfastv1.MaxUnitNameLength, holdfastv1.RuntimePodName(name, holdfastv1.MaxEpoch))
	}
	return errs
}
