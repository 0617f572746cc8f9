package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/poll"
)

var t0 = time.Date(2026, 8, 24, 12, 0, 0, 0, time.UTC)

func newKeeper(t *testing.T, mode holdfastv1.AvailabilityMode) (*Keeper, *testingclock.FakeClock) {
	t.Helper()
	clk := testingclock.NewFakeClock(t0)
	k, err := NewKeeper(Config{
		Unit: "plant/kiln-1", Epoch: 3, Mode: mode, LeaseDuration: 30 * time.Second,
		Incarnation: holdfastv1.RuntimeIncarnation{PodUID: "uid-1", RestartCount: 2}, Clock: clk,
	}, ktesting.NewLogger(t, ktesting.NewConfig()))
	if err != nil {
		t.Fatal(err)
	}
	return k, clk
}

// grant is a grant to k carrying ackAge and, with it, an anchor k issued
// at the present instant, so the age alone dates it (an anchor of now is
// never earlier than arrival - ackAge).
func grant(k *Keeper, epoch int64, seq uint64, duration time.Duration, ackAge *time.Duration) *leaseapi.Grant {
	g := &leaseapi.Grant{Unit: "plant/kiln-1", Epoch: epoch, DurationMillis: duration.Milliseconds(),
		Grantor: "holdfast-controller-0", Seq: seq}
	if ackAge != nil {
		ms := ackAge.Milliseconds()
		g.AckAgeMillis = &ms
		g.Anchor = k.issueAnchor(k.clock.Now())
	}
	return g
}

func age(d time.Duration) *time.Duration { return &d }

func canWrite(k *Keeper, kind WriteKind) bool {
	p, err := k.Acquire(kind)
	if err != nil {
		return false
	}
	p.Release()
	return true
}

func TestFailoverRuntimeStartsFencedUntilGranted(t *testing.T) {
	k, clk := newKeeper(t, holdfastv1.Failover)
	if s := k.Status(); s.State != leaseapi.Ungranted || !s.Fenced || s.RemainingMillis != nil {
		t.Fatalf("a fresh Failover runtime reports %+v, want Ungranted, fenced, no deadline", s)
	}
	for _, kind := range []WriteKind{WriteControl, WriteHold} {
		if _, err := k.Acquire(kind); !errors.Is(err, ErrFenced) {
			t.Fatalf("a fresh Failover runtime permitted a %s write: %v", kind, err)
		}
	}
	out, reply := k.Grant(grant(k, 3, 1, 30*time.Second, age(0)), clk.Now())
	if out != Extended || reply.State != leaseapi.Held || reply.Fenced {
		t.Fatalf("first acknowledged grant: outcome %v reply %+v, want Extended and Held", out, reply)
	}
	if reply.Incarnation.PodUID != "uid-1" || reply.Incarnation.RestartCount != 2 {
		t.Fatalf("reply names incarnation %+v, want uid-1/2", reply.Incarnation)
	}
	if !canWrite(k, WriteControl) {
		t.Fatal("a granted runtime refused a control write")
	}
}

// L1: the deadline is arrival - ackAge + duration, never arrival + duration.
func TestAnchorIsTheAcknowledgedAge(t *testing.T) {
	k, clk := newKeeper(t, holdfastv1.Failover)
	clk.Step(time.Minute)
	k.Grant(grant(k, 3, 1, 30*time.Second, age(7*time.Second)), clk.Now())
	rem, ok := k.Remaining()
	if !ok || rem != 23*time.Second {
		t.Fatalf("after a grant carrying a 7s acknowledged age of a 30s lease, remaining = %v (%v), want 23s", rem, ok)
	}
	// The arrival, not the handler's later reading of the clock, anchors it.
	arrival := clk.Now()
	clk.Step(2 * time.Second)
	k.Grant(grant(k, 3, 2, 30*time.Second, age(3*time.Second)), arrival)
	if rem, _ := k.Remaining(); rem != 25*time.Second {
		t.Fatalf("remaining = %v, want arrival-3s+30s-2s = 25s", rem)
	}
}

