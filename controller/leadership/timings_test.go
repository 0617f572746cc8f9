package leadership

import (
	"strings"
	"testing"
	"time"

	"github.com/holdfast-io/holdfast/api/lease"
)

// TestGrantorGapFitsInsideTheBudgetAfterARenewal holds the election timings,
// the apiserver health check, the polls and the warm start against what a
// runtime has left after a renewal in the worst phase, with 5s to spare, at
// the default 30s lease. Each of the three fixes is necessary: reverting any
// one of them, or all of them to client-go's defaults, breaks it.
func TestGrantorGapFitsInsideTheBudgetAfterARenewal(t *testing.T) {
	d := Defaults()
	if err := d.Validate(); err != nil {
		t.Fatalf("the defaults are refused: %v", err)
	}
	budget := BudgetAfterARenewal(ReferenceLease)
	if budget != 20*time.Second {
		t.Fatalf("budget after a renewal at 30s = %v, want 20s (lease minus two sixths)", budget)
	}
	// Spelled out: 2+2 detection, 2.2 poll, 6 election, 2.2 poll, 0.5 warm start.
	if got, want := d.Gap(), 14900*time.Millisecond; got != want {
		t.Fatalf("gap = %v, want %v", got, want)
	}
	if spare := d.Spare(ReferenceLease); spare < RequiredSpare {
		t.Fatalf("the grantor gap %v leaves %v of the %v budget, want at least %v", d.Gap(), spare, budget, RequiredSpare)
	}

	clientGo := Timings{
		ElectionLeaseDuration: 15 * time.Second, ElectionRenewDeadline: 10 * time.Second, ElectionRetryPeriod: 2 * time.Second,
		ReadIdleTimeout: 30 * time.Second, PingTimeout: 15 * time.Second, WarmStart: d.WarmStart,
	}
	for _, tc := range []struct {
		name string
		t    Timings
	}{
		{"client-go's defaults", clientGo},
		{"controller-runtime's election", with(d, func(t *Timings) {
			t.ElectionLeaseDuration, t.ElectionRenewDeadline, t.ElectionRetryPeriod = 15*time.Second, 10*time.Second, 2*time.Second
		})},
		{"client-go's health check", with(d, func(t *Timings) { t.ReadIdleTimeout, t.PingTimeout = 30*time.Second, 15*time.Second })},
		{"a warm start by reconcile instead of from the cache", with(d, func(t *Timings) { t.WarmStart = 4300 * time.Millisecond })},
	} {
		if spare := tc.t.Spare(ReferenceLease); spare >= RequiredSpare {
			t.Errorf("%s: gap %v leaves %v, yet the test would pass: it must hold this term", tc.name, tc.t.Gap(), spare)
		}
	}
	// The third fix is the cadence: at a third of the lease the budget
	// after a renewal would be 10s.
	if third := ReferenceLease - 2*ReferenceLease/3; third-d.Gap() >= RequiredSpare {
		t.Errorf("a cadence of a third would leave %v", third-d.Gap())
	}
	if got := lease.RenewInterval(ReferenceLease, 0); got != ReferenceLease/6 {
		t.Errorf("the renewal cadence is a sixth of the lease (L2), got %v", got)
	}
}

func with(t Timings, f func(*Timings)) Timings { f(&t); return t }

func TestTimingsClientGoWouldRefuseOrMisreadAreRefusedWithTheFlagName(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func(*Timings)
		want string
	}{
		{"lease not above renew deadline", func(t *Timings) { t.ElectionLeaseDuration = 4 * time.Second }, "--leader-election-lease-duration"},
		{"renew deadline not above jittered retry", func(t *Timings) { t.ElectionRetryPeriod = 4 * time.Second }, "--leader-election-renew-deadline"},
		{"read-idle of zero disables the check", func(t *Timings) { t.ReadIdleTimeout = 0 }, "--apiserver-read-idle-timeout"},
		{"a fraction of a second", func(t *Timings) { t.PingTimeout = 1500 * time.Millisecond }, "--apiserver-ping-timeout"},
	} {
		tm := with(Defaults(), tc.f)
		err := tm.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}
