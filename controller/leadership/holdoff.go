package leadership

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Tenure records when this process last acquired the grantor's leadership,
// for the hold-off every new leader observes.
type Tenure struct {
	clock     clock.PassiveClock
	standDown time.Duration

	mu       sync.Mutex
	acquired time.Time
}

// NewTenure keeps the tenure against clk; standDown is --lease-stand-down,
// the longest a lost predecessor may go on renewing.
func NewTenure(clk clock.PassiveClock, standDown time.Duration) *Tenure {
	return &Tenure{clock: clk, standDown: standDown}
}

// Acquire records that leadership was acquired now, unless the reconciler's
// first pass already did in this tenure.
func (t *Tenure) Acquire() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.acquired.IsZero() {
		t.acquired = t.clock.Now()
	}
	leaderGauge.Set(1)
	return t.acquired
}

// Acquired is when leadership was last acquired; zero if never.
func (t *Tenure) Acquired() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.acquired
}

// HoldOffUntil is the instant before which this leader reads no lease expiry
// of a unit as a fence: a predecessor that lost leadership without being
// asked renews what it held for up to the stand-down after the instant this
// process could first acquire, and the runtime it held fences at most a
// lease plus the hold bound after that, which the margin covers. Zero when
// there is no hold-off: --lease-stand-down 0 disables the stand-down and the
// hold-off together.
//
// Only a leader asks. A leader whose warm start has not recorded the
// acquisition yet (the two start together) records it now: the hold-off
// must hold from the first pass.
func (t *Tenure) HoldOffUntil(lease, margin time.Duration) time.Time {
	t.mu.Lock()
	if t.acquired.IsZero() {
		t.acquired = t.clock.Now()
		leaderGauge.Set(1)
	}
	acquired := t.acquired
	t.mu.Unlock()
	return HoldOffDeadline(acquired, t.standDown, lease, margin)
}

// HoldOffDeadline is acquired + standDown + lease + margin, or zero when the
// stand-down is disabled or nothing was acquired.
func HoldOffDeadline(acquired time.Time, standDown, lease, margin time.Duration) time.Time {
	if standDown <= 0 || acquired.IsZero() {
		return time.Time{}
	}
	return acquired.Add(standDown + lease + margin)
}
