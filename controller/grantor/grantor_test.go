package grantor

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	runtimelease "github.com/holdfast-io/holdfast/runtime/lease"
	"github.com/holdfast-io/holdfast/test/poll"
	"github.com/holdfast-io/holdfast/test/ports"
)

// endpoint answers the lease protocol at the HTTP boundary the way the
// runtime's contract says (api/lease), with a switch to refuse. The real
// runtime is exercised by the integration tests; these pin the loop's
// arithmetic with a clock the test steps.
type endpoint struct {
	mu     sync.Mutex
	epoch  int64
	refuse bool
	// state is what a 200 says of the runtime's lease; empty is Held.
	state lease.State
	// hang: the handler takes the grant and answers only once release is
	// closed (a starved runtime or grantor), or never if the client gives up.
	hang     bool
	release  chan struct{}
	restarts int32
	grants   []lease.Grant
	srv      *httptest.Server
}

// newEndpoint serves the runtime of unit at epoch over TLS, with a
// certificate of the test CA naming that binding (as every runtime has).
func newEndpoint(t *testing.T, epoch int64) *endpoint { return newUnitEndpoint(t, unit, epoch) }

// newUnitEndpoint serves the runtime of u at epoch.
func newUnitEndpoint(t *testing.T, u types.NamespacedName, epoch int64) *endpoint {
	e := &endpoint{epoch: epoch}
	e.srv = testCA(t).ServeRuntime(t, e.handler(), u.String(), epoch)
	return e
}

// newPlainEndpoint serves it over plain HTTP, as a runtime started with
// --insecure-plaintext-lease.
func newPlainEndpoint(t *testing.T, epoch int64) *endpoint {
	e := &endpoint{epoch: epoch}
	e.srv = httptest.NewServer(e.handler())
	t.Cleanup(e.srv.Close)
	return e
}

func (e *endpoint) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var g lease.Grant
		if err := json.NewDecoder(r.Body).Decode(&g); err != nil || r.URL.Path != lease.Path {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		e.grants = append(e.grants, g)
		if e.hang {
			release := e.release
			e.mu.Unlock()
			select {
			case <-release:
			case <-r.Context().Done():
			}
			e.mu.Lock()
		}
		switch {
		case e.refuse:
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(lease.Error{Message: "wedged"})
		case g.Epoch != e.epoch:
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(lease.Conflict{Message: "not my epoch", RuntimeEpoch: e.epoch, GrantEpoch: g.Epoch})
		default:
			// The anchor is opaque to the grantor: any token will do, and
			// each names the grant it answers.
			state := e.state
			if state == "" {
				state = lease.Held
			}
			_ = json.NewEncoder(w).Encode(lease.Reply{Epoch: e.epoch, State: state,
				Incarnation: holdfastv1.RuntimeIncarnation{PodUID: "uid-1", RestartCount: e.restarts},
				Anchor:      anchorOf(len(e.grants))})
		}
	})
}

func anchorOf(n int) lease.Anchor { return lease.Anchor(fmt.Sprintf("anchor-%d", n)) }

func (e *endpoint) restart() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.restarts++
}

func (e *endpoint) addr() string { return e.srv.Listener.Addr().String() }

func (e *endpoint) received() []lease.Grant {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]lease.Grant(nil), e.grants...)
}

func (e *endpoint) setHang(v bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hang = v
	if v {
		e.release = make(chan struct{})
	} else if e.release != nil {
		close(e.release)
	}
}

func (e *endpoint) setState(s lease.State) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.state = s
}

func (e *endpoint) setRefuse(v bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.refuse = v
}

var unit = types.NamespacedName{Namespace: "plant", Name: "kiln-1"}

// waitFor polls until cond holds (the loop runs on its own goroutine).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 10*time.Second, what, poll.True(cond))
}

// parked reports whether the unit's loop waits on its timer with no attempt
// in flight.
func parked(g *Grantor, u types.NamespacedName) bool {
	g.mu.Lock()
	l := g.loops[u]
	g.mu.Unlock()
	return l != nil && l.parked.Load()
}

// settle waits until the loop is parked on its timer with n grants sent.
func settle(t *testing.T, g *Grantor, e *endpoint, n int) {
	t.Helper()
	waitFor(t, "the loop to send its grants and wait", func() bool { return len(e.received()) == n && parked(g, unit) })
}

