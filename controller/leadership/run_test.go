package leadership

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/holdfast-io/holdfast/api/lease"
	"github.com/holdfast-io/holdfast/controller/grantor"
	"github.com/holdfast-io/holdfast/internal/audit"
	"github.com/holdfast-io/holdfast/test/poll"
)

// manager stands in for controller-runtime's manager: it returns nil when
// its context ends (a deliberate stop) or the error it is told to lose with.
type manager struct {
	started chan struct{}
	lose    chan error
}

func newManager() *manager { return &manager{started: make(chan struct{}), lose: make(chan error, 1)} }

func (m *manager) Start(ctx context.Context) error {
	close(m.started)
	select {
	case <-ctx.Done():
		return nil
	case err := <-m.lose:
		return err
	}
}

// runtimeEndpoint counts grants; it acknowledges every one.
type runtimeEndpoint struct {
	mu     sync.Mutex
	grants int
}

func (r *runtimeEndpoint) count() int { r.mu.Lock(); defer r.mu.Unlock(); return r.grants }

func startRenewing(t *testing.T, units ...string) (*grantor.Grantor, *runtimeEndpoint) {
	t.Helper()
	ep := &runtimeEndpoint{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var g lease.Grant
		_ = json.NewDecoder(r.Body).Decode(&g)
		ep.mu.Lock()
		ep.grants++
		ep.mu.Unlock()
		_ = json.NewEncoder(w).Encode(lease.Reply{Epoch: g.Epoch, State: lease.Held})
	}))
	t.Cleanup(srv.Close)
	// A real clock: the loops renew every sixth of a 10s lease.
	g := grantor.New(grantor.Options{Name: "ctl-0"})
	for _, u := range units {
		g.Ensure(grantor.Target{Unit: types.NamespacedName{Namespace: "plant", Name: u}, Epoch: 1,
			Address: srv.Listener.Addr().String(), Duration: 10 * time.Second})
	}
	t.Cleanup(g.StopAll)
	return g, ep
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 15*time.Second, what, poll.True(cond))
}

type result struct {
	ending Ending
	err    error
}

