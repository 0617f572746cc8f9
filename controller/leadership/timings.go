// Package leadership is the grantor's election: its timings and the budget
// they are held against, the hold-off a new leader observes, and what the
// process does when its manager stops (release on a deliberate stop, stand
// down when leadership was lost without being asked). docs/design.md §3 L6.
package leadership

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"k8s.io/client-go/tools/leaderelection"

	"github.com/holdfast-io/holdfast/api/lease"
)

// The grantor's defaults (flags of holdfast-controller).
const (
	// DefaultElectionLeaseDuration, DefaultElectionRenewDeadline and
	// DefaultElectionRetryPeriod are the grantor's election, 6s/4s/1s rather
	// than controller-runtime's 15s/10s/2s: for this process the election is
	// most of the grantor gap.
	DefaultElectionLeaseDuration = 6 * time.Second
	DefaultElectionRenewDeadline = 4 * time.Second
	DefaultElectionRetryPeriod   = 1 * time.Second
	// DefaultAPIServerReadIdleTimeout and DefaultAPIServerPingTimeout are
	// client-go's HTTP/2 health check of this process's apiserver
	// connections: a PING after 2s without a frame, the connection closed
	// 2s later without an answer. A peer that lost power is given up in 4s
	// instead of client-go's 45s.
	DefaultAPIServerReadIdleTimeout = 2 * time.Second
	DefaultAPIServerPingTimeout     = 2 * time.Second
	// DefaultLeaseStandDown is how long a grantor whose leadership was lost
	// without being asked goes on renewing what it holds: it clears the 60s
	// ceiling of a control-plane VIP move on a healthy etcd by 30s.
	DefaultLeaseStandDown = 90 * time.Second
	// WarmStartBudget is what the gap allows from acquisition to the first
	// grant that extends a runtime: a list from the synced cache, one POST
	// that carries no age, and one that does. Measured in
	// BenchmarkWarmStart (docs/benchmarks.md).
	WarmStartBudget = 500 * time.Millisecond
	// RequiredSpare is what the gap must leave of the budget after a
	// renewal at the default lease.
	RequiredSpare = 5 * time.Second
	// ReferenceLease is the lease the inequality is held at: the Unit
	// default.
	ReferenceLease = 30 * time.Second
)

// Timings are the terms of the grantor gap.
type Timings struct {
	ElectionLeaseDuration time.Duration
	ElectionRenewDeadline time.Duration
	ElectionRetryPeriod   time.Duration
	ReadIdleTimeout       time.Duration
	PingTimeout           time.Duration
	WarmStart             time.Duration
}

// Defaults are the shipped timings.
func Defaults() Timings {
	return Timings{
		ElectionLeaseDuration: DefaultElectionLeaseDuration,
		ElectionRenewDeadline: DefaultElectionRenewDeadline,
		ElectionRetryPeriod:   DefaultElectionRetryPeriod,
		ReadIdleTimeout:       DefaultAPIServerReadIdleTimeout,
		PingTimeout:           DefaultAPIServerPingTimeout,
		WarmStart:             WarmStartBudget,
	}
}

// Poll is the longest wait between two election attempts: client-go waits
// RetryPeriod plus up to JitterFactor times it (wait.Jitter).
func (t Timings) Poll() time.Duration {
	return t.ElectionRetryPeriod + time.Duration(leaderelection.JitterFactor*float64(t.ElectionRetryPeriod))
}

// Detection is how long a standby's connection pinned to a dead apiserver
// takes to be given up: read-idle, then the PING's timeout.
func (t Timings) Detection() time.Duration { return t.ReadIdleTimeout + t.PingTimeout }

// Gap is the worst time from the loss of the leader's node to a grant from
// the new leader that extends a runtime: detection of the dead connection,
// a poll, the whole election lease (a challenger restarts its clock at the
// first record it had not seen), a poll, and the warm start.
func (t Timings) Gap() time.Duration {
	return t.Detection() + t.Poll() + t.ElectionLeaseDuration + t.Poll() + t.WarmStart
}

// BudgetAfterARenewal is what a runtime has left in the worst phase: its
// anchor is one renewal older than the grantor's last acknowledgement (L1),
// and the leader can be lost up to one interval after that
// acknowledgement, so the lease minus two renewal intervals.
func BudgetAfterARenewal(d time.Duration) time.Duration {
	return d - 2*d/lease.CadenceDivisor
}

// Spare is what the gap leaves of the budget at lease.
func (t Timings) Spare(lease time.Duration) time.Duration {
	return BudgetAfterARenewal(lease) - t.Gap()
}

// Validate refuses timings client-go would refuse, and health-check values
// client-go would misread (it takes whole seconds, and 0 disables the check).
// It says nothing about the budget: a site may widen the election and pay
// for it there (see Spare).
func (t Timings) Validate() error {
	switch {
	case t.ElectionLeaseDuration <= t.ElectionRenewDeadline:
		return fmt.Errorf("--leader-election-lease-duration (%v) must be greater than --leader-election-renew-deadline (%v)", t.ElectionLeaseDuration, t.ElectionRenewDeadline)
	case t.ElectionRenewDeadline <= time.Duration(leaderelection.JitterFactor*float64(t.ElectionRetryPeriod)):
		return fmt.Errorf("--leader-election-renew-deadline (%v) must be greater than %v times --leader-election-retry-period (%v)", t.ElectionRenewDeadline, leaderelection.JitterFactor, t.ElectionRetryPeriod)
	case t.ElectionRetryPeriod <= 0:
		return fmt.Errorf("--leader-election-retry-period must be positive")
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"--apiserver-read-idle-timeout", t.ReadIdleTimeout}, {"--apiserver-ping-timeout", t.PingTimeout}} {
		if f.d < time.Second || f.d%time.Second != 0 {
			return fmt.Errorf("%s (%v) must be a whole number of seconds, at least 1s (client-go reads whole seconds, and 0 disables the check)", f.name, f.d)
		}
	}
	return nil
}

// SetAPIServerHealthCheck sets client-go's HTTP/2 health check of the
// apiserver connections this process builds from now on: client-go reads
// HTTP2_READ_IDLE_TIMEOUT_SECONDS and HTTP2_PING_TIMEOUT_SECONDS when it
// builds a transport, and from nowhere else, so call it before the first.
func SetAPIServerHealthCheck(readIdle, ping time.Duration) error {
	if err := os.Setenv("HTTP2_READ_IDLE_TIMEOUT_SECONDS", strconv.Itoa(int(readIdle/time.Second))); err != nil {
		return err
	}
	return os.Setenv("HTTP2_PING_TIMEOUT_SECONDS", strconv.Itoa(int(ping/time.Second)))
}