// L1: a renewal without an acknowledged age grants nothing, however many
// arrive.
func TestARenewalWithoutAnAcknowledgedAgeGrantsNothing(t *testing.T) {
	k, clk := newKeeper(t, holdfastv1.Failover)
	for seq := uint64(1); seq <= 5; seq++ {
		out, reply := k.Grant(grant(k, 3, seq, 30*time.Second, nil), clk.Now())
		if out != NoAcknowledgedAge || reply.State != leaseapi.Ungranted || !reply.Fenced {
			t.Fatalf("grant %d without an acknowledged age: outcome %v reply %+v, want nothing granted", seq, out, reply)
		}
		clk.Step(time.Second)
	}
	if _, ok := k.Remaining(); ok || canWrite(k, WriteControl) {
		t.Fatal("grants without an acknowledged age gave the runtime a deadline")
	}
	// Once held, an unacknowledged grant does not extend it either.
	k.Grant(grant(k, 3, 6, 30*time.Second, age(0)), clk.Now())
	before, _ := k.Remaining()
	clk.Step(time.Second)
	k.Grant(grant(k, 3, 7, 30*time.Second, nil), clk.Now())
	if after, _ := k.Remaining(); after != before-time.Second {
		t.Fatalf("an unacknowledged grant moved the deadline: remaining %v, want %v", after, before-time.Second)
	}
}

func TestAGrantThatIsNotNewerExtendsNothing(t *testing.T) {
	k, clk := newKeeper(t, holdfastv1.Failover)
	k.Grant(grant(k, 3, 5, 30*time.Second, age(0)), clk.Now())
	clk.Step(time.Second)
	if out, _ := k.Grant(grant(k, 3, 5, 30*time.Second, age(0)), clk.Now()); out != Stale {
		t.Fatalf("a replayed seq extended the lease: %v", out)
	}
	if out, _ := k.Grant(grant(k, 3, 4, 30*time.Second, age(0)), clk.Now()); out != Stale {
		t.Fatalf("an older seq extended the lease: %v", out)
	}
	// An older anchor never shortens the deadline held.
	if out, _ := k.Grant(grant(k, 3, 6, 30*time.Second, age(5*time.Second)), clk.Now()); out != Stale {
		t.Fatalf("a grant with an older anchor was applied: %v", out)
	}
	if rem, _ := k.Remaining(); rem != 29*time.Second {
		t.Fatalf("remaining %v, want 29s", rem)
	}
	// An acknowledged age older than the lease grants nothing.
	k2, clk2 := newKeeper(t, holdfastv1.Failover)
	if out, _ := k2.Grant(grant(k2, 3, 1, 30*time.Second, age(31*time.Second)), clk2.Now()); out != Stale || k2.State() != leaseapi.Ungranted {
		t.Fatalf("a grant whose anchor is older than the lease granted: %v %v", out, k2.State())
	}
}

// L3: at the deadline only hold writes pass, for exactly the hold bound;
// then nothing passes. The hold bound follows the grant's duration.
func TestHoldBoundIsClampedHalfTheLease(t *testing.T) {
	for _, tc := range []struct{ lease, hold time.Duration }{
		{10 * time.Second, 5 * time.Second},
		{11 * time.Second, 5500 * time.Millisecond},
		{30 * time.Second, 15 * time.Second},
		{60 * time.Second, 30 * time.Second},
		{600 * time.Second, 30 * time.Second},
	} {
		k, clk := newKeeper(t, holdfastv1.Failover)
		k.Grant(grant(k, 3, 1, tc.lease, age(0)), clk.Now())
		if got := time.Duration(k.Status().HoldBoundMillis) * time.Millisecond; got != tc.hold {
			t.Errorf("lease %v: status reports hold bound %v, want %v", tc.lease, got, tc.hold)
		}
		clk.Step(tc.lease - time.Millisecond)
		if !canWrite(k, WriteControl) {
			t.Errorf("lease %v: control write refused before the deadline", tc.lease)
		}
		clk.Step(time.Millisecond)
		if canWrite(k, WriteControl) {
			t.Errorf("lease %v: control write permitted at the deadline", tc.lease)
		}
		if !canWrite(k, WriteHold) {
			t.Errorf("lease %v: hold write refused at the deadline", tc.lease)
		}
		if s := k.Status().State; s != leaseapi.Holding {
			t.Errorf("lease %v: state %s at the deadline, want Holding", tc.lease, s)
		}
		clk.Step(tc.hold - time.Millisecond)
		if !canWrite(k, WriteHold) {
			t.Errorf("lease %v: hold write refused %v into the hold", tc.lease, tc.hold-time.Millisecond)
		}
		clk.Step(time.Millisecond)
		if canWrite(k, WriteHold) || canWrite(k, WriteControl) {
			t.Errorf("lease %v: a write was permitted at deadline + hold bound", tc.lease)
		}
		if s := k.Status(); s.State != leaseapi.Fenced || !s.Fenced {
			t.Errorf("lease %v: status %s fenced=%v at deadline + hold bound, want Fenced", tc.lease, s.State, s.Fenced)
		}
	}
}

