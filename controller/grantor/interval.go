package grantor

import (
	"time"

	"github.com/holdfast-io/holdfast/api/lease"
)

// The cadence itself (§3 L2) is lease.RenewInterval, shared with the
// runtime's own tests of the protocol: a sixth of the lease against the
// anchor the runtime holds. These are the grantor's choices around it.
const (
	// UnanchoredRetry is the longest wait while the runtime holds no anchor
	// (nothing granted at this binding yet, or its lease has run out): there
	// is no deadline to fit inside, and a starting runtime should get its
	// lease as soon as it listens.
	UnanchoredRetry = time.Second
)

// StartupInterval is the wait between attempts at a runtime that holds no
// anchor.
func StartupInterval(duration time.Duration) time.Duration {
	return min(lease.RenewInterval(duration, 0), UnanchoredRetry)
}

// RequestTimeout bounds one renewal POST: never longer than the cadence, so
// a wedged handler delays the next attempt by at most one interval.
func RequestTimeout(duration time.Duration) time.Duration {
	return min(lease.RenewInterval(duration, 0), 2*time.Second)
}
