package lease

import (
	"testing"
	"time"
)

// TestRenewIntervalAlwaysFitsInsideTheAnchor states L2's duty with no clock
// in it: from any anchor age that leaves room for the minimum interval, the
// next attempt lands before the runtime's deadline (anchor + duration) with
// room for two more attempts at the same spacing, and a fresh anchor renews
// at a sixth of the lease.
func TestRenewIntervalAlwaysFitsInsideTheAnchor(t *testing.T) {
	for d := 10 * time.Second; d <= 600*time.Second; d += 5 * time.Second {
		if got := RenewInterval(d, 0); got != d/6 {
			t.Fatalf("RenewInterval(%v, 0) = %v, want a sixth of the lease %v", d, got, d/6)
		}
		for age := time.Duration(0); age < d-3*MinRenewInterval; age += 97 * time.Millisecond {
			i := RenewInterval(d, age)
			if i < MinRenewInterval {
				t.Fatalf("RenewInterval(%v, %v) = %v, below the minimum %v", d, age, i, MinRenewInterval)
			}
			if age+3*i > d {
				t.Fatalf("RenewInterval(%v, %v) = %v: the attempt and two retries at that spacing end at %v, past the runtime's deadline %v",
					d, age, i, age+3*i, d)
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
