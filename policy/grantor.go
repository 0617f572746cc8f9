package policy

import (
	"flag"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/leaderelection"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// The grantor's shipped timings (docs/design.md §3 L6): holdfast-controller
// --role=units runs on them, and holdfast-webhook derives the lease floor
// from them (L14). The chart renders one set of values into both.
const (
	// DefaultElectionLeaseDuration, DefaultElectionRenewDeadline and
	// DefaultElectionRetryPeriod are the grantor's election, 6s/4s/1s rather
	// than controller-runtime's 15s/10s/2s: for this process the election is
	// most of the grantor gap.
	DefaultElectionLeaseDuration = 6 * time.Second
	DefaultElectionRenewDeadline = 4 * time.Second
	DefaultElectionRetryPeriod   = 1 * time.Second
	// DefaultAPIServerReadIdleTimeout and DefaultAPIServerPingTimeout are
	// client-go's HTTP/2 health check of the grantor's apiserver
	// connections: a PING after 2s without a frame, the connection closed
	// 2s later without an answer. A peer that lost power is given up in 4s
	// instead of client-go's 45s.
	DefaultAPIServerReadIdleTimeout = 2 * time.Second
	DefaultAPIServerPingTimeout     = 2 * time.Second
	// WarmStartBudget is what the gap allows from acquisition to the first
	// grant that extends a runtime: a list from the synced cache, one POST
	// that carries no age, and one that does. Measured in
	// BenchmarkWarmStart (docs/benchmarks.md).
	WarmStartBudget = 500 * time.Millisecond
	// RequiredSpare is what the gap must leave of a runtime's budget after a
	// renewal, at every admissible lease.
	RequiredSpare = 5 * time.Second
	// ReferenceLease is the Unit default; the shipped timings make it the
	// floor.
	ReferenceLease = 30 * time.Second
)

// GrantorTimings are the terms of the grantor gap: the installed grantor's
// election, its apiserver connections' dead-peer detection, and the warm
// start.
type GrantorTimings struct {
	ElectionLeaseDuration time.Duration
	ElectionRenewDeadline time.Duration
	ElectionRetryPeriod   time.Duration
	ReadIdleTimeout       time.Duration
	PingTimeout           time.Duration
	WarmStart             time.Duration
}

// DefaultGrantorTimings are the shipped timings.
func DefaultGrantorTimings() GrantorTimings {
	return GrantorTimings{
		ElectionLeaseDuration: DefaultElectionLeaseDuration,
		ElectionRenewDeadline: DefaultElectionRenewDeadline,
		ElectionRetryPeriod:   DefaultElectionRetryPeriod,
		ReadIdleTimeout:       DefaultAPIServerReadIdleTimeout,
		PingTimeout:           DefaultAPIServerPingTimeout,
		WarmStart:             WarmStartBudget,
	}
}

// The flags both binaries read the timings from, named as holdfast-controller
// names them.
const (
	FlagElectionLeaseDuration = "leader-election-lease-duration"
	FlagElectionRenewDeadline = "leader-election-renew-deadline"
	FlagElectionRetryPeriod   = "leader-election-retry-period"
	FlagReadIdleTimeout       = "apiserver-read-idle-timeout"
	FlagPingTimeout           = "apiserver-ping-timeout"
)

// AddFlags binds the five configurable timings to their flags, each
// defaulting to the shipped value; the warm start is a budget, not a
// setting, and stays WarmStartBudget.
func (t *GrantorTimings) AddFlags(fs *flag.FlagSet, usage func(name string) string) {
	t.WarmStart = WarmStartBudget
	fs.DurationVar(&t.ElectionLeaseDuration, FlagElectionLeaseDuration, DefaultElectionLeaseDuration, usage(FlagElectionLeaseDuration))
	fs.DurationVar(&t.ElectionRenewDeadline, FlagElectionRenewDeadline, DefaultElectionRenewDeadline, usage(FlagElectionRenewDeadline))
	fs.DurationVar(&t.ElectionRetryPeriod, FlagElectionRetryPeriod, DefaultElectionRetryPeriod, usage(FlagElectionRetryPeriod))
	fs.DurationVar(&t.ReadIdleTimeout, FlagReadIdleTimeout, DefaultAPIServerReadIdleTimeout, usage(FlagReadIdleTimeout))
	fs.DurationVar(&t.PingTimeout, FlagPingTimeout, DefaultAPIServerPingTimeout, usage(FlagPingTimeout))
}

// Args are the flags that carry t, as the chart renders them.
func (t GrantorTimings) Args() []string {
	return []string{
		fmt.Sprintf("--%s=%v", FlagElectionLeaseDuration, t.ElectionLeaseDuration),
		fmt.Sprintf("--%s=%v", FlagElectionRenewDeadline, t.ElectionRenewDeadline),
		fmt.Sprintf("--%s=%v", FlagElectionRetryPeriod, t.ElectionRetryPeriod),
		fmt.Sprintf("--%s=%v", FlagReadIdleTimeout, t.ReadIdleTimeout),
		fmt.Sprintf("--%s=%v", FlagPingTimeout, t.PingTimeout),
	}
}

// Poll is the longest wait between two election attempts: client-go waits
// RetryPeriod plus up to JitterFactor times it (wait.Jitter).
func (t GrantorTimings) Poll() time.Duration {
	return t.ElectionRetryPeriod + time.Duration(leaderelection.JitterFactor*float64(t.ElectionRetryPeriod))
}

// Detection is how long a standby's connection pinned to a dead apiserver
// takes to be given up: read-idle, then the PING's timeout.
func (t GrantorTimings) Detection() time.Duration { return t.ReadIdleTimeout + t.PingTimeout }

// Gap is the worst time from the loss of the leader's node to a grant from
// the new leader that extends a runtime: detection of the dead connection,
// a poll, the whole election lease (a challenger restarts its clock at the
// first record it had not seen), a poll, and the warm start.
func (t GrantorTimings) Gap() time.Duration {
	return t.Detection() + t.Poll() + t.ElectionLeaseDuration + t.Poll() + t.WarmStart
}

// BudgetAfterARenewal is what a runtime has left in the worst phase: its
// anchor is one renewal older than the grantor's last acknowledgement (L1),
// and the leader can be lost up to one interval after that
// acknowledgement, so the lease minus two renewal intervals.
func BudgetAfterARenewal(d time.Duration) time.Duration {
	return d - 2*d/leaseapi.CadenceDivisor
}

// Spare is what the gap leaves of the budget at a lease of d.
func (t GrantorTimings) Spare(d time.Duration) time.Duration {
	return BudgetAfterARenewal(d) - t.Gap()
}

// LeaseFloor is the shortest lease the grantor keeps through a leader
// change (L14): the least whole number of seconds, never below the API's
// MinLeaseDuration, whose budget after a renewal holds the gap with
// RequiredSpare to spare. ok is false when no lease up to MaxLeaseDuration
// does.
func (t GrantorTimings) LeaseFloor() (floor time.Duration, ok bool) {
	for d := holdfastv1.MinLeaseDuration; d <= holdfastv1.MaxLeaseDuration; d += time.Second {
		if t.Spare(d) >= RequiredSpare {
			return d, true
		}
	}
	return 0, false
}

// Arithmetic spells out why a lease of d is or is not kept: the budget
// after a renewal against the gap's terms and the spare.
func (t GrantorTimings) Arithmetic(d time.Duration) string {
	return fmt.Sprintf("after a renewal a runtime has lease - 2 x lease/%d = %v, and the grantor's hand-over takes up to "+
		"%v (dead-peer detection %v + %v, poll %v, election lease %v, poll %v, warm start %v) plus %v to spare = %v",
		leaseapi.CadenceDivisor, BudgetAfterARenewal(d).Round(time.Millisecond), t.Gap(), t.ReadIdleTimeout, t.PingTimeout, t.Poll(),
		t.ElectionLeaseDuration, t.Poll(), t.WarmStart, RequiredSpare, t.Gap()+RequiredSpare)
}

// Validate refuses timings client-go would refuse, health-check values
// client-go would misread (it takes whole seconds, and 0 disables the
// check), and timings no admissible lease survives.
func (t GrantorTimings) Validate() error {
	switch {
	case t.ElectionLeaseDuration <= t.ElectionRenewDeadline:
		return fmt.Errorf("--%s (%v) must be greater than --%s (%v)", FlagElectionLeaseDuration, t.ElectionLeaseDuration, FlagElectionRenewDeadline, t.ElectionRenewDeadline)
	case t.ElectionRenewDeadline <= time.Duration(leaderelection.JitterFactor*float64(t.ElectionRetryPeriod)):
		return fmt.Errorf("--%s (%v) must be greater than %v times --%s (%v)", FlagElectionRenewDeadline, t.ElectionRenewDeadline, leaderelection.JitterFactor, FlagElectionRetryPeriod, t.ElectionRetryPeriod)
	case t.ElectionRetryPeriod <= 0:
		return fmt.Errorf("--%s must be positive", FlagElectionRetryPeriod)
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{FlagReadIdleTimeout, t.ReadIdleTimeout}, {FlagPingTimeout, t.PingTimeout}} {
		if f.d < time.Second || f.d%time.Second != 0 {
			return fmt.Errorf("--%s (%v) must be a whole number of seconds, at least 1s (client-go reads whole seconds, and 0 disables the check)", f.name, f.d)
		}
	}
	if _, ok := t.LeaseFloor(); !ok {
		return fmt.Errorf("the grantor's hand-over (%v) plus %v to spare fits no lease up to %v: %s",
			t.Gap(), RequiredSpare, holdfastv1.MaxLeaseDuration, t.Arithmetic(holdfastv1.MaxLeaseDuration))
	}
	return nil
}

// LeaseFloorError refuses a Failover unit's lease below the floor of the
// installed grantor (L14), with the arithmetic; nil when the lease is kept
// or the unit holds no lease (Autonomy).
func LeaseFloorError(path *field.Path, a *holdfastv1.Availability, t GrantorTimings) *field.Error {
	if a.Mode != holdfastv1.Failover {
		return nil
	}
	floor, ok := t.LeaseFloor()
	if !ok || a.LeaseDuration() >= floor {
		return nil
	}
	return field.Invalid(path.Child("leaseDurationSeconds"), a.LeaseDurationSeconds, fmt.Sprintf(
		"must be at least %d, the lease floor of the installed grantor, so a leader change never fences a healthy runtime: %s; at %ds it has %v",
		int(floor/time.Second), t.Arithmetic(a.LeaseDuration()), int(floor/time.Second), BudgetAfterARenewal(floor).Round(time.Millisecond)))
}