// stepNothingDue steps the clock by d with the loop parked and shows that it
// handled the step by staying parked: the fake clock removes a timer from
// its waiters inside Step when it fires, so a waiter count unchanged right
// after the step means the loop's timer did not fire and no grant can follow.
func stepNothingDue(t *testing.T, g *Grantor, clk *clocktesting.FakeClock, e *endpoint, d time.Duration) {
	t.Helper()
	n := len(e.received())
	if !parked(g, unit) || clk.Waiters() != 1 {
		t.Fatalf("before the step the loop must be parked on its one timer: parked %v, waiters %d", parked(g, unit), clk.Waiters())
	}
	clk.Step(d)
	if w := clk.Waiters(); w != 1 {
		t.Fatalf("a step of %v fired the loop's timer (waiters %d): a grant goes out before the cadence", d, w)
	}
	if got := len(e.received()); got != n {
		t.Fatalf("%d grants after a step of %v, want %d", got, d, n)
	}
}

// renewing starts one renewal loop at epoch, a 30s lease, on a fake clock
// at time.Unix(1000, 0), to a runtime endpoint of that epoch.
func renewing(t *testing.T, epoch int64) (*clocktesting.FakeClock, *endpoint, *Grantor) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	e := newEndpoint(t, epoch)
	g := New(Options{Name: "ctl-0", Clock: clk, TLS: testGrantor(t)})
	t.Cleanup(g.StopAll)
	g.Ensure(Target{Unit: unit, Epoch: epoch, Address: e.addr(), Duration: 30 * time.Second})
	return clk, e, g
}

func TestTheFirstAcknowledgementIsFollowedAtOnceByAGrantCarryingItsAge(t *testing.T) {
	_, e, g := renewing(t, 3)
	settle(t, g, e, 2)
	grants := e.received()
	if grants[0].AckAgeMillis != nil || grants[0].Anchor != "" {
		t.Fatalf("the first grant at a binding has no acknowledged renewal behind it, yet carries ackAgeMillis %v anchor %q", grants[0].AckAgeMillis, grants[0].Anchor)
	}
	if grants[1].AckAgeMillis == nil || *grants[1].AckAgeMillis != 0 || grants[1].Anchor != anchorOf(1) {
		t.Fatalf("the second grant must follow at once carrying the first acknowledgement's age (0ms on a stopped clock) and anchor %q, got %v %q",
			anchorOf(1), grants[1].AckAgeMillis, grants[1].Anchor)
	}
	for _, gr := range grants {
		if gr.Unit != "plant/kiln-1" || gr.Epoch != 3 || gr.DurationMillis != 30000 || gr.Grantor != "ctl-0" {
			t.Fatalf("grant %+v does not carry the binding", gr)
		}
	}
	if grants[1].Seq <= grants[0].Seq {
		t.Fatalf("seq must increase: %d then %d", grants[0].Seq, grants[1].Seq)
	}
	obs, _ := g.Observe(unit)
	if !obs.Acked() || obs.Acks != 2 || obs.Incarnation.PodUID != "uid-1" || !obs.Anchor.Equal(time.Unix(1000, 0)) {
		t.Fatalf("observation after two acknowledgements: %+v", obs)
	}
}

func TestGrantsCarryTheAgeOfTheLastAcknowledgedRenewalAtTheCadence(t *testing.T) {
	clk, e, g := renewing(t, 1)
	settle(t, g, e, 2)

	// Healthy: every 5s (a sixth of 30s), each grant carrying 5s.
	for i := 3; i <= 6; i++ {
		clk.Step(5 * time.Second)
		settle(t, g, e, i)
		gr := e.received()[i-1]
		if gr.AckAgeMillis == nil || *gr.AckAgeMillis != 5000 || gr.Anchor != anchorOf(i-1) {
			t.Fatalf("grant %d carries %v and %q, want the 5000ms since the last acknowledgement and its anchor %q", i, gr.AckAgeMillis, gr.Anchor, anchorOf(i-1))
		}
	}
	// The loop waits 5s less its jitter (at most a tenth): a step of 4.4s
	// must not send.
	stepNothingDue(t, g, clk, e, 4400*time.Millisecond)
}

