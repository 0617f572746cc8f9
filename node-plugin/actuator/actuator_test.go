package actuator_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/node-plugin/tombstone"
	"github.com/holdfast-io/holdfast/test/dbusdouble"
	"github.com/holdfast-io/holdfast/test/systemdhost"
)

const (
	server = "k3s.service"
	agent  = "k3s-agent.service"
	join   = "a=http://127.0.0.1:2380,b=http://127.0.0.1:2381"
)

// TestMain lets the test binary stand in for `holdfast-node role-is` in the
// units' ExecCondition lines: the same function the real binary runs.
func TestMain(m *testing.M) {
	if os.Getenv("HOLDFAST_TEST_ROLE_IS") == "1" {
		os.Exit(hoststate.RoleIsMain(os.Args[2:], os.Stderr))
	}
	os.Setenv("HOLDFAST_TEST_ROLE_IS", "1")
	os.Exit(m.Run())
}

type host struct {
	t     *testing.T
	mgr   *dbusdouble.Manager
	sd    *actuator.DBusSystemd
	state hoststate.State
	act   *actuator.Actuator
	clock *clocktesting.FakeClock
	cfg   actuator.Config
	// etcd answers the promote's join check: joined unless a test says.
	etcd *etcdAnswers
}

// newHost serves the systemd double with an installed server and agent
// unit, the server guarded by `role-is server` as the chart's unit is, and
// connects go-systemd to it.
func newHost(t *testing.T, serverActive bool) *host {
	t.Helper()
	sh := systemdhost.Start(t, func(_ hoststate.State, roleIs func(string) []string) []dbusdouble.Unit {
		return []dbusdouble.Unit{
			{Name: server, ExecCondition: roleIs(holdfastv1.RoleServer), Enabled: serverActive, Active: serverActive},
			{Name: agent, ExecCondition: roleIs(holdfastv1.RoleAgent), Enabled: !serverActive, Active: !serverActive},
		}
	})
	h := &host{t: t, mgr: sh.Manager, sd: sh.Systemd, state: sh.State,
		clock: clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)), etcd: joinedAnswers()}
	h.cfg = actuator.Config{ServerUnit: server, AgentUnit: agent, SystemdDir: sh.SystemdDir, State: sh.State, Clock: h.clock,
		NodeName: spNode, Members: h.etcd}
	h.act = actuator.New(h.sd, h.cfg)
	return h
}

func (h *host) calls() []string {
	var out []string
	for _, c := range h.mgr.Calls() {
		out = append(out, c.String())
	}
	return out
}

func (h *host) wantCalls(want ...string) {
	h.t.Helper()
	if got := h.calls(); !reflect.DeepEqual(got, want) {
		h.t.Fatalf("systemd calls:\n got  %v\n want %v", got, want)
	}
}

func (h *host) wantRole(want string) {
	h.t.Helper()
	if got, err := h.state.Role(); err != nil || got != want {
		h.t.Fatalf("role file = %q, %v; want %q", got, err, want)
	}
}