func TestALaterGrantForTheSameEpochUnfences(t *testing.T) {
	k, clk := newKeeper(t, holdfastv1.Failover)
	k.Grant(grant(k, 3, 1, 10*time.Second, age(0)), clk.Now())
	clk.Step(20 * time.Second)
	if k.Status().State != leaseapi.Fenced {
		t.Fatal("not fenced 20s into a 10s lease")
	}
	out, reply := k.Grant(grant(k, 3, 2, 10*time.Second, age(time.Second)), clk.Now())
	if out != Extended || reply.State != leaseapi.Held || reply.Fenced || !canWrite(k, WriteControl) {
		t.Fatalf("a fresh grant for the same epoch left the runtime fenced: %v %+v", out, reply)
	}
}

func TestAutonomyNeverFences(t *testing.T) {
	k, clk := newKeeper(t, holdfastv1.Autonomy)
	if !canWrite(k, WriteControl) {
		t.Fatal("an Autonomy runtime refused a write before any grant")
	}
	k.Grant(grant(k, 3, 1, 10*time.Second, age(0)), clk.Now())
	clk.Step(time.Hour)
	if s := k.Status(); s.State != leaseapi.Autonomous || s.Fenced || !canWrite(k, WriteControl) {
		t.Fatalf("an Autonomy runtime an hour past its lease: %+v, want Autonomous and writing", s)
	}
}

// The fence is reported only once the write in flight has returned, so a
// reader that sees Fenced knows nothing permitted is still on the wire; and
// while a write is wedged GET answers at once with the truth, past the
// deadline and the hold bound and not Fenced, for the node plugin's
// watchdog.
func TestFenceWaitsForTheWriteInFlight(t *testing.T) {
	k, clk := newKeeper(t, holdfastv1.Failover)
	k.Grant(grant(k, 3, 1, 10*time.Second, age(0)), clk.Now())
	p, err := k.Acquire(WriteControl)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go k.Run(ctx)
	waitForWaiter(t, clk)
	clk.Step(16 * time.Second)
	if canWriteNoWait(k) {
		t.Fatal("a write was permitted past the fence")
	}
	time.Sleep(100 * time.Millisecond) // Run blocking on the held write shows nowhere: give it time to get there
	answered := make(chan leaseapi.Status, 1)
	go func() { answered <- k.Status() }()
	var s leaseapi.Status
	select {
	case s = <-answered:
	case <-time.After(2 * time.Second):
		p.Release()
		t.Fatal("GET /v1/lease blocked behind a wedged write")
	}
	if s.State == leaseapi.Fenced || s.Fenced {
		t.Fatalf("status reported %s while a permitted write was in flight", s.State)
	}
	if *s.RemainingMillis > -s.HoldBoundMillis {
		t.Fatalf("status remaining %dms, want past the hold bound %dms", *s.RemainingMillis, s.HoldBoundMillis)
	}
	p.Release()
	poll.Until(t, 5*time.Second, "Fenced after the write returned", func() (bool, string) {
		s := k.Status().State
		return s == leaseapi.Fenced, string(s)
	})
}

// canWriteNoWait checks the gate without blocking behind a pending fence.
func canWriteNoWait(k *Keeper) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return permits(k.stateAt(k.clock.Now()), WriteControl)
}

