package periodic_test

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/holdfast-io/holdfast/node-plugin/periodic"
	"github.com/holdfast-io/holdfast/node-plugin/periodic/periodictest"
)

// TestRunPassesAtOnceThenOnEveryTickOfTheInjectedClock: the first pass runs
// at once, the next only when the fake clock has moved a whole interval, and
// the loop ends with its context. No real time passes between ticks.
func TestRunPassesAtOnceThenOnEveryTickOfTheInjectedClock(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	passes := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- periodic.Run(ctx, clk, time.Minute, func(context.Context) { passes <- clk.Now() })
	}()
	start := clk.Now()
	if at := periodictest.Next(t, passes); !at.Equal(start) {
		t.Fatalf("first pass at %v, want at once (%v)", at, start)
	}
	for i := 1; i <= 3; i++ {
		// Half an interval is no tick: the pass that follows the second
		// half is the interval's one.
		clk.Step(30 * time.Second)
		clk.Step(30 * time.Second)
		if at, want := periodictest.Next(t, passes), start.Add(time.Duration(i)*time.Minute); !at.Equal(want) {
			t.Fatalf("pass %d at %v, want %v (one a tick)", i+1, at, want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v, want nil at the context's end", err)
		}
	case at := <-passes:
		t.Fatalf("a pass at %v after the context ended, with no tick", at)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not end with its context")
	}
}

// TestRunKickedPassesOnAKickWithoutATick: a kick runs a pass at once, with
// the injected clock standing still (no interval elapses), and kicks sent
// while no pass waits are not lost: the next pass comes on the kick, not on
// the tick.
func TestRunKickedPassesOnAKickWithoutATick(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	passes := make(chan time.Time)
	kick := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- periodic.RunKicked(ctx, clk, time.Hour, kick, func(context.Context) { passes <- clk.Now() })
	}()
	start := clk.Now()
	if at := periodictest.Next(t, passes); !at.Equal(start) {
		t.Fatalf("first pass at %v, want at once (%v)", at, start)
	}
	for i := 0; i < 3; i++ {
		kick <- struct{}{}
		if at := periodictest.Next(t, passes); !at.Equal(start) {
			t.Fatalf("pass on kick %d at %v, want with the clock standing at %v", i+1, at, start)
		}
	}
	cancel()
	periodictest.Ended(t, done, "RunKicked")
}