// TestADeliberateStopReleasesAndNeverStandsDown and its sibling below hold
// the two endings apart: a release happens when the stop was asked for, the
// stand-down only when it was not.
func TestADeliberateStopReleasesAndNeverStandsDown(t *testing.T) {
	g, ep := startRenewing(t, "kiln-1")
	waitUntil(t, "renewals", func() bool { return ep.count() >= 2 })
	gate := &ReleaseGate{}
	mgr := newManager()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan result, 1)
	go func() {
		e, err := Run(ctx, mgr, g, RunOptions{StandDown: 90 * time.Second, Clock: clk, Gate: gate, Actor: "ctl-0"})
		done <- result{e, err}
	}()
	<-mgr.started
	stop()
	select {
	case r := <-done:
		if r.ending != Released || r.err != nil {
			t.Fatalf("a deliberate stop ended %s, %v; want Released", r.ending, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a deliberate stop must end at once, without a stand-down")
	}
	if !gate.ReleaseAllowed() {
		t.Fatal("a deliberate stop must let the election's release through")
	}
	if running := g.Running(); len(running) != 0 {
		t.Fatalf("loops still renewing after a deliberate stop: %v", running)
	}
	if clk.HasWaiters() {
		t.Fatal("a stand-down timer was started on a deliberate stop")
	}
}

func TestALostLeadershipStandsDownRenewingWhatItHoldsAndNeverReleases(t *testing.T) {
	g, ep := startRenewing(t, "kiln-1", "press-2")
	gate := &ReleaseGate{}
	mgr := newManager()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	var trail bytes.Buffer
	al := audit.New(&trail, "units", clk)
	done := make(chan result, 1)
	go func() {
		e, err := Run(context.Background(), mgr, g, RunOptions{StandDown: 90 * time.Second, Clock: clk, Gate: gate, Audit: al, Actor: "ctl-0"})
		done <- result{e, err}
	}()
	<-mgr.started
	mgr.lose <- errors.New("leader election lost")

	waitUntil(t, "the stand-down timer", clk.HasWaiters)
	before := ep.count()
	waitUntil(t, "renewals during the stand-down", func() bool { return ep.count() >= before+2 })
	if gate.ReleaseAllowed() {
		t.Fatal("a process standing down must not release its leadership")
	}
	if err := gate.Update(context.Background(), resourceRecord("")); !errors.Is(err, ErrReleaseRefused) {
		t.Fatalf("a release during a stand-down must be refused by the gate, got %v", err)
	}
	select {
	case r := <-done:
		t.Fatalf("Run ended %s before the stand-down was over", r.ending)
	default:
	}
	if !strings.Contains(trail.String(), `"reason":"GrantorStandingDown"`) || !strings.Contains(trail.String(), "plant/kiln-1, plant/press-2") {
		t.Fatalf("the stand-down must be audited with what it renews: %s", trail.String())
	}

	clk.Step(90 * time.Second)
	select {
	case r := <-done:
		if r.ending != StoodDown || r.err == nil {
			t.Fatalf("ended %s, %v; want StoodDown with the manager's error", r.ending, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stand-down did not end at its deadline")
	}
	if running := g.Running(); len(running) != 0 {
		t.Fatalf("loops still renewing after the stand-down: %v", running)
	}
}

func TestASignalEndsTheStandDownEarly(t *testing.T) {
	g, _ := startRenewing(t, "kiln-1")
	mgr := newManager()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan result, 1)
	go func() {
		e, err := Run(ctx, mgr, g, RunOptions{StandDown: 90 * time.Second, Clock: clk, Gate: &ReleaseGate{}})
		done <- result{e, err}
	}()
	<-mgr.started
	mgr.lose <- errors.New("leader election lost")
	waitUntil(t, "the stand-down", clk.HasWaiters)
	stop()
	stoodDown(t, done, "a signal must end the stand-down")
	if len(g.Running()) != 0 {
		t.Fatal("loops still renewing")
	}
}

func TestAStandDownOfZeroOrNothingHeldExitsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name      string
		standDown time.Duration
		units     []string
	}{{"stand-down disabled", 0, []string{"kiln-1"}}, {"nothing held", 90 * time.Second, nil}} {
		g, _ := startRenewing(t, tc.units...)
		mgr := newManager()
		mgr.lose <- errors.New("leader election lost")
		e, err := Run(context.Background(), mgr, g, RunOptions{StandDown: tc.standDown, Clock: clocktesting.NewFakeClock(time.Unix(0, 0)), Gate: &ReleaseGate{}})
		if e != Exited || err == nil || len(g.Running()) != 0 {
			t.Errorf("%s: ended %s, %v, running %v; want Exited at once", tc.name, e, err, g.Running())
		}
	}
}

func TestHealthAnswersWithoutTheManager(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	addr, err := ServeHealth(ctx, "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + addr + p)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %v %v", p, resp, err)
		}
		resp.Body.Close()
	}
}

func TestTheHoldOffDeadlineIsStandDownPlusLeasePlusMarginAfterAcquisition(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	tn := NewTenure(clk, 90*time.Second)
	tn.Acquire()
	clk.Step(time.Second)
	if got, want := tn.HoldOffUntil(30*time.Second, 20*time.Second), time.Unix(1140, 0); !got.Equal(want) {
		t.Fatalf("hold-off until %v, want %v", got, want)
	}
	// The reconciler's first pass can come before the warm start records
	// the acquisition: it holds off from that pass.
	early := NewTenure(clk, 90*time.Second)
	if got, want := early.HoldOffUntil(30*time.Second, 20*time.Second), clk.Now().Add(140*time.Second); !got.Equal(want) {
		t.Fatalf("a first pass before the warm start: hold-off until %v, want %v", got, want)
	}
	clk.Step(time.Second)
	if got := early.Acquire(); !got.Equal(time.Unix(1001, 0)) {
		t.Fatalf("the warm start must keep the acquisition the first pass recorded: %v", got)
	}
	if !NewTenure(clk, 0).HoldOffUntil(30*time.Second, 20*time.Second).IsZero() {
		t.Fatal("--lease-stand-down 0 disables the hold-off with the stand-down")
	}
}

