package actuator_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
)

// wantFailed: err is the failure of a wait past its bound, saying what the
// member lacks and since what it waited.
func wantFailed(t *testing.T, err error, what string) {
	t.Helper()
	if _, waiting := actuator.IsWaiting(err); waiting || err == nil || !strings.Contains(err.Error(), what) ||
		!strings.Contains(err.Error(), "after the server unit started") {
		t.Fatalf("want a failure past the bound naming %q, got %v", what, err)
	}
}

// TestSystemdPromoteIsDoneOnlyOnceTheMemberJoinedItsCluster: an active
// server unit is not a joined member. Until the local member answers,
// started as this node, and the cluster's member list (of the same cluster
// ID) names it, the promote waits saying for what, reporting the server's
// start; past the bound from that start it fails with what the member
// lacks; once joined it is done.
func TestSystemdPromoteIsDoneOnlyOnceTheMemberJoinedItsCluster(t *testing.T) {
	h := newHost(t, false)
	h.etcd.set(func(e *etcdAnswers) { e.localErr = errors.New("connection refused") })
	started, err := h.act.Promote(ctx(t), join)
	wantWaiting(t, err, "the local etcd member does not answer (connection refused)")
	if !started.Equal(h.clock.Now()) {
		t.Fatalf("a waiting promote reports start %v, want the clock's %v", started, h.clock.Now())
	}
	h.wantActive(server, "active")
	h.wantRole(holdfastv1.RoleServer)
	for _, tc := range []struct {
		name   string
		change func(*etcdAnswers)
		want   string
	}{
		{"the local member does not answer", func(e *etcdAnswers) { e.localErr = errors.New("connection refused") },
			"the local etcd member does not answer (connection refused)"},
		{"a server started from a former cluster's data", func(e *etcdAnswers) { e.local = hoststate.Member{ID: "f9", ClusterID: "c9"} },
			"the local etcd member f9 is of cluster c9, not of cluster c1 it was told to join"},
		{"a server that bootstrapped its own cluster under its own member ID", func(e *etcdAnswers) { e.local = hoststate.Member{ID: "a4", ClusterID: "c7"} },
			"the local etcd member a4 is of cluster c7, not of cluster c1 it was told to join"},
		{"the cluster does not list it", func(e *etcdAnswers) { delete(e.names, "a4") },
			"the member list of cluster c1 does not list the local etcd member a4"},
		{"a member added but not started", func(e *etcdAnswers) { e.names["a4"] = "" },
			`the local etcd member a4 has not started as cp-4 in cluster c1 (its member list names it "")`},
		{"another member's name", func(e *etcdAnswers) { e.names["a4"] = "cp-1" },
			`the local etcd member a4 has not started as cp-4 in cluster c1 (its member list names it "cp-1")`},
		{"the cluster does not answer", func(e *etcdAnswers) { e.listErr = errors.New("context deadline exceeded") },
			"the cluster's other members do not answer its member list (context deadline exceeded)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.etcd.set(func(e *etcdAnswers) { e.joined(); tc.change(e) })
			h.clock.Step(10 * time.Second)
			got, err := h.act.Promote(ctx(t), join)
			wantWaiting(t, err, tc.want)
			if !got.Equal(started) {
				t.Fatalf("a repeated promote reports start %v, want the first %v", got, started)
			}
		})
	}
	// Past the bound from the server's start the wait fails with the
	// member's state, and keeps failing (retried with backoff) while it
	// has not joined.
	h.etcd.set(func(e *etcdAnswers) { e.joined(); e.local = hoststate.Member{ID: "f9", ClusterID: "c9"} })
	h.clock.SetTime(started.Add(actuator.DefaultJoinTimeout - time.Second))
	_, err = h.act.Promote(ctx(t), join)
	wantWaiting(t, err, "is of cluster c9")
	h.clock.SetTime(started.Add(actuator.DefaultJoinTimeout))
	_, err = h.act.Promote(ctx(t), join)
	wantFailed(t, err, "the local etcd member f9 is of cluster c9")
	h.wantActive(server, "active")
	h.etcd.set((*etcdAnswers).joined)
	got, err := h.act.Promote(ctx(t), join)
	if err != nil {
		t.Fatalf("promote of a joined member: %v", err)
	}
	if !got.Equal(started) {
		t.Fatalf("the done promote reports start %v, want %v", got, started)
	}
}

