//go:build integration

package integration

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/units"
	"github.com/holdfast-io/holdfast/internal/audit"
	"github.com/holdfast-io/holdfast/test/poll"
)

// TestTheRebindIsDecidedWhenTheMarginEnds: the availability decision runs on
// the controller's own clock (injected here), with the real apiserver and
// real runtime processes. Each runtime is killed with its node's kubelet
// cut off, so every renewal after it is refused (Unreachable), and the clock
// is moved to the grantor's deadline, then to the recorded expiry + margin
// and left there: the Hold and the re-bind are taken at that instant (their
// audit lines carry the clock's time), with a write of the Unit racing the
// decision, and no later instant is needed. The first failover comes
// inside the new leader's hold-off (L6: stand-down 20s + lease 10s + margin
// 5s from its election, as in make demo): there the decision waits for the
// hold-off's end instead, and the LeadershipHoldOff Event names that end,
// so a timeline read from the Events accounts for the wait.
func TestTheRebindIsDecidedWhenTheMarginEnds(t *testing.T) {
	t.Parallel()
	// A minute behind the wall clock: a pod's start-up grace runs from its
	// creation, which the apiserver stamps on the wall clock, and the jumps
	// below must not put a new pod's grace behind this clock.
	clk := clocktesting.NewFakeClock(time.Now().Add(-time.Minute).Truncate(time.Second))
	p := newPlantOn(t, controllerOptions{clock: clk, standDown: 20 * time.Second}, func(*holdfastv1.Unit) {}, "standby-1", "standby-2")
	a := p.u.Spec.Availability
	lease, margin := a.LeaseDuration(), a.RebindMargin()
	unit := p.ns + "/kiln"

	// held waits for binding n's runtime to hold its lease. The clock moves
	// on a little at each look: a loop that may not grant yet (the
	// leadership's last renewal on this clock is older than a jump of it)
	// looks again a second later on this clock.
	held := func(n int) {
		t.Helper()
		p.place(n)
		poll.Until(t, 60*time.Second, fmt.Sprintf("binding %d holding its lease", n), func() (bool, string) {
			b := p.unit().Status.RuntimeBinding
			if b.Epoch == p.epoch(n) && b.LeaseState == holdfastv1.LeaseHeld && b.LeaseStateEpoch == b.Epoch {
				return true, ""
			}
			clk.Step(100 * time.Millisecond)
			return false, fmt.Sprintf("%+v", b)
		})
	}
	// lose kills binding n's runtime with its node cut off, moves the clock
	// to the grantor's deadline and returns the recorded expiry.
	lose := func(n int) time.Time {
		t.Helper()
		b := p.unit().Status.RuntimeBinding
		proc := p.k.proc(units.PodName("kiln", p.epoch(n)))
		p.k.setNode(b.Node, func(s *simNode) { s.cut = true })
		if err := proc.signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-proc.exited
		// The expiry records what the last renewal attempt got back, so the
		// grantor must have made one since the kill before its deadline
		// comes: a jump straight to the deadline can leave its last attempt
		// the acknowledged one. The runtime's lease address answers each
		// connection by closing it (Unreachable); the second connection
		// means the first attempt is recorded, as a unit's attempts run
		// one after another.
		attempts := refuseConnections(t, net.JoinHostPort(proc.ip, fmt.Sprint(proc.lease)))
		poll.Until(t, 60*time.Second, fmt.Sprintf("two renewal attempts at epoch %d after the kill", b.Epoch), func() (bool, string) {
			if n := attempts.Load(); n >= 2 {
				return true, ""
			}
			clk.Step(100 * time.Millisecond)
			return false, fmt.Sprintf("%d attempts, clock %v", attempts.Load(), clk.Now())
		})
		// The last acknowledgement is recorded at most a third of the lease
		// before the grantor's own: the deadline is reached by small steps.
		if d := b.LastAcknowledgedRenewal.Time.Add(lease); d.After(clk.Now()) {
			clk.SetTime(d)
		}
		poll.Until(t, 60*time.Second, fmt.Sprintf("the expiry at epoch %d", b.Epoch), func() (bool, string) {
			b := p.unit().Status.RuntimeBinding
			if b.LeaseState == holdfastv1.LeaseExpired && b.Expiry != nil && b.Expiry.Epoch == p.epoch(n) {
				return true, ""
			}
			clk.Step(100 * time.Millisecond)
			return false, fmt.Sprintf("%+v", b)
		})
		e := p.unit().Status.RuntimeBinding.Expiry
		if e.Verdict != holdfastv1.VerdictSelfFenced || e.LastAttempt != holdfastv1.RenewalUnreachable {
			t.Fatalf("expiry at epoch %d: %+v, want SelfFenced after Unreachable renewals", p.epoch(n), e)
		}
		return e.At.Time
	}
	// decidedAt moves the clock to at and leaves it there, writes the Unit
	// at the same moment (the decision's status write races it), waits for
	// the re-bind from binding n and its audit line, and returns the last
	// audit line of each reason.
	decidedAt := func(n int, at time.Time) map[string]audit.Record {
		t.Helper()
		clk.SetTime(at)
		touch(t, p.u, fmt.Sprint(n))
		waitNewEpoch(t, p.key, p.epoch(n))
		out := map[string]audit.Record{}
		poll.Until(t, 15*time.Second, "the re-bind's audit line", func() (bool, string) {
			for _, r := range p.c.auditLines(t) {
				if r.Object.Key() == unit {
					out[r.Reason] = r
				}
			}
			r, ok := out[units.EventRebound]
			return ok && r.Epoch > p.epoch(n), fmt.Sprint(auditReasons(p.c.auditLines(t), unit))
		})
		return out
	}

	// The first failover, inside the hold-off.
	held(1)
	exp1 := lose(1)
	// The wait is read from its audit line, written once the wait's
	// condition is stored: the Event comes first, and a pass whose status
	// write conflicts has emitted it for a wait that is never stored (the
	// next pass decides again, possibly past the hold-off).
	var until time.Time
	poll.Until(t, 30*time.Second, "the LeadershipHoldOff audit line", func() (bool, string) {
		for _, r := range p.c.auditLines(t) {
			if r.Object.Key() != unit || r.Reason != units.EventLeadershipHoldOff {
				continue
			}
			s, _, ok := strings.Cut(strings.TrimPrefix(r.Message, "Waiting for the leadership hold-off until "), ": ")
			at, err := time.Parse(time.RFC3339Nano, s)
			if !ok || err != nil {
				t.Fatalf("the LeadershipHoldOff audit line does not name its end: %q", r.Message)
			}
			until = at
			return true, ""
		}
		return false, fmt.Sprint(auditReasons(p.c.auditLines(t), unit))
	})
	poll.Until(t, 30*time.Second, "the LeadershipHoldOff Event naming the end", func() (bool, string) {
		for _, e := range events(t, p.u) {
			if e.Reason == units.EventLeadershipHoldOff && strings.HasPrefix(e.Note, "Waiting for the leadership hold-off until "+until.UTC().Format(time.RFC3339Nano)+": ") {
				return true, ""
			}
		}
		return false, strings.Join(eventReasons(events(t, p.u)), ",")
	})
	if !until.After(exp1.Add(margin)) {
		t.Fatalf("the hold-off ends at %v, not after the margin (expiry %v + %v): the first failover must come inside it", until, exp1, margin)
	}
	got := decidedAt(1, until)
	if r := got[units.EventHold]; !r.Time.Equal(until) {
		t.Fatalf("the Hold after the hold-off was decided at %v, want its end %v", r.Time, until)
	}
	if r := got[units.EventRebound]; !r.Time.Equal(until) {
		t.Fatalf("the re-bind after the hold-off was decided at %v, want its end %v", r.Time, until)
	}

	// The second, after it: the re-bind at the expiry + margin exactly.
	held(2)
	exp2 := lose(2)
	due := exp2.Add(margin)
	got = decidedAt(2, due)
	if r := got[units.EventRebound]; !r.Time.Equal(due) {
		t.Fatalf("the re-bind was decided at %v, want the expiry %v + the margin %v = %v", r.Time, exp2, margin, due)
	}
	if b := p.unit().Status.RuntimeBinding; b.Origin != holdfastv1.OriginAutomatic || b.PreviousNode != p.targets[0] {
		t.Fatalf("the second re-bind: %+v", b)
	}
	want := []string{units.EventLeaseEstablished, units.EventLeaseExpired, units.EventLeadershipHoldOff, units.EventHold, units.EventRebound,
		units.EventLeaseReestablished, units.EventLeaseExpired, units.EventRebound}
	if got := slices.DeleteFunc(auditReasons(p.c.auditLines(t), unit), func(r string) bool { return r == units.EventLeaseBelowFloor }); !slices.Equal(got, want) {
		t.Fatalf("audit reasons %v, want %v", got, want)
	}
	if c := meta.FindStatusCondition(p.unit().Status.Conditions, holdfastv1.ConditionFailoverRequest); c == nil || c.Reason != holdfastv1.ReasonRebound {
		t.Fatalf("FailoverRequest %+v", c)
	}
}

// touch writes the Unit (a label): a write racing a decision's.
func touch(t testing.TB, u *holdfastv1.Unit, v string) {
	t.Helper()
	patch := client.RawPatch("application/merge-patch+json", []byte(fmt.Sprintf(`{"metadata":{"labels":{"holdfast.test/touched":%q}}}`, v)))
	obj := &holdfastv1.Unit{ObjectMeta: metav1.ObjectMeta{Namespace: u.Namespace, Name: u.Name}}
	if err := env.Client.Patch(context.Background(), obj, patch); err != nil {
		t.Fatal(err)
	}
}

// refuseConnections listens at addr, where a killed runtime served its
// lease, and closes every connection it accepts, counting them, until the
// test ends.
func refuseConnections(t *testing.T, addr string) *atomic.Int32 {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening at the killed runtime's lease address: %v", err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var n atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
			n.Add(1)
		}
	}()
	return &n
}
