package grantor

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// TestTheBackoffStaysInsideTheRuntimesDeadline states the back-off's bounds
// with no clock in it: a healthy loop (no timeouts) keeps the L2 cadence, so
// the L6 budget after a renewal (controller/leadership) is unchanged; an
// attempt's bound never passes the cadence nor half of what is left of the
// anchor, so a retry still lands inside the runtime's deadline when the
// grantor recovers; the wait is the L2 wait while the runtime holds an
// anchor, and where it holds none grows to at most a third of the hold
// bound.
func TestTheBackoffStaysInsideTheRuntimesDeadline(t *testing.T) {
	for d := 10 * time.Second; d <= 600*time.Second; d += 5 * time.Second {
		cadence, base := d/lease.CadenceDivisor, RequestTimeout(d)
		for k := 0; k <= 10; k++ {
			for left := time.Duration(0); left <= d; left += 250 * time.Millisecond {
				to := AttemptTimeout(d, k, left)
				if k == 0 && to != base {
					t.Fatalf("lease %v: the first attempt's bound %v, want RequestTimeout %v", d, to, base)
				}
				if to > max(cadence, base) || to < base {
					t.Fatalf("lease %v, %d timeouts, %v left: bound %v outside [%v, cadence %v]", d, k, left, to, base, cadence)
				}
				if left > 0 && to > max(left/2, base) {
					t.Fatalf("lease %v, %d timeouts, %v left: bound %v leaves no room for a retry before the deadline", d, k, left, to)
				}
				l2 := lease.RenewInterval(d, d-left)
				if w := BackoffWait(d, k, left > 0, l2); w != l2 {
					if left > 0 || k == 0 {
						t.Fatalf("lease %v, %d timeouts, %v left: wait %v, want the L2 wait %v", d, k, left, w, l2)
					}
					if w < l2 || w > holdfastv1.HoldBound(d)/3 {
						t.Fatalf("lease %v, %d timeouts, no anchor: wait %v outside [%v, a third of the hold bound %v]", d, k, w, l2, holdfastv1.HoldBound(d)/3)
					}
				}
			}
		}
		if got, want := AttemptTimeout(d, 10, 0), max(min(cadence, base<<maxBackoffDoublings), base); got != want {
			t.Fatalf("lease %v: the bound after many timeouts %v, want %v (the cadence, or %d doublings)", d, got, want, maxBackoffDoublings)
		}
	}
}

// waitAttempt waits until the loop has sent n grants and its attempt is in
// flight: the attempt's bound is the clock's only waiter.
func waitAttempt(t *testing.T, g *Grantor, clk *clocktesting.FakeClock, e *endpoint, n int) {
	t.Helper()
	waitFor(t, "an attempt in flight", func() bool { return len(e.received()) == n && !parked(g, unit) && clk.Waiters() == 1 })
}

func observe(t *testing.T, g *Grantor) Observation {
	t.Helper()
	o, ok := g.Observe(unit)
	if !ok {
		t.Fatal("no loop")
	}
	return o
}

