package grantor

import (
	"time"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
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

// maxBackoffDoublings caps the doubling of the back-off after consecutive
// timeouts; the caps below bind long before it.
const maxBackoffDoublings = 4

// AttemptTimeout bounds one renewal POST after timeouts consecutive attempts
// that got no answer in time. A starved grantor (or runtime) mostly answers
// late rather than never: abandoning the answer closes the connection, and
// the retry pays a new dial on the same starved cores. So the bound starts at
// RequestTimeout and doubles with each timeout, up to the cadence (a wedged
// handler still delays the next attempt by at most one interval) and never
// past half of what is left of the runtime's anchor (left, zero when it holds
// none), so that when the grantor recovers a retry still lands inside the
// runtime's deadline (L2). A late acknowledgement is safe: the grantor dates
// it at its arrival, later than the runtime's own anchor (L1).
func AttemptTimeout(duration time.Duration, timeouts int, left time.Duration) time.Duration {
	base := RequestTimeout(duration)
	t := min(base<<min(timeouts, maxBackoffDoublings), duration/lease.CadenceDivisor)
	if left > 0 {
		t = min(t, left/2)
	}
	return max(t, base)
}

// BackoffWait is the wait before the next attempt after timeouts consecutive
// attempts without an answer in time, given the L2 wait. While the runtime
// holds an anchor it is the L2 wait unchanged: that is already the longest
// wait that keeps a retry inside the runtime's deadline. While it holds none
// (its lease ran out, or nothing was granted yet) the 1s retry doubles, up to
// a third of the hold bound, so a runtime reachable again is renewed well
// inside its hold (no Hold, L3) and inside any start-up grace (L4), while a
// starved grantor stops hammering runtimes it cannot reach.
func BackoffWait(duration time.Duration, timeouts int, anchored bool, l2 time.Duration) time.Duration {
	if timeouts == 0 || anchored {
		return l2
	}
	return max(l2, min(lease.UnanchoredRetry<<min(timeouts-1, maxBackoffDoublings), holdfastv1.HoldBound(duration)/3))
}
