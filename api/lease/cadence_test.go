package lease

import (
	"testing"
	"time"
)

// TestRenewIntervalAlwaysFitsInsideTheAnchor states L2's duty with no clock
// in it: from any anchor age that leaves room for the minimum interval, the
// next attempt and one more at the same spacing land inside the runtime's
// deadline (anchor + duration), and a fresh anchor renews at a sixth of the
// lease.
func TestRenewIntervalAlwaysFitsInsideTheAnchor(t *testing.T) {
	for d := 10 * time.Second; d <= 600*time.Second; d += 5 * time.Second {
		if got := RenewInterval(d, 0); got != d/6 {
			t.Fatalf("RenewInterval(%v, 0) = %v, want a sixth of the lease %v", d, got, d/6)
		}
		for age := time.Duration(0); age < d-2*MinRenewInterval; age += 97 * time.Millisecond {
			i := RenewInterval(d, age)
			if i < MinRenewInterval {
				t.Fatalf("RenewInterval(%v, %v) = %v, below the minimum %v", d, age, i, MinRenewInterval)
			}
			if age+2*i > d {
				t.Fatalf("RenewInterval(%v, %v) = %v: the attempt and a retry at that spacing end at %v, past the runtime's deadline %v",
					d, age, i, age+2*i, d)
			}
		}
	}
}

// TestRenewIntervalRetriesOneRefusalInsideTheDeadline is the bench's case
// (#1810): after a renewal at t the runtime's anchor is t - interval; one
// refused POST at t + interval must be retried before anchor + duration.
func TestRenewIntervalRetriesOneRefusalInsideTheDeadline(t *testing.T) {
	for d := 10 * time.Second; d <= 600*time.Second; d += time.Second {
		i := RenewInterval(d, 0)
		anchorAge := i // the runtime's anchor is one renewal older than ours
		refusedAt := anchorAge + RenewInterval(d, anchorAge)
		retryAt := refusedAt + RenewInterval(d, refusedAt)
		if retryAt >= d {
			t.Fatalf("lease %v: a single refusal is retried at anchor+%v, not before the runtime's deadline anchor+%v", d, retryAt, d)
		}
		if d-retryAt < d/3 {
			t.Fatalf("lease %v: a single refusal is retried at anchor+%v, leaving less than a third of the lease", d, retryAt)
		}
	}
}

func TestRenewIntervalWithoutAnAnchorRetriesWithinASecond(t *testing.T) {
	if got := RenewInterval(30*time.Second, 31*time.Second); got != UnanchoredRetry {
		t.Fatalf("RenewInterval past the anchor = %v, want %v", got, UnanchoredRetry)
	}
	if got := RenewInterval(30*time.Second, -time.Second); got != 5*time.Second {
		t.Fatalf("RenewInterval with a negative age = %v, want the cadence", got)
	}
}
