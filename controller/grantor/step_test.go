package grantor

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
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
)

// TestASteppedLoopRenewsAsARunningLoopDoes drives one loop through
// Options.Stepped against a real Keeper: the same grants (none extends
// before an acknowledged age, the anchor echoed after), the same record
// (acknowledgements, timeouts), nothing recorded of an attempt the loop
// was paused under, and the caller told of every start.
func TestASteppedLoopRenewsAsARunningLoopDoes(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC))
	unit := types.NamespacedName{Namespace: "plant", Name: "kiln"}
	k, err := runtimelease.NewKeeper(runtimelease.Config{Unit: unit.String(), Epoch: 2, Mode: holdfastv1.Failover,
		LeaseDuration: 30 * time.Second, Clock: clk}, klog.Background())
	if err != nil {
		t.Fatal(err)
	}
	h := runtimelease.NewHandler(k, runtimelease.InsecurePlaintext, klog.Background())
	serve := func(x *Exchange) *http.Response {
		req, err := x.Request()
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Result()
	}
	var started []types.NamespacedName
	notified := 0
	g := New(Options{Name: "ctl-0", Clock: clk, Rand: rand.New(rand.NewPCG(1, 2)),
		Stepped: func(u types.NamespacedName) { started = append(started, u) },
		Notify:  func(types.NamespacedName) { notified++ }})
	g.Ensure(Target{Unit: unit, Epoch: 2, Address: "10.0.0.20:9443", Duration: 30 * time.Second})
	if len(started) != 1 || started[0] != unit {
		t.Fatalf("Stepped told of %v, want the loop's start", started)
	}

	x, ok := g.Begin(unit)
	if !ok || x.Grant.AckAgeMillis != nil || x.Grant.Anchor != "" {
		t.Fatalf("first grant %+v (ok %v): want one with no acknowledged age and no anchor", x.Grant, ok)
	}
	wait, ok := g.End(x, serve(x), nil, false)
	if !ok || wait != 0 || k.State() == lease.Held {
		t.Fatalf("after the first grant: wait %v ok %v, runtime %s; want the follow-up at once and nothing granted yet", wait, ok, k.State())
	}
	clk.Step(10 * time.Millisecond)
	x, _ = g.Begin(unit)
	if x.Grant.AckAgeMillis == nil || x.Grant.Anchor == "" {
		t.Fatalf("second grant %+v: want the acknowledged age and the anchor echoed", x.Grant)
	}
	wait, ok = g.End(x, serve(x), nil, false)
	if !ok || k.State() != lease.Held || wait <= 0 || wait > 5*time.Second {
		t.Fatalf("after the second grant: wait %v ok %v, runtime %s; want Held and the next renewal within a sixth of the lease", wait, ok, k.State())
	}
	if obs, _ := g.Observe(unit); obs.Acks != 2 || obs.Anchor.IsZero() || notified != 1 {
		t.Fatalf("observation %+v, %d notifications: want two acknowledgements, the anchor dated, one notification", obs.Book, notified)
	}

	clk.Step(wait)
	x, _ = g.Begin(unit)
	clk.Step(x.Timeout)
	if _, ok := g.End(x, nil, context.DeadlineExceeded, true); !ok {
		t.Fatal("a timed-out attempt was not recorded")
	}
	if obs, _ := g.Observe(unit); obs.Timeouts != 1 || obs.LastAttempt.Outcome != Unreachable {
		t.Fatalf("after a timeout: %d timeouts, last %s; want 1, Unreachable", obs.Timeouts, obs.LastAttempt.Outcome)
	}

	x, _ = g.Begin(unit)
	before, _ := g.Pause(unit)
	if _, ok := g.End(x, serve(x), nil, false); ok {
		t.Fatal("an attempt ended after its loop was paused was recorded")
	}
	if after, _ := g.Observe(unit); after.Attempts != before.Attempts {
		t.Fatalf("attempts %d after the pause, %d before: the paused attempt was recorded", after.Attempts, before.Attempts)
	}
	if _, ok := g.Begin(unit); ok {
		t.Fatal("a paused loop began an attempt")
	}
	g.Ensure(Target{Unit: unit, Epoch: 2, Address: "10.0.0.20:9443", Duration: 30 * time.Second})
	if len(started) != 2 {
		t.Fatalf("Stepped told of %d starts, want the restart too", len(started))
	}
	if x, ok := g.Begin(unit); !ok || x.Grant.AckAgeMillis == nil {
		t.Fatal("the restarted loop lost its book")
	}
}

// TestNoGrantIsSentOnceTheLeadershipLetsNoMore: from Options.GrantsUntil
// on (the leadership's last renewal + the stand-down, L6) neither a
// stepped loop nor a running one sends a grant, whatever was queued while
// the process slept.
func TestNoGrantIsSentOnceTheLeadershipLetsNoMore(t *testing.T) {
	start := time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)
	unit := types.NamespacedName{Namespace: "plant", Name: "kiln"}
	target := Target{Unit: unit, Epoch: 2, Address: "10.0.0.20:9443", Duration: 30 * time.Second}

	clk := clocktesting.NewFakeClock(start)
	until := start.Add(90 * time.Second)
	g := New(Options{Name: "ctl-0", Clock: clk, Rand: rand.New(rand.NewPCG(1, 2)), Stepped: func(types.NamespacedName) {},
		Notify: func(types.NamespacedName) {}, GrantsUntil: func() time.Time { return until }})
	g.Ensure(target)
	if _, ok := g.Begin(unit); !ok {
		t.Fatal("no grant before the leadership's deadline")
	}
	clk.Step(90 * time.Second)
	if x, ok := g.Begin(unit); ok {
		t.Fatalf("grant %+v sent at the leadership's deadline", x.Grant)
	}

	for _, tc := range []struct {
		name string
		// until answers the n-th call of GrantsUntil.
		until func(n int) time.Time
		// want is the grants sent by the time the loop parks (-1: at
		// least one).
		want int
	}{
		{"before the deadline", func(int) time.Time { return start.Add(time.Second) }, -1},
		{"past it", func(int) time.Time { return start }, 0},
		{"no renewal yet", func(int) time.Time { return time.Time{} }, 0},
		{"past it after one grant", func(n int) time.Time {
			if n == 1 {
				return start.Add(time.Second)
			}
			return start
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			grants := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				grants++
				mu.Unlock()
				_ = json.NewEncoder(w).Encode(lease.Reply{Epoch: 2, State: lease.Held})
			}))
			defer srv.Close()
			clk := clocktesting.NewFakeClock(start)
			calls := 0
			g := New(Options{Name: "ctl-0", Clock: clk, Notify: func(types.NamespacedName) {}, GrantsUntil: func() time.Time {
				calls++
				return tc.until(calls)
			}})
			defer g.StopAll()
			running := target
			running.Address = srv.Listener.Addr().String()
			g.Ensure(running)
			sent := func() int { mu.Lock(); defer mu.Unlock(); return grants }
			if tc.want < 0 {
				poll.Until(t, 15*time.Second, "a grant sent before the leadership's deadline", poll.True(func() bool { return sent() > 0 }))
				return
			}
			// Refused, the attempt sends nothing and the loop parks until
			// its next one.
			parked := func() bool {
				g.mu.Lock()
				defer g.mu.Unlock()
				return g.loops[unit].parked.Load()
			}
			poll.Until(t, 15*time.Second, "the loop to wait for its next attempt", poll.True(parked))
			if n := sent(); n != tc.want {
				t.Fatalf("%d grants sent; want %d, none past the leadership's deadline", n, tc.want)
			}
		})
	}
}
