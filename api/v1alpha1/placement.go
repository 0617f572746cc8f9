package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
)

// ParseEpoch reads the LabelEpoch value of a runtime pod: a positive decimal.
func ParseEpoch(v string) (int64, error) {
	epoch, err := strconv.ParseInt(v, 10, 64)
	if err != nil || epoch < 1 || strconv.FormatInt(epoch, 10) != v {
		// One spelling per epoch: a label "+7" or "07" names no binding.
		return 0, fmt.Errorf("epoch %q is not a positive decimal number", v)
	}
	return epoch, nil
}

// Epochs and unit names (docs/design.md §3 L13). A binding's epoch is drawn
// from the controller's clock in milliseconds since 1970 (13 digits until
// the year 2286), so it is bounded by MaxEpoch, 15 digits, and a unit's
// name by MaxUnitNameLength: the runtime pod <unit>-runtime-e<epoch> then
// stays a DNS label (63 characters) whatever the epoch.
const (
	MaxEpoch          int64 = 999_999_999_999_999
	runtimePodInfix         = "-runtime-e"
	maxEpochDigits          = 15
	MaxUnitNameLength       = 63 - len(runtimePodInfix) - maxEpochDigits
)

// RuntimePodName is the runtime pod of a unit's binding at epoch:
// <unit>-runtime-e<epoch>.
func RuntimePodName(unit string, epoch int64) string {
	return unit + runtimePodInfix + strconv.FormatInt(epoch, 10)
}

// WarmPodName is a unit's warm standby pod on node: <unit>-warm-<the first
// ten hex digits of the node name's SHA-256>. A node name may be 253
// characters, so it is hashed to keep the pod's name a DNS label; the
// pod's LabelWarmStandby names the node in full.
func WarmPodName(unit, node string) string {
	sum := sha256.Sum256([]byte(node))
	return unit + warmPodInfix + hex.EncodeToString(sum[:])[:10]
}

const warmPodInfix = "-warm-"
