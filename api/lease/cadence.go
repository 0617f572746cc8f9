package lease

import "time"

// MinRenewInterval is the shortest wait between two renewal attempts, so a
// grantor retrying close to a deadline never spins.
const MinRenewInterval = 250 * time.Millisecond

// RenewInterval is how long a grantor waits before its next renewal attempt
// (DESIGN §3 L2). anchorAge is the age of the anchor the runtime holds: the
// acknowledged renewal that the last acknowledged grant carried the age of,
// which is one renewal older than the grantor's own last success (L1). The
// runtime's deadline is that anchor plus the duration, so the cadence is
// measured against it: a sixth of the lease while the anchor is fresh, and
// never more than a third of what is left of it, so one refused or lost POST
// is retried well inside the runtime's deadline and never on it.
func RenewInterval(duration, anchorAge time.Duration) time.Duration {
	interval := duration / 6
	if left := duration - anchorAge; left/3 < interval {
		interval = left / 3
	}
	return max(interval, MinRenewInterval)
}
