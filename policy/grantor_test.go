package policy

import (
	"strings"
	"testing"
	"time"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
)

// TestGrantorGapFitsInsideTheBudgetAfterARenewal holds the election timings,
// the apiserver health check, the polls and the warm start against what a
// runtime has left after a renewal in the worst phase, with 5s to spare, at
// the lease floor the shipped timings make: the default 30s lease. Each of
// the three fixes is necessary: reverting any one of them, or all of them to
// client-go's defaults, breaks it.
func TestGrantorGapFitsInsideTheBudgetAfterARenewal(t *testing.T) {
	d := DefaultGrantorTimings()
	if err := d.Validate(); err != nil {
		t.Fatalf("the defaults are refused: %v", err)
	}
	// Spelled out: 2+2 detection, 2.2 poll, 6 election, 2.2 poll, 0.5 warm start.
	if got, want := d.Gap(), 14900*time.Millisecond; got != want {
		t.Fatalf("gap = %v, want %v", got, want)
	}
	floor, ok := d.LeaseFloor()
	if !ok || floor != ReferenceLease {
		t.Fatalf("the shipped timings' floor = %v (%v), want the default lease %v", floor, ok, ReferenceLease)
	}
	if budget := BudgetAfterARenewal(floor); budget != 20*time.Second {
		t.Fatalf("budget after a renewal at the floor = %v, want 20s (lease minus two sixths)", budget)
	}
	if spare := d.Spare(floor); spare < RequiredSpare {
		t.Fatalf("at the floor %v the grantor gap %v leaves %v, want at least %v", floor, d.Gap(), spare, RequiredSpare)
	}
	if spare := d.Spare(floor - time.Second); spare >= RequiredSpare {
		t.Fatalf("a second below the floor the gap still leaves %v: the floor is not the least lease kept", spare)
	}

	clientGo := GrantorTimings{
		ElectionLeaseDuration: 15 * time.Second, ElectionRenewDeadline: 10 * time.Second, ElectionRetryPeriod: 2 * time.Second,
		ReadIdleTimeout: 30 * time.Second, PingTimeout: 15 * time.Second, WarmStart: d.WarmStart,
	}
	for _, tc := range []struct {
		name string
		t    GrantorTimings
	}{
		{"client-go's defaults", clientGo},
		{"controller-runtime's election", with(d, func(t *GrantorTimings) {
			t.ElectionLeaseDuration, t.ElectionRenewDeadline, t.ElectionRetryPeriod = 15*time.Second, 10*time.Second, 2*time.Second
		})},
		{"client-go's health check", with(d, func(t *GrantorTimings) { t.ReadIdleTimeout, t.PingTimeout = 30*time.Second, 15*time.Second })},
		{"a warm start by reconcile instead of from the cache", with(d, func(t *GrantorTimings) { t.WarmStart = 4300 * time.Millisecond })},
	} {
		if spare := tc.t.Spare(floor); spare >= RequiredSpare {
			t.Errorf("%s: gap %v leaves %v at %v, yet the test would pass: it must hold this term", tc.name, tc.t.Gap(), spare, floor)
		}
	}
	// The third fix is the cadence: at a third of the lease the budget
	// after a renewal would be 10s.
	if third := floor - 2*floor/3; third-d.Gap() >= RequiredSpare {
		t.Errorf("a cadence of a third would leave %v", third-d.Gap())
	}
	if got := leaseapi.RenewInterval(floor, 0); got != floor/6 {
		t.Errorf("the renewal cadence is a sixth of the lease (L2), got %v", got)
	}
}

func with(t GrantorTimings, f func(*GrantorTimings)) GrantorTimings { f(&t); return t }

// Timings no lease up to the API's maximum survives are refused.
func TestTimingsNoLeaseSurvivesAreRefused(t *testing.T) {
	slow := with(DefaultGrantorTimings(), func(t *GrantorTimings) {
		t.ElectionLeaseDuration, t.ElectionRenewDeadline = 400*time.Second, 300*time.Second
	})
	if err := slow.Validate(); err == nil || !strings.Contains(err.Error(), "fits no lease up to 10m0s") {
		t.Fatalf("timings no lease survives are accepted: %v", err)
	}
}

func TestTimingsClientGoWouldRefuseOrMisreadAreRefusedWithTheFlagName(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func(*GrantorTimings)
		want string
	}{
		{"lease not above renew deadline", func(t *GrantorTimings) { t.ElectionLeaseDuration = 4 * time.Second }, "--leader-election-lease-duration"},
		{"renew deadline not above jittered retry", func(t *GrantorTimings) { t.ElectionRetryPeriod = 4 * time.Second }, "--leader-election-renew-deadline"},
		{"read-idle of zero disables the check", func(t *GrantorTimings) { t.ReadIdleTimeout = 0 }, "--apiserver-read-idle-timeout"},
		{"a fraction of a second", func(t *GrantorTimings) { t.PingTimeout = 1500 * time.Millisecond }, "--apiserver-ping-timeout"},
	} {
		tm := with(DefaultGrantorTimings(), tc.f)
		err := tm.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}
