package lease

import "time"

const (
	// CadenceDivisor: a healthy runtime is renewed every sixth of its lease
	// (docs/design.md §3 L2).
	CadenceDivisor = 6
	// MinRenewInterval is the shortest wait between two attempts, so a
	// runtime that refuses at once is not hammered as its deadline nears.
	MinRenewInterval = 100 * time.Millisecond
	// UnanchoredRetry is the longest wait while the runtime holds no anchor
	// (nothing granted at the binding yet, or its lease has run out).
	UnanchoredRetry = time.Second
)

// RenewInterval is how long a grantor waits before its next renewal attempt
// (docs/design.md §3 L2). anchorAge is the age of the anchor the runtime holds: the
// acknowledged reply whose Anchor and age the last acknowledged grant
// carried, one renewal older than the grantor's own last success (L1). The
// grantor dates it at its receipt of that reply; the runtime's own anchor
// instant is a little earlier (the reply's transit back), never later. The
// runtime's deadline is that anchor plus the duration, so the cadence is
// measured against it: a sixth of the lease, but never more than half of
// what is left of the anchor, so the next attempt and the one after it land
// inside the runtime's deadline and one refused POST never fences a healthy
// runtime. This is the one cadence: controller/grantor and test/leasetest
// both call it.
func RenewInterval(duration, anchorAge time.Duration) time.Duration {
	cadence := duration / CadenceDivisor
	if anchorAge < 0 {
		anchorAge = 0
	}
	if anchorAge >= duration {
		return min(cadence, UnanchoredRetry)
	}
	return max(min(cadence, (duration-anchorAge)/2), MinRenewInterval)
}
