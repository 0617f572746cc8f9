package v1alpha1

import (
	"testing"
	"time"
)

func TestHoldBoundIsHalfTheLeaseClampedTo5To30Seconds(t *testing.T) {
	for _, tc := range []struct {
		lease, want time.Duration
	}{
		{10 * time.Second, 5 * time.Second},
		{6 * time.Second, 5 * time.Second},
		{30 * time.Second, 15 * time.Second},
		{31 * time.Second, 15500 * time.Millisecond},
		{60 * time.Second, 30 * time.Second},
		{600 * time.Second, 30 * time.Second},
	} {
		if got := HoldBound(tc.lease); got != tc.want {
			t.Errorf("HoldBound(%v) = %v, want %v", tc.lease, got, tc.want)
		}
	}
}

func TestFailoverMarginCoversHoldBound(t *testing.T) {
	// L3: whatever the lease, the default margin is never shorter than the
	// hold bound, so a new writer never starts before the old one stopped.
	for s := int32(MinLeaseDuration / time.Second); s <= int32(MaxLeaseDuration/time.Second); s++ {
		a := Availability{LeaseDurationSeconds: s}
		if a.RebindMargin() < a.HoldBound() {
			t.Fatalf("lease %ds: default margin %v is below the hold bound %v", s, a.RebindMargin(), a.HoldBound())
		}
		if got, want := a.RebindMargin(), a.HoldBound()+5*time.Second; got != want {
			t.Fatalf("lease %ds: default margin %v, want hold bound + 5s = %v", s, got, want)
		}
	}
	margin := int32(7)
	a := Availability{LeaseDurationSeconds: 10, RebindMarginSeconds: &margin}
	if got := a.RebindMargin(); got != 7*time.Second {
		t.Errorf("a set margin is used as set: got %v, want 7s", got)
	}
}

func TestLeaseStateCarriedOnlyWhenItsEpochIsBehindTheBinding(t *testing.T) {
	for _, tc := range []struct {
		name       string
		stateEpoch int64
		want       bool
	}{
		{"no epoch is this binding's own", 0, false},
		{"observed at this binding", 4, false},
		{"carried from the previous binding", 3, true},
	} {
		b := RuntimeBinding{Epoch: 4, LeaseState: LeaseExpired, LeaseStateEpoch: tc.stateEpoch}
		if got := b.LeaseStateCarried(); got != tc.want {
			t.Errorf("%s: LeaseStateCarried() = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestSwapPhaseFinished(t *testing.T) {
	for p, want := range map[SwapPhase]bool{
		SwapPending: false, SwapRunning: false,
		SwapSucceeded: true, SwapRolledBack: true, SwapAbandoned: true, SwapRefused: true,
	} {
		if got := p.Finished(); got != want {
			t.Errorf("%s.Finished() = %v, want %v", p, got, want)
		}
	}
}