func (h *host) wantActive(unit, want string) {
	h.t.Helper()
	if got := h.mgr.ActiveState(unit); got != want {
		h.t.Fatalf("%s is %s, want %s", unit, got, want)
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func TestPromoteSwitchesUnitsInOrderAtTheProtocol(t *testing.T) {
	h := newHost(t, false)
	started, err := h.act.Promote(ctx(t), join)
	if err != nil {
		t.Fatal(err)
	}
	h.wantCalls("Reload()", "StopUnit(k3s-agent.service)", "DisableUnitFiles(k3s-agent.service)",
		"UnmaskUnitFiles(k3s.service,runtime)", "EnableUnitFiles(k3s.service)", "StartUnit(k3s.service)")
	if !started.Equal(h.clock.Now()) {
		t.Errorf("startedAt = %v, want the clock's %v", started, h.clock.Now())
	}
	h.wantRole(holdfastv1.RoleServer)
	h.wantActive(server, "active")
	h.wantActive(agent, "inactive")
	if !h.mgr.Enabled(server) || h.mgr.Enabled(agent) {
		t.Errorf("enabled: server %v agent %v; want server only", h.mgr.Enabled(server), h.mgr.Enabled(agent))
	}
	// systemd saw the drop-in because the actuator reloaded after writing it.
	env := h.mgr.Env(server)
	if env[actuator.EnvJoin] != join || env[actuator.EnvClusterState] != "existing" {
		t.Errorf("server unit environment after reload = %v, want the join drop-in", env)
	}
	if j, _ := h.state.Join(); j != join {
		t.Errorf("join file = %q, want %q", j, join)
	}

	// Repeating the step (a resumed reconcile) starts nothing twice.
	h.mgr.ResetCalls()
	h.clock.Step(time.Minute)
	again, err := h.act.Promote(ctx(t), join)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Equal(started) {
		t.Errorf("a repeated promote reports start %v, want the first start %v", again, started)
	}
	for _, c := range h.calls() {
		if strings.HasPrefix(c, "StartUnit") {
			t.Errorf("a repeated promote started a unit: %v", h.calls())
		}
	}
}

func TestPromoteRefusedWhenNotProvisionedOrJoinMalformed(t *testing.T) {
	h := newHost(t, false)
	noServer := h.cfg
	noServer.ServerUnit = "missing.service"
	_, err := actuator.New(h.sd, noServer).Promote(ctx(t), join)
	if !actuator.IsRefused(err) || !strings.Contains(err.Error(), "not provisioned") {
		t.Fatalf("promote on a host without the server unit: %v, want refused not provisioned", err)
	}
	_, err = h.act.Promote(ctx(t), "http://127.0.0.1:2380")
	if !actuator.IsRefused(err) || !strings.Contains(err.Error(), `metadata.annotations[holdfast.io/role-join]`) {
		t.Fatalf("promote with a malformed join: %v, want refused naming the annotation", err)
	}
	h.wantCalls()
	if r, _ := h.state.Role(); r != "" {
		t.Errorf("a refused promote wrote the role file: %q", r)
	}
}

func TestStepDownWritesRoleFileAgentBeforeRemoval(t *testing.T) {
	h := newHost(t, false)
	if _, err := h.act.Promote(ctx(t), join); err != nil {
		t.Fatal(err)
	}
	h.mgr.ResetCalls()
	if err := h.act.StepDown(ctx(t)); err != nil {
		t.Fatal(err)
	}
	// Held out of serving by a restart while the role file still said
	// server, then masked: the member keeps running and voting.
	h.wantCalls("Reload()", "RestartUnit(k3s.service)", "MaskUnitFiles(k3s.service,runtime)")
	if env := h.mgr.Env(server); env[actuator.EnvLevel] != actuator.LevelEtcdOnly {
		t.Errorf("server environment %v, want the etcd-only level", env)
	}
	h.wantRole(holdfastv1.RoleAgent)
	h.wantActive(server, "active")
	if rt, _ := h.mgr.Masked(server); !rt {
		t.Fatal("server unit not masked at runtime after step-down")
	}
	// Nothing can start the server again before the removal: the mask
	// refuses the start at the protocol...
	if _, err := h.sd.Conn.StartUnitContext(ctx(t), server, "replace", nil); err == nil || !strings.Contains(err.Error(), "masked") {
		t.Fatalf("start of the stepped-down server: %v, want masked", err)
	}
	// ...and after a reboot (runtime mask gone) its ExecCondition skips it.
	if err := h.sd.Stop(ctx(t), server); err != nil {
		t.Fatal(err)
	}
	if err := h.sd.UnmaskRuntime(ctx(t), server); err != nil {
		t.Fatal(err)
	}
	if err := h.sd.Start(ctx(t), server); err == nil {
		t.Fatal("the server started with the role file saying agent")
	}
	if h.mgr.ConditionSkips(server) != 1 {
		t.Fatalf("ExecCondition skips = %d, want 1", h.mgr.ConditionSkips(server))
	}

	// A resumed step-down does not restart the server again.
	h.mgr.ResetCalls()
	if err := h.act.StepDown(ctx(t)); err != nil {
		t.Fatal(err)
	}
	h.wantCalls("MaskUnitFiles(k3s.service,runtime)")
}

func TestTombstoneServerNeverStarts(t *testing.T) {
	// The server runs: a host that was down through its swap came back
	// and started it before the plugin could write the tombstone.
	h := newHost(t, true)
	if err := h.state.SetRole(holdfastv1.RoleServer); err != nil {
		t.Fatal(err)
	}
	if err := h.state.SetTombstone(holdfastv1.Tombstone{MemberID: "8e9e05c52164694d", ClusterID: "cdf818194e3a8c32", At: metav1.Now()}); err != nil {
		t.Fatal(err)
	}
	ok, why, err := h.act.Guard(ctx(t))
	if err != nil || ok || !strings.Contains(why, "8e9e05c52164694d") {
		t.Fatalf("guard = %v %q %v, want refused naming the member", ok, why, err)
	}
	h.wantCalls("MaskUnitFiles(k3s.service,runtime)", "StopUnit(k3s.service)")
	h.wantActive(server, "inactive")
	if _, err := h.act.Promote(ctx(t), join); !actuator.IsRefused(err) {
		t.Fatalf("promote with a tombstone: %v, want refused", err)
	}
	// A reboot clears the runtime mask; the ExecCondition still holds.
	if err := h.sd.UnmaskRuntime(ctx(t), server); err != nil {
		t.Fatal(err)
	}
	if err := h.sd.Start(ctx(t), server); err == nil {
		t.Fatal("the server started with a tombstone")
	}
	h.wantActive(server, "inactive")
}

func TestFinishDemoteMovesDataAsideKeepingNewestCopy(t *testing.T) {
	h := newHost(t, false)
	for round, marker := range []string{"first", "second"} {
		if _, err := h.act.Promote(ctx(t), join); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if err := os.MkdirAll(filepath.Join(h.state.MemberDataDir, "member"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(h.state.MemberDataDir, "marker"), []byte(marker), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := h.act.StepDown(ctx(t)); err != nil {
			t.Fatal(err)
		}
		if err := h.state.SetTombstone(holdfastv1.Tombstone{MemberID: "1", ClusterID: "2"}); err != nil {
			t.Fatal(err)
		}
		h.mgr.ResetCalls()
		if err := h.act.FinishDemote(ctx(t)); err != nil {
			t.Fatal(err)
		}
		h.wantCalls("MaskUnitFiles(k3s.service,runtime)", "StopUnit(k3s.service)", "DisableUnitFiles(k3s.service)",
			"Reload()", "EnableUnitFiles(k3s-agent.service)", "StartUnit(k3s-agent.service)")
		h.wantActive(server, "inactive")
		h.wantActive(agent, "active")
		h.wantRole(holdfastv1.RoleAgent)
		if env := h.mgr.Env(server); len(env) != 0 {
			t.Errorf("server drop-ins left after finish-demote: %v", env)
		}
		got, err := os.ReadFile(filepath.Join(h.state.MovedAside(), "marker"))
		if err != nil || string(got) != marker {
			t.Fatalf("moved-aside copy holds %q, %v; want the newest, %q", got, err, marker)
		}
		entries, _ := os.ReadDir(filepath.Dir(h.state.MemberDataDir))
		var copies []string
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "db") {
				copies = append(copies, e.Name())
			}
		}
		if !reflect.DeepEqual(copies, []string{"db" + hoststate.MovedAsideSuffix}) {
			t.Fatalf("member data copies = %v, want one moved-aside copy", copies)
		}
		if ts, _ := h.state.Tombstone(); ts != nil {
			t.Errorf("tombstone still live after finish-demote")
		}
		if _, err := os.Stat(filepath.Join(h.state.Dir, hoststate.StartedAtFile)); !os.IsNotExist(err) {
			t.Errorf("the finished host keeps the record of its server's start: %v", err)
		}
	}
}

func TestFormerMemberNeverBootstraps(t *testing.T) {
	h := newHost(t, false)
	if err := os.MkdirAll(h.state.MovedAside(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := h.state.SetRole(holdfastv1.RoleServer); err != nil {
		t.Fatal(err)
	}
	// No join target: the server is refused even with the role file server
	// and no mask.
	if err := h.sd.Start(ctx(t), server); err == nil {
		t.Fatal("a former member with no join target started a server")
	}
	h.wantActive(server, "inactive")
	if ok, why, _ := h.state.ServerAllowed(); ok || !strings.Contains(why, "second cluster") {
		t.Fatalf("ServerAllowed = %v %q", ok, why)
	}
	// A promote with a join target starts it, as a joining member.
	if _, err := h.act.Promote(ctx(t), join); err != nil {
		t.Fatal(err)
	}
	h.wantActive(server, "active")
	if env := h.mgr.Env(server); env[actuator.EnvClusterState] != "existing" {
		t.Fatalf("server environment %v, want cluster state existing", env)
	}
}

// failAt makes the n-th systemd call fail, as a crash of the node plugin
// between two calls leaves the host.
type failAt struct {
	actuator.Systemd
	n, seen int
}

var errCrash = errors.New("crash")

func (f *failAt) tick() error {
	f.seen++
	if f.seen == f.n {
		return errCrash
	}
	return nil
}
func (f *failAt) Start(c context.Context, u string) error {
	if err := f.tick(); err != nil {
		return err
	}
	return f.Systemd.Start(c, u)
}
func (f *failAt) Stop(c context.Context, u string) error {
	if err := f.tick(); err != nil {
		return err
	}
	return f.Systemd.Stop(c, u)
}
func (f *failAt) Restart(c context.Context, u string) error {
	if err := f.tick(); err != nil {
		return err
	}
	return f.Systemd.Restart(c, u)
}
func (f *failAt) Enable(c context.Context, u string) error {
	if err := f.tick(); err != nil {
		return err
	}
	return f.Systemd.Enable(c, u)
}
func (f *failAt) Disable(c context.Context, u string) error {
	if err := f.tick(); err != nil {
		return err
	}
	return f.Systemd.Disable(c, u)
}
func (f *failAt) MaskRuntime(c context.Context, u string) error {
	if err := f.tick(); err != nil {
		return err
	}
	return f.Systemd.MaskRuntime(c, u)
}
func (f *failAt) UnmaskRuntime(c context.Context, u string) error {
	if err := f.tick(); err != nil {
		return err
	}
	return f.Systemd.UnmaskRuntime(c, u)
}
func (f *failAt) Reload(c context.Context) error {
	if err := f.tick(); err != nil {
		return err
	}
	return f.Systemd.Reload(c)
}

// TestEveryStepResumesAfterACrashAtAnyCall interrupts each step at every
// systemd call in turn and re-runs it: the host always ends where an
// uninterrupted step leaves it.
func TestEveryStepResumesAfterACrashAtAnyCall(t *testing.T) {
	type outcome struct {
		role                 string
		server, agent        string
		serverMasked, aside  bool
		serverEnabled, agEna bool
	}
	observe := func(h *host) outcome {
		role, _ := h.state.Role()
		rt, _ := h.mgr.Masked(server)
		aside, _ := h.state.HasMovedAside()
		return outcome{role, h.mgr.ActiveState(server), h.mgr.ActiveState(agent), rt, aside, h.mgr.Enabled(server), h.mgr.Enabled(agent)}
	}
	steps := []struct {
		name  string
		setup func(h *host)
		run   func(a *actuator.Actuator) error
		want  outcome
	}{
		{"promote", func(*host) {}, func(a *actuator.Actuator) error { _, err := a.Promote(context.Background(), join); return err },
			outcome{holdfastv1.RoleServer, "active", "inactive", false, false, true, false}},
		{"step-down", func(h *host) { mustPromote(h) }, func(a *actuator.Actuator) error { return a.StepDown(context.Background()) },
			outcome{holdfastv1.RoleAgent, "active", "inactive", true, false, true, false}},
		{"finish-demote", func(h *host) {
			mustPromote(h)
			_ = os.MkdirAll(h.state.MemberDataDir, 0o755)
			if err := h.act.StepDown(ctx(h.t)); err != nil {
				h.t.Fatal(err)
			}
		}, func(a *actuator.Actuator) error { return a.FinishDemote(context.Background()) },
			outcome{holdfastv1.RoleAgent, "inactive", "active", true, true, false, true}},
	}
	for _, s := range steps {
		for n := 1; ; n++ {
			h := newHost(t, false)
			s.setup(h)
			f := &failAt{Systemd: h.sd, n: n}
			err := s.run(actuator.New(f, h.cfg))
			if err == nil {
				if f.seen < n {
					break // no call left to interrupt
				}
				t.Fatalf("%s: crash at call %d went unnoticed", s.name, n)
			}
			if !errors.Is(err, errCrash) {
				t.Fatalf("%s: crash at call %d: %v", s.name, n, err)
			}
			if err := s.run(h.act); err != nil {
				t.Fatalf("%s: resumed after a crash at call %d: %v", s.name, n, err)
			}
			if got := observe(h); got != s.want {
				t.Fatalf("%s: resumed after a crash at call %d: host %+v, want %+v", s.name, n, got, s.want)
			}
		}
	}
}

func mustPromote(h *host) {
	h.t.Helper()
	if _, err := h.act.Promote(ctx(h.t), join); err != nil {
		h.t.Fatal(err)
	}
}

// blockingEtcd answers the tombstone check: the local member is gone (its
// server is being stopped) and the member list, once released, no longer
// names it. entered is closed when the check is between reading the member
// and writing the tombstone.
type blockingEtcd struct {
	entered, release chan struct{}
	clusterID        string
}

func (e *blockingEtcd) Local(context.Context) (hoststate.Member, error) {
	return hoststate.Member{}, errors.New("connection refused")
}

func (e *blockingEtcd) Members(context.Context) (string, []string, error) {
	close(e.entered)
	<-e.release
	return e.clusterID, []string{"91bc3c398fb3c146"}, nil
}

// A tombstone check that read the member before a rollback (or
// finish-demote) cleared it must not write its tombstone after the
// rollback finished: the host would be an agent with a live tombstone, and
// every later promote of it refused. The check and the rollback hold one
// host lock; ordering hooks (no sleeps) put the rollback exactly inside
// the check.
func TestTombstoneCheckNeverInterleavesWithRollback(t *testing.T) {
	h := newHost(t, true)
	if err := h.state.SetRole(holdfastv1.RoleServer); err != nil {
		t.Fatal(err)
	}
	if err := h.state.SetMember(hoststate.Member{ID: "8e9e05c52164694d", ClusterID: "cdf818194e3a8c32"}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(h.state.MemberDataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	etcd := &blockingEtcd{entered: make(chan struct{}), release: make(chan struct{}), clusterID: "cdf818194e3a8c32"}
	w := &tombstone.Watcher{Etcd: etcd, State: h.state, Clock: h.clock}
	checked := make(chan error, 1)
	go func() {
		_, err := w.Check(ctx(t))
		checked <- err
	}()
	<-etcd.entered

	cfg := h.cfg
	waiting := make(chan struct{})
	cfg.State.OnLockWait = func() { close(waiting) }
	act := actuator.New(h.sd, cfg)
	rolledBack := make(chan error, 1)
	go func() { rolledBack <- act.Rollback(ctx(t)) }()
	select {
	case err := <-rolledBack:
		close(etcd.release)
		<-checked
		t.Fatalf("the rollback ran (err %v) while a tombstone check was between reading the member and writing the tombstone", err)
	case <-waiting:
	}
	close(etcd.release)
	if err := <-checked; err != nil {
		t.Fatal(err)
	}
	if err := <-rolledBack; err != nil {
		t.Fatal(err)
	}
	ts, err := h.state.Tombstone()
	if err != nil || ts != nil {
		t.Fatalf("after the rollback the host holds a live tombstone %+v (err %v), want it retired", ts, err)
	}
	if m, err := h.state.Member(); err != nil || m != nil {
		t.Fatalf("after the rollback the member record is %+v (err %v), want cleared", m, err)
	}
	// The next check finds no member and writes nothing.
	if ok, err := (&tombstone.Watcher{Etcd: etcd, State: h.state, Clock: h.clock}).Check(ctx(t)); err != nil || ok {
		t.Fatalf("a check after the rollback = %v, %v; want no tombstone", ok, err)
	}
}

// TestTheStartConditionIsInstalledOnceAndKept: InstallStartCondition
// writes the server unit's ExecCondition drop-in and reloads systemd so it
// holds from the next start; installing the same again changes nothing and
// reloads nothing; an argument systemd would split or expand is refused and
// nothing is written. A finish-demote keeps it: every later start is judged.
func TestTheStartConditionIsInstalledOnceAndKept(t *testing.T) {
	h := newHost(t, true)
	path := filepath.Join(h.cfg.SystemdDir, server+".d", actuator.StartDropIn)
	if err := h.act.InstallStartCondition(ctx(t), []string{"/host/a b", "start-condition"}); err == nil {
		t.Fatal("an argument with a space was installed")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused start condition wrote %s: %v", path, err)
	}
	argv := []string{"/var/lib/holdfast/bin/holdfast-node", "start-condition", "--host-dir=/var/lib/holdfast"}
	if err := h.act.InstallStartCondition(ctx(t), argv); err != nil {
		t.Fatal(err)
	}
	h.wantCalls("Reload()")
	b, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(b), "\n[Service]\nExecCondition="+strings.Join(argv, " ")+"\n") {
		t.Fatalf("drop-in %s = %q (%v), want the ExecCondition line", path, b, err)
	}
	h.mgr.ResetCalls()
	if err := h.act.InstallStartCondition(ctx(t), argv); err != nil {
		t.Fatal(err)
	}
	h.wantCalls()
	if err := h.state.SetTombstone(holdfastv1.Tombstone{MemberID: "1", ClusterID: "2"}); err != nil {
		t.Fatal(err)
	}
	if err := h.act.FinishDemote(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("finish-demote removed the start condition: %v", err)
	}
}
