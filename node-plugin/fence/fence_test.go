package fence_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/fence"
	"github.com/holdfast-io/holdfast/node-plugin/periodic/periodictest"
)

type units map[string]*holdfastv1.Unit

func (u units) Unit(_ context.Context, ns, name string) (*holdfastv1.Unit, bool) {
	x, ok := u[ns+"/"+name]
	return x, ok
}

// TestStopFailureLeavesSandboxAndRetries covers the error path real
// containerd cannot be made to produce: a StopContainer that fails. The
// sandbox is not removed (its container may still write), nothing is
// audited as done, and the next pass stops it.
func TestStopFailureLeavesSandboxAndRetries(t *testing.T) {
	cri := critesting.NewFakeRuntimeService()
	cri.SetFakeSandboxes([]*critesting.FakePodSandbox{{PodSandboxStatus: runtimeapi.PodSandboxStatus{
		Id: "sb1", State: runtimeapi.PodSandboxState_SANDBOX_READY,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "u-runtime-e1", Namespace: "plant"},
		Labels: map[string]string{holdfastv1.LabelUnit: "u", holdfastv1.LabelEpoch: "1",
			"io.kubernetes.pod.namespace": "plant", "io.kubernetes.pod.name": "u-runtime-e1"}}}})
	cri.SetFakeContainers([]*critesting.FakeContainer{{SandboxID: "sb1", ContainerStatus: runtimeapi.ContainerStatus{
		Id: "c1", State: runtimeapi.ContainerState_CONTAINER_RUNNING, Metadata: &runtimeapi.ContainerMetadata{Name: "runtime"}}}})
	u := &holdfastv1.Unit{Status: holdfastv1.UnitStatus{RuntimeBinding: &holdfastv1.RuntimeBinding{Epoch: 2}}}
	agent := &fence.Agent{CRI: cri, Units: units{"plant/u": u}, Clock: clocktesting.NewFakeClock(time.Now()), AuditDir: t.TempDir()}

	failed0 := counted(t, "holdfast_node_fence_failures_total", "plant", "u", fence.ReasonStaleEpoch)
	fenced0 := fencesCounted(t, "plant", "u", fence.ReasonStaleEpoch)
	cri.InjectError("StopContainer", errors.New("rpc error: code = Unavailable"))
	if _, err := agent.FenceStale(context.Background(), "", ""); err == nil {
		t.Fatal("a failed stop was not reported")
	}
	if d := counted(t, "holdfast_node_fence_failures_total", "plant", "u", fence.ReasonStaleEpoch) - failed0; d != 1 {
		t.Fatalf("holdfast_node_fence_failures_total rose by %v after a failed stop, want 1", d)
	}
	if d := fencesCounted(t, "plant", "u", fence.ReasonStaleEpoch) - fenced0; d != 0 {
		t.Fatalf("a failed stop counted %v fences", d)
	}
	for _, c := range cri.GetCalls() {
		if c == "StopPodSandbox" || c == "RemovePodSandbox" {
			t.Fatalf("sandbox stopped or removed after its container failed to stop: %v", cri.GetCalls())
		}
	}
	if agent.Pending() != 0 {
		t.Fatal("a failed stop was recorded as an action")
	}
	acts, err := agent.FenceStale(context.Background(), "", "")
	if err != nil || len(acts) != 1 || acts[0].Containers[0] != "c1" {
		t.Fatalf("retry: %v %+v", err, acts)
	}
	if sbs, _ := cri.ListPodSandbox(context.Background(), nil); len(sbs) != 0 {
		t.Fatalf("sandbox left after the retry: %v", sbs)
	}
	if f, d := counted(t, "holdfast_node_fence_failures_total", "plant", "u", fence.ReasonStaleEpoch)-failed0, fencesCounted(t, "plant", "u", fence.ReasonStaleEpoch)-fenced0; f != 1 || d != 1 {
		t.Fatalf("after the retry: failures rose by %v and fences by %v, want 1 and 1", f, d)
	}
}

// leaseAnswers is the runtimes' lease endpoint: nil is a runtime that does
// not answer (not listening yet, or wedged).
type leaseAnswers struct{ st *lease.Status }

func (l *leaseAnswers) Status(context.Context, string, int32) (*lease.Status, error) {
	if l.st == nil {
		return nil, errors.New("connection refused")
	}
	st := *l.st
	return &st, nil
}