func TestOneRefusedRenewalIsRetriedInsideTheRuntimesAnchor(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	e := newEndpoint(t, 1)
	notified := make(chan types.NamespacedName, 100)
	g := New(Options{Name: "ctl-0", Clock: clk, TLS: testGrantor(t), Notify: func(u types.NamespacedName) { notified <- u }})
	defer g.StopAll()
	g.Ensure(Target{Unit: unit, Epoch: 1, Address: e.addr(), Duration: 30 * time.Second})
	settle(t, g, e, 2)
	clk.Step(5 * time.Second)
	settle(t, g, e, 3)
	// The runtime now holds the anchor at t=1000 (the age grant 3 carried
	// was 5s, sent at 1005): its deadline is 1035.
	obs, _ := g.Observe(unit)
	runtimeDeadline := obs.Anchor.Add(30 * time.Second)

	e.setRefuse(true)
	clk.Step(5 * time.Second) // grant 4 at 1010, refused
	settle(t, g, e, 4)
	obs, _ = g.Observe(unit)
	if obs.LastAttempt.Outcome != Refused || obs.LastAttempt.Message != "503: wedged" {
		t.Fatalf("a 503 from the handler is a refusal: %+v", obs.LastAttempt)
	}
	e.setRefuse(false)
	clk.Step(5 * time.Second) // the retry
	settle(t, g, e, 5)
	if at := clk.Now(); !at.Before(runtimeDeadline) {
		t.Fatalf("the retry after one refused POST went out at %v, not before the runtime's deadline %v", at, runtimeDeadline)
	}
	gr := e.received()[4]
	if gr.AckAgeMillis == nil || *gr.AckAgeMillis != 10000 || gr.Anchor != anchorOf(3) {
		t.Fatalf("the retry must carry the age (10s) and anchor %q of the last acknowledgement, got %v %q", anchorOf(3), gr.AckAgeMillis, gr.Anchor)
	}
	obs, _ = g.Observe(unit)
	if obs.LastAttempt.Outcome != Acknowledged {
		t.Fatalf("retry: %+v", obs.LastAttempt)
	}
	// Told of the first acknowledgement, the refusal and the recovery.
	if n := len(notified); n < 3 {
		t.Fatalf("the reconciler was told %d times, want at least 3", n)
	}
}

// L1: a reply naming a new incarnation means the anchor the grant carried
// was its predecessor's and extended nothing; the grantor sends the new
// incarnation's anchor back at once rather than an interval later.
func TestANewIncarnationIsFollowedAtOnceByAGrantCarryingItsAnchor(t *testing.T) {
	clk, e, g := renewing(t, 1)
	settle(t, g, e, 2)
	clk.Step(5 * time.Second)
	settle(t, g, e, 3)

	e.restart() // the runtime restarts in place between grants 3 and 4
	clk.Step(5 * time.Second)
	settle(t, g, e, 5)
	obs, _ := g.Observe(unit)
	if obs.Incarnation.RestartCount != 1 || !obs.Anchor.Equal(time.Unix(1010, 0)) {
		t.Fatalf("after the new incarnation's anchor went back: %+v", obs.Book)
	}
	gr := e.received()[4]
	if gr.Anchor != anchorOf(4) || gr.AckAgeMillis == nil || *gr.AckAgeMillis != 0 {
		t.Fatalf("grant 5 carries %v %q, want at once the new incarnation's anchor %q", gr.AckAgeMillis, gr.Anchor, anchorOf(4))
	}
	// Then the cadence again (less its jitter): nothing more for 4.4s.
	stepNothingDue(t, g, clk, e, 4400*time.Millisecond)
}

// Without TLS (--insecure-plaintext-lease) the runtime's 409 is what keeps
// a grant from another binding; with it, the grantor never reaches the
// runtime of another epoch (TestTheGrantorSendsNothingToAnEndpointThatIsNotTheBindingsRuntime).
func TestAConflictIsARefusalAndAClosedPortIsUnreachable(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	e := newPlainEndpoint(t, 7) // the runtime at this address is at epoch 7
	g := New(Options{Name: "ctl-0", Clock: clk})
	defer g.StopAll()
	g.Ensure(Target{Unit: unit, Epoch: 8, Address: e.addr(), Duration: 30 * time.Second})
	settle(t, g, e, 1)
	obs, _ := g.Observe(unit)
	if obs.Acked() || obs.LastAttempt.Outcome != Refused || obs.LastAttempt.Message != "409: not my epoch (runtime epoch 7)" {
		t.Fatalf("a 409 is the runtime refusing another epoch: %+v", obs.LastAttempt)
	}

	closed := ports.Addr(t)
	other := types.NamespacedName{Namespace: "plant", Name: "press-2"}
	g.Ensure(Target{Unit: other, Epoch: 1, Address: closed, Duration: 30 * time.Second})
	waitFor(t, "an attempt at a closed port", func() bool { o, _ := g.Observe(other); return o.Attempts > 0 })
	obs, _ = g.Observe(other)
	if obs.LastAttempt.Outcome != Unreachable {
		t.Fatalf("a refused connection never reached the handler: %+v", obs.LastAttempt)
	}
}

