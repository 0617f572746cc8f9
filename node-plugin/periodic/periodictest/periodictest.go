// Package periodictest waits on loops built on periodic.Run in tests: the
// next pass a test's pass function reports, and the loop's end with its
// context. Each wait has a generous real-time deadline only as a failure
// bound: the loops tick on an injected clock.
package periodictest

import (
	"testing"
	"time"
)

// deadline bounds a wait that the injected clock should end at once.
const deadline = 30 * time.Second

// Next is the injected-clock time of the next pass sent on passes; a pass
// that never comes (a loop on another clock never ticks) fails the test.
func Next(t testing.TB, passes <-chan time.Time) time.Time {
	t.Helper()
	select {
	case at := <-passes:
		return at
	case <-time.After(deadline):
		t.Fatal("no pass within 30s of the injected clock's tick")
		return time.Time{}
	}
}

// Ended fails the test unless the loop whose result comes on done ends,
// without an error, once its context is cancelled.
func Ended(t testing.TB, done <-chan error, loop string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s returned %v at the context's end", loop, err)
		}
	case <-time.After(deadline):
		t.Fatalf("%s did not end with its context", loop)
	}
}
