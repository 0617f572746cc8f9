package grantor

import (
	"testing"
	"time"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// TestRenewIntervalAlwaysFitsInsideTheAnchor states L2's duty with no clock
// in it: whatever the lease and wherever the runtime's anchor is, the next
// attempt is sent before the anchor runs out, a healthy runtime is renewed
// every sixth of its lease, and after one refused POST the retry still lands
// inside the anchor with room for another.
func TestRenewIntervalAlwaysFitsInsideTheAnchor(t *testing.T) {
	for d := holdfastv1.MinLeaseDuration; d <= holdfastv1.MaxLeaseDuration; d += time.Second {
		cadence := d / 6
		for age := time.Duration(0); age <= d-2*MinRetry; age += 10 * time.Millisecond {
			iv := RenewInterval(d, age)
			if iv <= 0 || iv > cadence {
				t.Fatalf("lease %v anchor age %v: interval %v outside (0, %v]", d, age, iv, cadence)
			}
			if age+iv >= d {
				t.Fatalf("lease %v anchor age %v: the next attempt at %v is past the runtime's deadline", d, age, age+iv)
			}
		}
		// A healthy runtime: after an acknowledged renewal its anchor is
		// the previous one, one interval old.
		if iv := RenewInterval(d, cadence); iv != cadence {
			t.Fatalf("lease %v: a healthy runtime is renewed every %v, want a sixth of the lease %v", d, iv, cadence)
		}
		// One refused POST: the retry goes out with the anchor two
		// intervals old and lands with at least half the lease left.
		retry := RenewInterval(d, 2*cadence)
		if left := d - 2*cadence - retry; left < d/2 {
			t.Fatalf("lease %v: after one refused POST the retry leaves %v of the anchor, want at least half the lease", d, left)
		}
	}
}

// The seed's fault (#1810): measured against the grantor's own last success
// instead of the runtime's anchor, one missed renewal retried exactly on the
// runtime's deadline. Walk a refused POST through the arithmetic with the
// runtime's real anchor and check the retry is ahead of its deadline.
func TestOneRefusedRenewalNeverReachesTheRuntimesDeadline(t *testing.T) {
	for _, d := range []time.Duration{10 * time.Second, 30 * time.Second, 600 * time.Second} {
		var now time.Duration
		prevAck, lastAck := time.Duration(0), time.Duration(0)
		// Steady state: a few acknowledged renewals.
		for range 4 {
			now += RenewInterval(d, now-prevAck)
			prevAck, lastAck = lastAck, now
		}
		runtimeDeadline := prevAck + d // dated from the age the last grant carried
		// The next POST is refused; the retry is computed against the
		// anchor the runtime still holds.
		now += RenewInterval(d, now-prevAck)
		retryAt := now + RenewInterval(d, now-prevAck)
		if retryAt >= runtimeDeadline {
			t.Errorf("lease %v: the retry after one refused POST at %v is not ahead of the runtime's deadline %v", d, retryAt, runtimeDeadline)
		}
		_ = lastAck
	}
}

func TestWithoutAnAnchorTheGrantorRetriesAtMostEverySecond(t *testing.T) {
	if got := RenewInterval(30*time.Second, 31*time.Second); got != time.Second {
		t.Errorf("past the anchor: %v, want 1s", got)
	}
	if got := StartupInterval(30 * time.Second); got != time.Second {
		t.Errorf("StartupInterval(30s) = %v, want 1s", got)
	}
	if got := RequestTimeout(10 * time.Second); got > 10*time.Second/6 {
		t.Errorf("RequestTimeout(10s) = %v, longer than the cadence", got)
	}
}