func TestPauseReturnsOnlyWhenNoAttemptIsInFlightAndEnsureResumesTheObservation(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	e := newEndpoint(t, 2)
	g := New(Options{Name: "ctl-0", Clock: clk, TLS: testGrantor(t)})
	defer g.StopAll()
	target := Target{Unit: unit, Epoch: 2, Address: e.addr(), Duration: 30 * time.Second}
	g.Ensure(target)
	settle(t, g, e, 2)

	obs, ok := g.Pause(unit)
	if !ok || obs.Acks != 2 {
		t.Fatalf("Pause: %v %+v", ok, obs)
	}
	// Pause returned after the loop's goroutine ended: nothing is left to
	// send, and nothing waits on the clock.
	if got := g.Running(); len(got) != 0 || clk.HasWaiters() {
		t.Fatalf("Running after Pause: %v, clock waiters %d", got, clk.Waiters())
	}
	clk.Step(time.Minute)
	if n := len(e.received()); n != 2 {
		t.Fatalf("a paused loop sent %d grants", n)
	}
	g.Ensure(target)
	settle(t, g, e, 3)
	obs, _ = g.Observe(unit)
	if obs.Acks != 3 || !obs.Started.Equal(time.Unix(1000, 0)) {
		t.Fatalf("Ensure at the same epoch must resume the observation: %+v", obs)
	}
	// The grant after the pause carries the true age of the last ack.
	if gr := e.received()[2]; gr.AckAgeMillis == nil || *gr.AckAgeMillis != 60000 || gr.Anchor != anchorOf(2) {
		t.Fatalf("grant after the pause carries %v %q, want 60000 and %q", gr.AckAgeMillis, gr.Anchor, anchorOf(2))
	}

	// A new epoch drops the old observation.
	g.Ensure(Target{Unit: unit, Epoch: 3, Address: e.addr(), Duration: 30 * time.Second})
	waitFor(t, "the first attempt at epoch 3", func() bool { o, _ := g.Observe(unit); return o.Target.Epoch == 3 && o.Attempts > 0 })
	obs, _ = g.Observe(unit)
	if obs.Acked() {
		t.Fatalf("epoch 3 must start with nothing acknowledged (the runtime is at 2): %+v", obs)
	}
}

// TestARestartedGrantorOfTheSameNameExtendsTheRuntimesLease runs against
// the runtime's own lease endpoint (runtime/lease's Keeper and Handler): a
// grantor process that restarts under the same name (a controller pod
// restarted in place) must extend the lease at once, not be answered as
// stale until its seq catches up.
func TestARestartedGrantorOfTheSameNameExtendsTheRuntimesLease(t *testing.T) {
	k, err := runtimelease.NewKeeper(runtimelease.Config{Unit: "plant/kiln-1", Epoch: 1, Mode: holdfastv1.Failover, LeaseDuration: 10 * time.Second}, klog.Background())
	if err != nil {
		t.Fatal(err)
	}
	ca := testCA(t)
	srv := ca.ServeRuntime(t, runtimelease.NewHandler(k, runtimelease.MutualTLS(func() *x509.CertPool { return ca.Roots }, lease.GrantorIdentity), klog.Background()),
		unit.String(), 1)
	target := Target{Unit: unit, Epoch: 1, Address: srv.Listener.Addr().String(), Duration: 10 * time.Second}
	held := func() (time.Duration, bool) {
		rem, ok := k.Remaining()
		return rem, ok && k.Status().State == lease.Held
	}
	first := New(Options{Name: "ctl-0", TLS: testGrantor(t)})
	first.Ensure(target)
	waitFor(t, "the first process to grant", func() bool { _, ok := held(); return ok })
	// Let it renew a few times, so its seq is well ahead of a fresh start.
	waitFor(t, "a few renewals", func() bool { o, _ := first.Observe(unit); return o.Acks >= 3 })
	first.StopAll()
	before, _ := held()

	second := New(Options{Name: "ctl-0", TLS: testGrantor(t)})
	defer second.StopAll()
	second.Ensure(target)
	waitFor(t, "the restarted process to extend the lease", func() bool {
		rem, ok := held()
		return ok && rem > before
	})
}

// L11: an Autonomy runtime takes no lease and never fences, so its 200 is
// no acknowledgement: the grantor records a refusal, and the binding never
// reads Held on it.
func TestAnAutonomyRuntimesReplyAcknowledgesNothing(t *testing.T) {
	_, e, g := renewing(t, 1)
	e.setState(lease.Autonomous)
	waitFor(t, "an attempt", func() bool { o, _ := g.Observe(unit); return o.Attempts >= 1 })
	obs, _ := g.Observe(unit)
	if obs.Acked() || obs.LastAttempt.Outcome != Refused || !strings.Contains(obs.LastAttempt.Message, "in Autonomy mode (state Autonomous)") {
		t.Fatalf("observation %+v: an Autonomy runtime's reply must be a refusal", obs)
	}
}