func runtimeSandbox(id string) *critesting.FakePodSandbox {
	return &critesting.FakePodSandbox{PodSandboxStatus: runtimeapi.PodSandboxStatus{
		Id: id, State: runtimeapi.PodSandboxState_SANDBOX_READY,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "u-runtime-e1", Namespace: "plant"},
		Labels: map[string]string{holdfastv1.LabelUnit: "u", holdfastv1.LabelEpoch: "1",
			"io.kubernetes.pod.namespace": "plant", "io.kubernetes.pod.name": "u-runtime-e1"}}}
}

// stopCalls counts the StopContainer calls the fake CRI received.
func stopCalls(cri *critesting.FakeRuntimeService) int {
	n := 0
	for _, c := range cri.GetCalls() {
		if c == "StopContainer" {
			n++
		}
	}
	return n
}

func runtimeContainer(sandbox, id string) *critesting.FakeContainer {
	return &critesting.FakeContainer{SandboxID: sandbox, ContainerStatus: runtimeapi.ContainerStatus{
		Id: id, State: runtimeapi.ContainerState_CONTAINER_RUNNING, Metadata: &runtimeapi.ContainerMetadata{Name: "runtime"}}}
}

// With the apiserver away, the watchdog stops a wedged runtime once per
// outage and audits it once. The kubelet restarts the stopped pod in a new
// sandbox, which starts fenced and is silent until it listens; ticks of
// the watchdog (every ~4s) must not stop and audit it again and again. A
// new outage judges it afresh, and a restart granted anew that wedges again
// (answering past deadline + hold bound, not fenced) is stopped again.
func TestWedgedRuntimeStoppedOncePerApiserverOutage(t *testing.T) {
	ctx := context.Background()
	cri := critesting.NewFakeRuntimeService()
	cri.SetFakeSandboxes([]*critesting.FakePodSandbox{runtimeSandbox("sb1")})
	cri.SetFakeContainers([]*critesting.FakeContainer{runtimeContainer("sb1", "c1")})
	seconds := int32(10)
	u := &holdfastv1.Unit{Spec: holdfastv1.UnitSpec{Availability: holdfastv1.Availability{Mode: holdfastv1.Failover, LeaseDurationSeconds: seconds}},
		Status: holdfastv1.UnitStatus{RuntimeBinding: &holdfastv1.RuntimeBinding{Epoch: 1}}}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC))
	answers := &leaseAnswers{}
	dir := t.TempDir()
	agent := &fence.Agent{CRI: cri, Units: units{"plant/u": u}, Lease: answers, Clock: clk, AuditDir: dir}
	stops := func() int { return stopCalls(cri) }
	counted0 := fencesCounted(t, "plant", "u", fence.ReasonWedgedRuntime)
	audited := func() int {
		b, err := os.ReadFile(filepath.Join(dir, "fence-audit.jsonl"))
		if errors.Is(err, os.ErrNotExist) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), "\n")
	}
	tick := func(apiserverAway bool) {
		t.Helper()
		clk.Step(4 * time.Second)
		agent.APIServerUnreachable(apiserverAway)
		if err := agent.Observe(ctx); err != nil {
			t.Fatal(err)
		}
		if apiserverAway {
			if _, err := agent.FenceWedged(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := func(when string, n int) {
		t.Helper()
		if s, a := stops(), audited(); s != n || a != n {
			t.Fatalf("%s: %d StopContainer calls and %d audit records, want %d of each (calls %v)", when, s, a, n, cri.GetCalls())
		}
		if c := fencesCounted(t, "plant", "u", fence.ReasonWedgedRuntime) - counted0; c != float64(n) {
			t.Fatalf("%s: holdfast_node_fences_total rose by %v, want %d", when, c, n)
		}
	}

	// Outage 1: the runtime never answers; past a lease and hold bound
	// (10s + 5s) it is stopped.
	for range 5 {
		tick(true)
	}
	want("a silent runtime past a lease and hold bound into the outage", 1)
	// The kubelet restarts the pod in a new sandbox; it is silent, then
	// answers Ungranted (fenced) from its restart.
	cri.SetFakeSandboxes([]*critesting.FakePodSandbox{runtimeSandbox("sb2")})
	cri.SetFakeContainers([]*critesting.FakeContainer{runtimeContainer("sb2", "c2")})
	for range 5 {
		tick(true)
	}
	answers.st = &lease.Status{Epoch: 1, Mode: holdfastv1.Failover, State: lease.Ungranted, Fenced: true}
	for range 5 {
		tick(true)
	}
	want("ten more ticks of the same outage after the restart", 1)

	// The apiserver answers, then goes away again: a new outage judges a
	// silent runtime afresh (restarted once more, it never answers).
	tick(false)
	answers.st = nil
	cri.SetFakeSandboxes([]*critesting.FakePodSandbox{runtimeSandbox("sb3")})
	cri.SetFakeContainers([]*critesting.FakeContainer{runtimeContainer("sb3", "c3")})
	for range 5 {
		tick(true)
	}
	want("a second outage", 2)

	// Restarted again and granted anew, it wedges: it answers past its
	// deadline + hold bound and not fenced. That is stopped again.
	cri.SetFakeSandboxes([]*critesting.FakePodSandbox{runtimeSandbox("sb4")})
	cri.SetFakeContainers([]*critesting.FakeContainer{runtimeContainer("sb4", "c4")})
	tick(true)
	want("a restart not yet answering", 2)
	past := int64(-6000)
	answers.st = &lease.Status{Epoch: 1, Mode: holdfastv1.Failover, State: lease.Holding, RemainingMillis: &past, HoldBoundMillis: 5000}
	tick(true)
	want("a restart granted anew that wedged", 3)
}

// The watchdog's message says whether a wedged runtime still answers (its
// lease is past deadline + hold bound and it says it is not fenced) or has
// stopped answering. A pass takes time: the clock moves between the poll
// and the judgement, as it does on a real clock.
func TestWedgedMessageSaysWhetherTheRuntimeStillAnswers(t *testing.T) {
	ctx := context.Background()
	u := &holdfastv1.Unit{Spec: holdfastv1.UnitSpec{Availability: holdfastv1.Availability{Mode: holdfastv1.Failover, LeaseDurationSeconds: 10}},
		Status: holdfastv1.UnitStatus{RuntimeBinding: &holdfastv1.RuntimeBinding{Epoch: 1}}}
	remaining := func(ms int64) *lease.Status {
		return &lease.Status{Epoch: 1, Mode: holdfastv1.Failover, State: lease.Holding, RemainingMillis: &ms, HoldBoundMillis: 5000}
	}
	for _, tc := range []struct {
		name string
		// answers before and at the last poll (nil: no answer).
		before, last *lease.Status
		want         string
	}{
		{name: "still answering", before: remaining(1000), last: remaining(-6000),
			want: "lease past its deadline by 6.05s, more than the hold bound 5s, and not fenced (state Holding)"},
		{name: "stopped answering", before: remaining(1000), last: nil,
			want: "runtime stopped answering; its lease deadline passed 9.05s ago, more than the hold bound 5s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cri := critesting.NewFakeRuntimeService()
			cri.SetFakeSandboxes([]*critesting.FakePodSandbox{runtimeSandbox("sb1")})
			cri.SetFakeContainers([]*critesting.FakeContainer{runtimeContainer("sb1", "c1")})
			clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC))
			answers := &leaseAnswers{st: tc.before}
			agent := &fence.Agent{CRI: cri, Units: units{"plant/u": u}, Lease: answers, Clock: clk}
			agent.APIServerUnreachable(true)
			if err := agent.Observe(ctx); err != nil {
				t.Fatal(err)
			}
			clk.Step(10 * time.Second)
			answers.st = tc.last
			if err := agent.Observe(ctx); err != nil {
				t.Fatal(err)
			}
			clk.Step(50 * time.Millisecond)
			acts, err := agent.FenceWedged(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(acts) != 1 || acts[0].Message != tc.want {
				t.Fatalf("actions %+v, want one with message %q", acts, tc.want)
			}
		})
	}
}