// TestAStarvedRenewalIsReadLateNotAbandoned: an attempt that got no answer
// within its bound is an Unreachable timeout, counted and shown in the
// backing-off gauge; the next attempt waits for its answer twice as long
// (the anchor has room), so a late acknowledgement is read instead of
// abandoned with its connection; the wait between the two is the L2 wait,
// and every attempt goes out before the runtime's deadline.
func TestAStarvedRenewalIsReadLateNotAbandoned(t *testing.T) {
	clk, e, g := renewing(t, 1)
	settle(t, g, e, 2)
	clk.Step(5 * time.Second)
	settle(t, g, e, 3)
	deadline := observe(t, g).Anchor.Add(30 * time.Second)
	timeouts, backing := testutil.ToFloat64(renewalTimeouts), testutil.ToFloat64(backingOff)

	e.setHang(true)
	clk.Step(5 * time.Second) // grant 4 at 1010 gets no answer
	waitAttempt(t, g, clk, e, 4)
	clk.Step(RequestTimeout(30 * time.Second))
	settle(t, g, e, 4)
	o := observe(t, g)
	if o.Timeouts != 1 || o.LastAttempt.Outcome != Unreachable || !strings.HasPrefix(o.LastAttempt.Message, "no answer within 2s") {
		t.Fatalf("an attempt with no answer in its bound: %+v", o)
	}
	if got := testutil.ToFloat64(renewalTimeouts) - timeouts; got != 1 {
		t.Fatalf("timeouts counted %v, want 1", got)
	}
	if got := testutil.ToFloat64(backingOff) - backing; got != 1 {
		t.Fatalf("loops backing off %v, want 1", got)
	}

	// The runtime still holds its anchor: the L2 wait (half of what is left
	// or the cadence), no longer.
	left := deadline.Sub(clk.Now())
	wait := lease.RenewInterval(30*time.Second, 30*time.Second-left)
	stepNothingDue(t, g, clk, e, wait-wait/jitterDivisor-time.Millisecond)
	clk.Step(wait / jitterDivisor)
	waitAttempt(t, g, clk, e, 5)
	if !clk.Now().Before(deadline) {
		t.Fatalf("the retry went out at %v, past the runtime's deadline %v", clk.Now(), deadline)
	}
	// The bound doubled: at 2s the attempt is still waiting for its answer.
	clk.Step(RequestTimeout(30 * time.Second))
	if clk.Waiters() != 1 || parked(g, unit) || observe(t, g).Attempts != o.Attempts {
		t.Fatal("the second attempt was abandoned at the first one's bound")
	}
	e.setHang(false) // the late answer arrives
	settle(t, g, e, 5)
	o = observe(t, g)
	if o.LastAttempt.Outcome != Acknowledged || o.Timeouts != 0 || !o.LastAck.Equal(clk.Now()) {
		t.Fatalf("the late acknowledgement was not read: %+v", o)
	}
	if got := testutil.ToFloat64(backingOff) - backing; got != 0 {
		t.Fatalf("loops backing off %v after an answer, want 0", got)
	}
}

// TestWithNoAnchorTheRetryBacksOffToAThirdOfTheHoldBound: a runtime that
// holds no lease from this grantor and does not answer is retried 1s, 2s,
// 4s, then every 5s (a third of the 15s hold bound of a 30s lease) after
// each attempt's bound, instead of every second: a starved grantor stops
// hammering what it cannot reach, and a runtime that answers again is still
// renewed well inside its hold bound.
func TestWithNoAnchorTheRetryBacksOffToAThirdOfTheHoldBound(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	e := newEndpoint(t, 1)
	e.setHang(true)
	g := New(Options{Name: "ctl-0", Clock: clk, TLS: testGrantor(t)})
	defer g.StopAll()
	g.Ensure(Target{Unit: unit, Epoch: 1, Address: e.addr(), Duration: 30 * time.Second})
	for i, want := range []struct{ bound, wait time.Duration }{
		{2 * time.Second, time.Second}, {4 * time.Second, 2 * time.Second}, {5 * time.Second, 4 * time.Second},
		{5 * time.Second, 5 * time.Second}, {5 * time.Second, 5 * time.Second},
	} {
		n := i + 1
		waitAttempt(t, g, clk, e, n)
		clk.Step(want.bound - time.Millisecond)
		if clk.Waiters() != 1 || parked(g, unit) {
			t.Fatalf("attempt %d abandoned before its bound %v", n, want.bound)
		}
		clk.Step(time.Millisecond)
		settle(t, g, e, n)
		if o := observe(t, g); o.Timeouts != n {
			t.Fatalf("attempt %d: %d consecutive timeouts, want %d", n, o.Timeouts, n)
		}
		stepNothingDue(t, g, clk, e, want.wait-time.Millisecond)
		clk.Step(time.Millisecond)
	}
	// The runtime answers again: at once renewed, and the back-off ends.
	e.setHang(false)
	settle(t, g, e, 7)
	if o := observe(t, g); !o.Acked() || o.Timeouts != 0 {
		t.Fatalf("after the runtime answered: %+v", o)
	}
}

