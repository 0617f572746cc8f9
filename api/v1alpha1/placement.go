package v1alpha1

import (
	"fmt"
	"strconv"
)

// ParseEpoch reads the LabelEpoch value of a runtime pod: a positive decimal.
func ParseEpoch(v string) (int64, error) {
	epoch, err := strconv.ParseInt(v, 10, 64)
	if err != nil || epoch < 1 {
		return 0, fmt.Errorf("epoch %q is not a positive decimal number", v)
	}
	return epoch, nil
}
