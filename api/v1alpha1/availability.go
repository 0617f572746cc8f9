package v1alpha1

import "time"

// Lease duration limits; the CRD's CEL rule on leaseDurationSeconds states
// the same range.
const (
	MinLeaseDuration = 10 * time.Second
	MaxLeaseDuration = 600 * time.Second
)

// Hold bound limits (docs/design.md §3 L3).
const (
	MinHoldBound = 5 * time.Second
	MaxHoldBound = 30 * time.Second
	// rebindMarginSlack is what the default margin adds to the hold bound.
	rebindMarginSlack = 5 * time.Second
)

// HoldBound is how long a runtime holds its outputs after its lease deadline
// before it fences: half the lease, clamped to 5s..30s. The re-bind margin is
// never shorter, so a new writer starts only after the old one has stopped.
// The CRD's CEL rule on rebindMarginSeconds states the same clamp.
func HoldBound(lease time.Duration) time.Duration {
	return min(max(lease/2, MinHoldBound), MaxHoldBound)
}

// LeaseDuration is the unit's control lease duration.
func (a *Availability) LeaseDuration() time.Duration {
	return time.Duration(a.LeaseDurationSeconds) * time.Second
}

// StartupGrace is the deadline, from the runtime pod's first address, of a
// binding at which no renewal was ever acknowledged (§3 L4).
func (a *Availability) StartupGrace() time.Duration {
	return time.Duration(a.RuntimeStartupGraceSeconds) * time.Second
}

// HoldBound is the hold bound of the unit's lease.
func (a *Availability) HoldBound() time.Duration {
	return HoldBound(a.LeaseDuration())
}

// RebindMargin is how long after an expiry a new writer may start: the
// configured margin, or the hold bound plus 5s when unset.
func (a *Availability) RebindMargin() time.Duration {
	if a.RebindMarginSeconds != nil {
		return time.Duration(*a.RebindMarginSeconds) * time.Second
	}
	return a.HoldBound() + rebindMarginSlack
}