// TestLoopsStartedTogetherSpreadTheirPhases: loops started at one instant
// (a leader's warm start) do not renew in step: each shortens its first
// wait at the cadence by a random part, and none lengthens it.
func TestLoopsStartedTogetherSpreadTheirPhases(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	g := New(Options{Name: "ctl-0", Clock: clk, TLS: testGrantor(t)})
	defer g.StopAll()
	const n = 20
	var eps []*endpoint
	var units []types.NamespacedName
	for i := range n {
		u := types.NamespacedName{Namespace: "plant", Name: fmt.Sprintf("u-%d", i)}
		e := newUnitEndpoint(t, u, 1)
		eps, units = append(eps, e), append(units, u)
		g.Ensure(Target{Unit: u, Epoch: 1, Address: e.addr(), Duration: 30 * time.Second})
	}
	// Every loop waits on its own timer: a fired timer leaves the clock's
	// waiters in Step, and a loop with an attempt in flight is not parked.
	handled := func() bool {
		if clk.Waiters() != n {
			return false
		}
		for _, u := range units {
			if !parked(g, u) {
				return false
			}
		}
		return true
	}
	waitFor(t, "every loop anchored and parked", func() bool {
		for _, e := range eps {
			if len(e.received()) != 2 {
				return false
			}
		}
		return handled()
	})
	// Through the first cadence in 250 ms steps: in which step did each
	// loop send its third grant?
	at := map[int]int{}
	for step := 1; step <= 20; step++ {
		clk.Step(250 * time.Millisecond)
		waitFor(t, "every loop to handle the step", handled)
		for i, e := range eps {
			if _, seen := at[i]; !seen && len(e.received()) == 3 {
				at[i] = step
			}
		}
	}
	if len(at) != n {
		t.Fatalf("%d of %d loops renewed within the 5s cadence: a spread wait must never be longer", len(at), n)
	}
	steps := map[int]bool{}
	for _, s := range at {
		steps[s] = true
	}
	if len(steps) < 5 {
		t.Fatalf("the loops renewed in %d of 20 quarter-second steps (%v): still in step", len(steps), at)
	}
}

// TestEveryAnchoredWaitIsShortenedByItsJitterOnly: after the first (spread)
// wait, each wait at the cadence is between nine tenths of it (less the plan
// grid) and all of it, ends on the plan grid, and the waits differ, so loops
// a stall put in step drift apart again.
func TestEveryAnchoredWaitIsShortenedByItsJitterOnly(t *testing.T) {
	clk, e, g := renewing(t, 1)
	settle(t, g, e, 2)
	clk.Step(5 * time.Second) // past the spread first wait
	settle(t, g, e, 3)
	last := clk.Now()
	intervals := map[time.Duration]bool{}
	for i := 4; i <= 23; i++ {
		for len(e.received()) < i {
			clk.Step(10 * time.Millisecond)
			waitFor(t, "the step handled", func() bool { return parked(g, unit) && clk.Waiters() == 1 || len(e.received()) >= i })
		}
		settle(t, g, e, i)
		d := clk.Now().Sub(last)
		if d < 4500*time.Millisecond-planGrid || d > 5*time.Second {
			t.Fatalf("grant %d went out %v after the previous one: outside [4.5s less the grid, 5s]", i, d)
		}
		if ms := clk.Now().UnixMilli(); ms%planGrid.Milliseconds() != 0 {
			t.Fatalf("grant %d went out at %d ms, off the %v plan grid", i, ms, planGrid)
		}
		intervals[d] = true
		last = clk.Now()
	}
	if len(intervals) < 3 {
		t.Fatalf("20 waits took %d distinct values: no jitter", len(intervals))
	}
}
