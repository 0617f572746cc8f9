package grantor

import "time"

const (
	// CadenceDivisor: a healthy runtime is renewed every sixth of its lease
	// (§3 L2), so the budget a runtime has after a renewal is five sixths of
	// the lease, four sixths in the worst phase (leadership.GrantorGap).
	CadenceDivisor = 6
	// MinRetry is the shortest wait between two attempts, so a runtime that
	// refuses at once is not hammered as its deadline nears.
	MinRetry = 100 * time.Millisecond
	// UnanchoredRetry is the longest wait while the runtime holds no anchor
	// (nothing granted at this binding yet, or its lease has run out): there
	// is no deadline to fit inside, and a starting runtime should get its
	// lease as soon as it listens.
	UnanchoredRetry = time.Second
)

// RenewInterval is how long to wait before the next renewal, given the lease
// duration and the age of the anchor the runtime holds: the previous
// acknowledged renewal, whose age the last accepted grant carried (§3 L1).
//
// It is measured against that anchor and not against this grantor's own last
// success, because the runtime's deadline is anchor + duration: the interval
// is a sixth of the lease, but never more than half of what is left of the
// anchor, so the next attempt, and the one after it, land inside the anchor
// and one refused POST never fences a healthy runtime.
func RenewInterval(duration, anchorAge time.Duration) time.Duration {
	cadence := duration / CadenceDivisor
	if anchorAge < 0 {
		anchorAge = 0
	}
	if anchorAge >= duration {
		return min(cadence, UnanchoredRetry)
	}
	return max(min(cadence, (duration-anchorAge)/2), MinRetry)
}

// StartupInterval is the wait between attempts at a runtime that holds no
// anchor.
func StartupInterval(duration time.Duration) time.Duration {
	return min(duration/CadenceDivisor, UnanchoredRetry)
}

// RequestTimeout bounds one renewal POST: never longer than the cadence, so
// a wedged handler delays the next attempt by at most one interval.
func RequestTimeout(duration time.Duration) time.Duration {
	return min(duration/CadenceDivisor, 2*time.Second)
}