// TestLoopPacesItsPassesOnTheInjectedClock: Loop.Start passes at once and
// then on every tick of its injected clock, so a wedged runtime's stop is
// decided by stepping fake clocks, with no real time waited. Every is a
// minute, longer than the test waits for a pass, so a loop on a real ticker
// fails it. With the apiserver away a silent runtime (lease 10s, hold bound
// 5s) is left by the pass at the outage's start, stopped by the pass a
// minute in, and not again by the next.
func TestLoopPacesItsPassesOnTheInjectedClock(t *testing.T) {
	cri := critesting.NewFakeRuntimeService()
	cri.SetFakeSandboxes([]*critesting.FakePodSandbox{runtimeSandbox("sb1")})
	cri.SetFakeContainers([]*critesting.FakeContainer{runtimeContainer("sb1", "c1")})
	u := &holdfastv1.Unit{Spec: holdfastv1.UnitSpec{Availability: holdfastv1.Availability{Mode: holdfastv1.Failover, LeaseDurationSeconds: 10}},
		Status: holdfastv1.UnitStatus{RuntimeBinding: &holdfastv1.RuntimeBinding{Epoch: 1}}}
	// The loop ticks on ticks; the agent judges on judge, set to the tick's
	// time as each pass begins, so the test stepping ticks during a pass
	// does not move the time that pass judges by.
	ticks := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC))
	judge := clocktesting.NewFakeClock(ticks.Now())
	agent := &fence.Agent{CRI: cri, Units: units{"plant/u": u}, Lease: &leaseAnswers{}, Clock: judge, AuditDir: t.TempDir()}
	// Each pass begins with the probe: it hands the test the pass's time and
	// waits to be released, so a pass received means the one before it has
	// finished and this one has not begun its work.
	passes, release := make(chan time.Time), make(chan struct{})
	loop := &fence.Loop{Agent: agent, Every: time.Minute, Clock: ticks, Probe: func(context.Context) error {
		judge.SetTime(ticks.Now())
		passes <- ticks.Now()
		<-release
		return errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- loop.Start(ctx) }()
	stops := func() int { return stopCalls(cri) }

	start := periodictest.Next(t, passes)
	if !start.Equal(ticks.Now()) {
		t.Fatalf("the first pass at %v, want at once", start)
	}
	release <- struct{}{}
	for _, want := range []struct {
		// finished is the pass, in seconds into the outage, that the next
		// one proves finished; stops is what it left.
		finished, stops int
	}{{0, 0}, {60, 1}, {120, 1}} {
		// Half an interval is no tick: the pass comes with the second half.
		ticks.Step(30 * time.Second)
		ticks.Step(30 * time.Second)
		if at := periodictest.Next(t, passes); !at.Equal(start.Add(time.Duration(want.finished+60) * time.Second)) {
			t.Fatalf("a pass at %v, want one a tick of a minute on the injected clock", at.Sub(start))
		}
		if got := stops(); got != want.stops {
			t.Fatalf("after the pass %ds into the outage: %d StopContainer calls, want %d (calls %v)", want.finished, got, want.stops, cri.GetCalls())
		}
		release <- struct{}{}
	}
	cancel()
	periodictest.Ended(t, done, "Start")
}

