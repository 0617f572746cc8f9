// Package poll is the tests' one way to wait for a state they can observe:
// a condition read again and again until it holds or a deadline passes. A
// test waits for what it can see (an object's status, a process's answer),
// never for a cache to be fresh or for a fixed time.
package poll

import (
	"testing"
	"time"
)

// Interval is how often a condition is read again.
const Interval = 25 * time.Millisecond

// Until reads cond every Interval until it holds, and fails t when within
// has passed first, naming what it waited for and the last thing cond
// said while it did not hold.
func Until(t testing.TB, within time.Duration, what string, cond func() (ok bool, last string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if !time.Now().Before(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last: %s", within, what, last)
			return
		}
		time.Sleep(Interval)
	}
}

// True adapts a condition that has nothing to say while it does not hold.
func True(cond func() bool) func() (bool, string) {
	return func() (bool, string) { return cond(), "" }
}
