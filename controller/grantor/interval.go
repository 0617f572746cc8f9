package grantor

import (
	"time"

	"github.com/holdfast-io/holdfast/api/lease"
)

// The cadence itself (§3 L2) is lease.RenewInterval, shared with the
// runtime's own tests of the protocol: a sixth of the lease against the
// anchor the runtime holds.

// StartupInterval is the wait between attempts at a runtime that holds no
// anchor: no deadline to fit inside, and a starting runtime should get its
// lease as soon as it listens.
func StartupInterval(duration time.Duration) time.Duration {
	return min(duration/lease.CadenceDivisor, lease.UnanchoredRetry)
}

// RequestTimeout bounds one renewal POST: never longer than the cadence, so
// a wedged handler delays the next attempt by at most one interval.
func RequestTimeout(duration time.Duration) time.Duration {
	return min(duration/lease.CadenceDivisor, 2*time.Second)
}