func resourceRecord(holder string) resourcelock.LeaderElectionRecord {
	return resourcelock.LeaderElectionRecord{HolderIdentity: holder, LeaseDurationSeconds: 1}
}

// lock is the election lock under a gate: it takes every write, or fails
// them with err.
type lock struct {
	resourcelock.Interface
	err error
}

func (l *lock) Update(context.Context, resourcelock.LeaderElectionRecord) error { return l.err }
func (l *lock) Create(context.Context, resourcelock.LeaderElectionRecord) error { return l.err }

// TestTheStandDownCountsFromTheLastRenewalOfTheLeadership holds L6 for a
// leader that slept through its loss (SIGSTOP, a frozen machine): it learns
// of the loss only when it runs again, and its successor's hold-off counts
// from the successor's acquisition, at least an election lease after this
// leader's last renewal. So the grants end, and the stand-down with them, a
// stand-down after the instant that renewal was sent, not after the loss.
func TestTheStandDownCountsFromTheLastRenewalOfTheLeadership(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	l := &lock{}
	gate := &ReleaseGate{Interface: l, Clock: clk}
	if until := gate.GrantsUntil(90 * time.Second); !until.IsZero() {
		t.Fatalf("no renewal yet, and grants allowed until %v", until)
	}
	l.err = errors.New("conflict")
	_ = gate.Create(ctx, resourceRecord("ctl-0"))
	_ = gate.Update(ctx, resourceRecord("ctl-0"))
	if !gate.GrantsUntil(90 * time.Second).IsZero() {
		t.Fatal("a failed acquisition or renewal counted as one")
	}
	l.err = nil
	if err := gate.Create(ctx, resourceRecord("ctl-0")); err != nil || !gate.GrantsUntil(90*time.Second).Equal(time.Unix(1090, 0)) {
		t.Fatalf("after the acquisition at T=1000s: %v, grants until %v; want T=1090s", err, gate.GrantsUntil(90*time.Second))
	}
	clk.Step(time.Second)
	_ = gate.Update(ctx, resourceRecord("ctl-0"))
	gate.AllowRelease()
	clk.Step(time.Second)
	_ = gate.Update(ctx, resourceRecord(""))
	if until := gate.GrantsUntil(90 * time.Second); !until.Equal(time.Unix(1091, 0)) {
		t.Fatalf("grants until %v; want a stand-down after the last renewal (T=1001s), the release not counted", until)
	}

	// The process sleeps for a minute, then learns it lost.
	clk.Step(59 * time.Second)
	g, _ := startRenewing(t, "kiln-1")
	mgr := newManager()
	var trail bytes.Buffer
	done := make(chan result, 1)
	go func() {
		e, err := Run(ctx, mgr, g, RunOptions{StandDown: 90 * time.Second, Clock: clk, Gate: gate, Audit: audit.New(&trail, "units", clk), Actor: "ctl-0"})
		done <- result{e, err}
	}()
	<-mgr.started
	mgr.lose <- errors.New("leader election lost")
	waitUntil(t, "the stand-down timer", clk.HasWaiters)
	if !strings.Contains(trail.String(), "for 30s") {
		t.Fatalf("the stand-down must be what is left of it (30s): %s", trail.String())
	}
	clk.Step(30 * time.Second)
	stoodDown(t, done, "the stand-down did not end a stand-down after the last renewal")
	if running := g.Running(); len(running) != 0 {
		t.Fatalf("loops still renewing after the stand-down: %v", running)
	}
}

// stoodDown waits for Run to end StoodDown; late fails with why.
func stoodDown(t *testing.T, done <-chan result, late string) {
	t.Helper()
	select {
	case r := <-done:
		if r.ending != StoodDown {
			t.Fatalf("ended %s; want StoodDown", r.ending)
		}
	case <-time.After(10 * time.Second):
		t.Fatal(late)
	}
}