// TestSystemdPromoteWithNoEtcdClientIsNeverDone: an actuator without a
// Membership cannot tell a joined member from any other etcd; it waits
// saying so, and fails past the bound.
func TestSystemdPromoteWithNoEtcdClientIsNeverDone(t *testing.T) {
	h := newHost(t, false)
	cfg := h.cfg
	cfg.Members = nil
	act := actuator.New(h.sd, cfg)
	_, err := act.Promote(ctx(t), join)
	wantWaiting(t, err, "no etcd client to ask the local member whether it joined")
	h.clock.Step(actuator.DefaultJoinTimeout)
	_, err = act.Promote(ctx(t), join)
	wantFailed(t, err, "no etcd client")
}

// TestSystemdPromoteWaitIsBoundedFromItsStart: a server that stops or
// crashes and is started again by the repeated promote keeps the start of
// the first, so a server that never joins fails the step within the bound;
// a promote with another join target starts its own bound.
func TestSystemdPromoteWaitIsBoundedFromItsStart(t *testing.T) {
	h := newHost(t, false)
	h.etcd.set(func(e *etcdAnswers) { e.localErr = errors.New("connection refused") })
	started, err := h.act.Promote(ctx(t), join)
	wantWaiting(t, err, "does not answer")
	if err := h.sd.Stop(ctx(t), server); err != nil {
		t.Fatal(err)
	}
	h.clock.Step(actuator.DefaultJoinTimeout / 2)
	h.mgr.ResetCalls()
	got, err := h.act.Promote(ctx(t), join)
	wantWaiting(t, err, "does not answer")
	if !got.Equal(started) {
		t.Fatalf("a promote that started the server again reports start %v, want the first %v", got, started)
	}
	if c := h.calls(); len(c) == 0 || c[len(c)-1] != "StartUnit(k3s.service)" {
		t.Fatalf("the stopped server was not started again: %v", c)
	}
	h.wantActive(server, "active")
	h.clock.Step(actuator.DefaultJoinTimeout / 2)
	_, err = h.act.Promote(ctx(t), join)
	wantFailed(t, err, "does not answer")

	const other = "a=http://127.0.0.1:2380,c=http://127.0.0.1:2382"
	got, err = h.act.Promote(ctx(t), other)
	wantWaiting(t, err, "does not answer")
	if !got.Equal(h.clock.Now()) {
		t.Fatalf("a promote with another join reports start %v, want its own %v", got, h.clock.Now())
	}
}

// TestSystemdPromoteResumedAfterACrashWaitsForTheJoin interrupts a promote
// at every systemd call in turn while the member has not joined: the
// resumed promote waits (never done), reports the start the first
// recorded, and is done once the member joined.
func TestSystemdPromoteResumedAfterACrashWaitsForTheJoin(t *testing.T) {
	for n := 1; ; n++ {
		h := newHost(t, false)
		h.etcd.set(func(e *etcdAnswers) { delete(e.names, "a4") })
		f := &failAt{Systemd: h.sd, n: n}
		_, err := actuator.New(f, h.cfg).Promote(ctx(t), join)
		if f.seen < n {
			wantWaiting(t, err, "does not list the local etcd member a4")
			break // no call left to interrupt
		}
		if !errors.Is(err, errCrash) {
			t.Fatalf("crash at call %d: %v", n, err)
		}
		h.clock.Step(time.Second)
		started, err := h.act.Promote(ctx(t), join)
		wantWaiting(t, err, "does not list the local etcd member a4")
		h.wantActive(server, "active")
		h.wantActive(agent, "inactive")
		h.etcd.set((*etcdAnswers).joined)
		h.clock.Step(time.Second)
		got, err := h.act.Promote(ctx(t), join)
		if err != nil {
			t.Fatalf("resumed after a crash at call %d, joined: %v", n, err)
		}
		if started.IsZero() || !got.Equal(started) {
			t.Fatalf("resumed after a crash at call %d: done with start %v, waiting with %v; want one start", n, got, started)
		}
	}
}