// L11: a silent runtime is judged by the lease its binding's promise
// records, not by the Unit's spec. The spec's lease was shortened to 10s on
// a live unit whose runtime may still hold a 60s lease (hold bound 30s):
// with the apiserver away, the watchdog leaves it alone past the spec's
// 10s + 5s, and stops it only past the promised 60s + 30s.
func TestTheWatchdogWaitsOutThePromisedLease(t *testing.T) {
	ctx := context.Background()
	cri := critesting.NewFakeRuntimeService()
	cri.SetFakeSandboxes([]*critesting.FakePodSandbox{runtimeSandbox("sb1")})
	cri.SetFakeContainers([]*critesting.FakeContainer{runtimeContainer("sb1", "c1")})
	u := &holdfastv1.Unit{Spec: holdfastv1.UnitSpec{Availability: holdfastv1.Availability{Mode: holdfastv1.Failover, LeaseDurationSeconds: 10}},
		Status: holdfastv1.UnitStatus{RuntimeBinding: &holdfastv1.RuntimeBinding{Epoch: 1, Promise: &holdfastv1.RuntimePromise{
			Mode: holdfastv1.Failover, LeaseDurationSeconds: 60, HoldBoundMillis: 30000, RebindMarginMillis: 35000}}}}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC))
	agent := &fence.Agent{CRI: cri, Units: units{"plant/u": u}, Lease: &leaseAnswers{}, Clock: clk}
	agent.APIServerUnreachable(true)
	pass := func(step time.Duration) int {
		t.Helper()
		clk.Step(step)
		if err := agent.Observe(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := agent.FenceWedged(ctx); err != nil {
			t.Fatal(err)
		}
		return stopCalls(cri)
	}
	pass(0)
	if n := pass(80 * time.Second); n != 0 {
		t.Fatalf("stopped %d times 80s into the outage: the runtime may hold the promised 60s lease and 30s hold bound", n)
	}
	if n := pass(11 * time.Second); n != 1 {
		t.Fatalf("%d stops 91s into the outage, past the promised lease and hold bound; want 1", n)
	}
}

// fencesCounted reads holdfast_node_fences_total of one unit and reason
// from the registry the node plugin serves.
func fencesCounted(t *testing.T, namespace, unit, reason string) float64 {
	t.Helper()
	return counted(t, "holdfast_node_fences_total", namespace, unit, reason)
}

// counted reads the counter name of one unit and reason from the registry
// the node plugin serves.
func counted(t *testing.T, name, namespace, unit, reason string) float64 {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["namespace"] == namespace && l["unit"] == unit && l["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