func TestRunMakesTheTransitionsAtTheirInstants(t *testing.T) {
	k, clk := newKeeper(t, holdfastv1.Failover)
	var seen []leaseapi.State
	trs := make(chan Transition, 10)
	k.OnTransition(func(tr Transition) { trs <- tr })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go k.Run(ctx)
	k.Grant(grant(k, 3, 1, 10*time.Second, age(0)), clk.Now())
	seen = append(seen, (<-trs).To)
	waitForWaiter(t, clk)
	clk.Step(10 * time.Second)
	seen = append(seen, (<-trs).To)
	waitForWaiter(t, clk)
	clk.Step(5 * time.Second)
	seen = append(seen, (<-trs).To)
	want := []leaseapi.State{leaseapi.Held, leaseapi.Holding, leaseapi.Fenced}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("transitions %v, want %v", seen, want)
		}
	}
}

func waitForWaiter(t *testing.T, clk *testingclock.FakeClock) {
	t.Helper()
	poll.Until(t, 5*time.Second, "Run to set a timer", poll.True(clk.HasWaiters))
}

// #579/#1801 in the small: the POSTs keep landing but the grantor never
// gets a usable answer back, so the age each one carries climbs from the
// last renewal it saw acknowledged; the runtime extends nothing on them and
// fences on the report, at that renewal + duration + hold bound, however
// many POSTs land.
func TestAReversePartitionFencesOnTheReportedAge(t *testing.T) {
	k, clk := newKeeper(t, holdfastv1.Failover)
	k.Grant(grant(k, 3, 1, 30*time.Second, age(0)), clk.Now()) // acknowledged at t0: the grantor's lastAck
	lastAck := clk.Now()
	seq := uint64(1)
	for clk.Now().Sub(lastAck) < time.Minute {
		clk.Step(5 * time.Second)
		seq++
		k.Grant(grant(k, 3, seq, 30*time.Second, age(clk.Now().Sub(lastAck))), clk.Now())
		elapsed := clk.Now().Sub(lastAck)
		want := leaseapi.Held
		switch {
		case elapsed >= 45*time.Second:
			want = leaseapi.Fenced
		case elapsed >= 30*time.Second:
			want = leaseapi.Holding
		}
		if got := k.Status().State; got != want {
			t.Fatalf("%v after the last acknowledged renewal, with POSTs still landing: %s, want %s", elapsed, got, want)
		}
	}
}

// L3: at the fence instant the Keeper calls its fence hooks before it
// waits for the writes in flight (a driver aborts them there, so the wait
// ends at once and nothing permitted reaches the device later), and it
// calls them once per fence, however often the state is read.
func TestFenceHooksRunOnceBeforeTheFenceWaitsForTheWriteInFlight(t *testing.T) {
	k, clk := newKeeper(t, holdfastv1.Failover)
	k.Grant(grant(k, 3, 1, 10*time.Second, age(0)), clk.Now())
	p, err := k.Acquire(WriteControl)
	if err != nil {
		t.Fatal(err)
	}
	calls := make(chan struct{}, 10)
	k.OnFence(func() {
		calls <- struct{}{}
		p.Release() // the aborted write returns
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go k.Run(ctx)
	waitForWaiter(t, clk)
	clk.Step(10 * time.Second)
	waitForWaiter(t, clk)
	if len(calls) != 0 {
		t.Fatal("the fence hooks ran at the deadline, want at deadline + hold bound")
	}
	clk.Step(5 * time.Second)
	select {
	case <-calls:
	case <-time.After(10 * time.Second):
		t.Fatal("the fence hooks did not run at the fence while a write was in flight")
	}
	for k.State() != leaseapi.Fenced {
		<-k.Changed()
	}
	for range 3 {
		k.Status()
	}
	if len(calls) != 0 {
		t.Fatalf("the fence hooks ran %d more times in one fence, want once", len(calls))
	}
	// A later grant un-fences; the next fence calls them again.
	k.Grant(grant(k, 3, 2, 10*time.Second, age(0)), clk.Now())
	if p, err = k.Acquire(WriteControl); err != nil {
		t.Fatal(err)
	}
	waitForWaiter(t, clk)
	clk.Step(15 * time.Second)
	select {
	case <-calls:
	case <-time.After(10 * time.Second):
		t.Fatal("the fence hooks did not run at the second fence")
	}
}
