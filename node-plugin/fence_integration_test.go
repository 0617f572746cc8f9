//go:build integration

package nodeplugin_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/fence"
	"github.com/holdfast-io/holdfast/test/crihost"
	"github.com/holdfast-io/holdfast/test/poll"
	"github.com/holdfast-io/holdfast/test/ports"
)

const runtimeImage = "holdfast.test/runtime:1"

type rig struct {
	t    testing.TB
	host *crihost.Host
	rt   internalapi.RuntimeService
	ns   string
	dir  string
}

func newRig(t testing.TB) *rig {
	t.Helper()
	dir := t.TempDir()
	h, err := crihost.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	tar := filepath.Join(dir, "rt.tar")
	if err := crihost.BuildTestImage(tar, runtimeImage, []string{"lease"}); err != nil {
		t.Fatal(err)
	}
	if err := h.Import(tar); err != nil {
		t.Fatal(err)
	}
	rt, err := h.RuntimeService(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "fence-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, host: h, rt: rt, ns: ns.Name, dir: dir}
}

// unit creates a Unit bound at epoch.
func (r *rig) unit(name string, mode holdfastv1.AvailabilityMode, leasePort int32, epoch int64) *holdfastv1.Unit {
	r.t.Helper()
	ctx := context.Background()
	a := holdfastv1.Availability{Mode: mode, LeaseDurationSeconds: 10, RuntimeStartupGraceSeconds: 120}
	if mode == holdfastv1.Failover {
		a.Targets = &holdfastv1.FailoverTargets{Nodes: []string{"standby"}}
	}
	u := &holdfastv1.Unit{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name},
		Spec: holdfastv1.UnitSpec{Runtime: holdfastv1.UnitRuntime{Image: runtimeImage, LeasePort: leasePort},
			NodeSelector: map[string]string{"holdfast.io/device": name}, Availability: a}}
	if err := env.Client.Create(ctx, u); err != nil {
		r.t.Fatal(err)
	}
	r.bind(u, epoch)
	return u
}

// bind is the controller's re-bind: a new epoch in the unit's binding.
func (r *rig) bind(u *holdfastv1.Unit, epoch int64) {
	r.t.Helper()
	u.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{Node: "n1", Epoch: epoch, Pod: fmt.Sprintf("%s-runtime-e%d", u.Name, epoch)}
	if err := env.Client.Status().Update(context.Background(), u); err != nil {
		r.t.Fatal(err)
	}
}

// runtime runs a runtime pod of unit at epoch as the kubelet would, its
// lease endpoint on port, with the test image's lease flags.
func (r *rig) runtime(unit string, epoch int64, port int32, mode holdfastv1.AvailabilityMode, flags ...string) (sandbox, container string) {
	r.t.Helper()
	pod := fmt.Sprintf("%s-runtime-e%d", unit, epoch)
	args := append([]string{"--listen", fmt.Sprintf("127.0.0.1:%d", port), "--unit", r.ns + "/" + unit,
		"--epoch", strconv.FormatInt(epoch, 10), "--mode", string(mode)}, flags...)
	sb, c, err := crihost.RunPod(context.Background(), r.rt, filepath.Join(r.dir, "logs"), crihost.Pod{
		Namespace: r.ns, Name: pod, UID: pod + "-uid", Image: runtimeImage, Args: args,
		Labels: map[string]string{holdfastv1.LabelUnit: unit, holdfastv1.LabelEpoch: strconv.FormatInt(epoch, 10)}})
	if err != nil {
		r.t.Fatal(err)
	}
	waitTCP(r.t, port)
	return sb, c
}

func (r *rig) sandboxGone(id string) bool {
	sbs, err := r.rt.ListPodSandbox(context.Background(), &runtimeapi.PodSandboxFilter{Id: id})
	return err == nil && len(sbs) == 0
}

func (r *rig) running(container string) bool {
	st, err := r.rt.ContainerStatus(context.Background(), container, false)
	return err == nil && st.Status.State == runtimeapi.ContainerState_CONTAINER_RUNNING
}

func waitTCP(t testing.TB, port int32) {
	t.Helper()
	poll.Until(t, 20*time.Second, fmt.Sprintf("the runtime to listen on %d", port), func() (bool, string) {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		return true, ""
	})
}

func freePort(t testing.TB) int32 { return freePorts(t, 1)[0] }

// freePorts returns n distinct free loopback ports as a pod spec holds them.
func freePorts(t testing.TB, n int) []int32 {
	ps := ports.Free(t, n)
	out := make([]int32, n)
	for i, p := range ps {
		out[i] = int32(p)
	}
	return out
}

func startManager(t testing.TB, setup func(ctrl.Manager) error) client.Client {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: ctrlConfig()})
	if err != nil {
		t.Fatal(err)
	}
	if err := setup(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	return mgr.GetClient()
}

func waitFor(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	poll.Until(t, 60*time.Second, what, poll.True(cond))
	return time.Since(start)
}

func events(t *testing.T, ns, reason string) []corev1.Event {
	t.Helper()
	var list corev1.EventList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range list.Items {
		if e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// TestStaleEpochRuntimeStoppedAndSandboxRemoved (docs/design.md §3 L7): after a
// re-bind, the runtime of the old epoch is stopped with no grace and its
// sandbox removed, through the real containerd and runc; the runtime of the
// current epoch is never touched. The action is an Event on the unit and a
// line in the host audit file.
func TestStaleEpochRuntimeStoppedAndSandboxRemoved(t *testing.T) {
	r := newRig(t)
	ps := freePorts(t, 2)
	port1, port2 := ps[0], ps[1]
	u := r.unit("boiler", holdfastv1.Failover, port1, 1)
	oldSB, oldC := r.runtime("boiler", 1, port1, holdfastv1.Failover)
	agent := &fence.Agent{CRI: r.rt, Lease: fence.HTTPLease{}, Clock: clocktesting.NewFakeClock(time.Now()), AuditDir: filepath.Join(r.dir, "audit")}
	startManager(t, func(mgr ctrl.Manager) error {
		agent.Units = fence.CacheUnits{Client: mgr.GetClient()}
		agent.Notifier = fence.EventNotifier{Client: mgr.GetClient(), NodeName: "n1"}
		return (&fence.UnitReconciler{Agent: agent}).SetupWithManager(mgr)
	})
	// The current epoch is never touched.
	time.Sleep(500 * time.Millisecond) // an absence of a stop: only a window can show it
	if !r.running(oldC) {
		t.Fatal("the runtime of the current epoch was stopped")
	}

	fenced := func() float64 {
		return counter(t, "holdfast_node_fences_total", map[string]string{"namespace": r.ns, "unit": "boiler", "reason": fence.ReasonStaleEpoch})
	}
	if n := fenced(); n != 0 {
		t.Fatalf("holdfast_node_fences_total is %v before any runtime was stale", n)
	}

	// Re-bind: epoch 2. The new runtime (current) runs beside the old one.
	_, newC := r.runtime("boiler", 2, port2, holdfastv1.Failover)
	r.bind(u, 2)
	took := waitFor(t, "stale sandbox removed", func() bool { return r.sandboxGone(oldSB) })
	t.Logf("stale runtime stopped and its sandbox removed %s after the binding change was written", took)
	if !r.running(newC) {
		t.Fatal("the runtime of the current epoch was stopped")
	}
	waitFor(t, "Event on the unit", func() bool { return len(events(t, r.ns, fence.ReasonStaleEpoch)) == 1 })
	ev := events(t, r.ns, fence.ReasonStaleEpoch)[0]
	if ev.InvolvedObject.Name != "boiler" || !strings.Contains(ev.Message, "epoch 1 is behind the unit's binding at epoch 2") {
		t.Fatalf("event %+v", ev)
	}
	if got := auditLines(t, agent.AuditDir); len(got) != 1 || !strings.Contains(got[0], `"reason":"StaleRuntimeStopped"`) {
		t.Fatalf("audit lines %v", got)
	}
	if n := fenced(); n != 1 {
		t.Fatalf("holdfast_node_fences_total{reason=StaleRuntimeStopped} is %v after one fence, want 1", n)
	}
	if n := counter(t, "holdfast_node_fence_failures_total", map[string]string{"namespace": r.ns, "unit": "boiler", "reason": fence.ReasonStaleEpoch}); n != 0 {
		t.Fatalf("holdfast_node_fence_failures_total is %v after a fence that succeeded", n)
	}
}

// TestWedgedRuntimeStoppedWhileApiserverAway: with the apiserver out of
// reach, a Failover runtime SIGSTOPped after its deadline (it cannot fence)
// is stopped once its deadline plus hold bound passes on the agent's clock;
// a runtime that fenced itself, an Autonomy runtime and a healthy one are
// left alone. The Event follows once the apiserver answers again.
func TestWedgedRuntimeStoppedWhileApiserverAway(t *testing.T) {
	r := newRig(t)
	clk := clocktesting.NewFakeClock(time.Now())
	ports := freePorts(t, 6)
	pw, pf, pa, ph, ps := ports[0], ports[1], ports[2], ports[3], ports[4]
	r.unit("wedged", holdfastv1.Failover, pw, 1)
	r.unit("fenced", holdfastv1.Failover, pf, 1)
	r.unit("autonomous", holdfastv1.Autonomy, pa, 1)
	r.unit("healthy", holdfastv1.Failover, ph, 1)
	_, fC := r.runtime("fenced", 1, pf, holdfastv1.Failover, "--deadline-in", "-20s", "--hold-bound", "5s", "--fence-on-time")
	_, aC := r.runtime("autonomous", 1, pa, holdfastv1.Autonomy, "--deadline-in", "-20s", "--hold-bound", "5s")
	_, hC := r.runtime("healthy", 1, ph, holdfastv1.Failover, "--deadline-in", "1h", "--hold-bound", "5s")
	// A runtime that never answers on its lease port (lease 10s, hold
	// bound 5s).
	r.unit("silent", holdfastv1.Failover, ps, 1)
	sSB, _, err := crihost.RunPod(context.Background(), r.rt, filepath.Join(r.dir, "logs"), crihost.Pod{
		Namespace: r.ns, Name: "silent-runtime-e1", UID: "silent-uid", Image: crihost.PauseImage,
		Labels: map[string]string{holdfastv1.LabelUnit: "silent", holdfastv1.LabelEpoch: "1"}})
	if err != nil {
		t.Fatal(err)
	}
	// Its deadline is 40s after its start on its own clock. The agent
	// dates it from its last answer on the fake clock, stepped below: up to
	// 40s after the clock's start, less the real time the set-up took
	// before that answer (under 12s, or the wedged one is stopped early).
	wSB, wC := r.runtime("wedged", 1, pw, holdfastv1.Failover, "--deadline-in", "40s", "--hold-bound", "5s")

	agent := &fence.Agent{CRI: r.rt, Lease: fence.HTTPLease{}, Clock: clk, AuditDir: filepath.Join(r.dir, "audit")}
	var cl client.Client
	cl = startManager(t, func(mgr ctrl.Manager) error { return nil })
	agent.Units = fence.CacheUnits{Client: cl}
	agent.Notifier = fence.EventNotifier{Client: cl, NodeName: "n1"}
	up, err := fence.ReadyzProbe(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	// An apiserver out of reach: the real probe against a closed port.
	away := rest.CopyConfig(env.Config)
	away.Host = fmt.Sprintf("https://127.0.0.1:%d", ports[5])
	down, err := fence.ReadyzProbe(away)
	if err != nil {
		t.Fatal(err)
	}
	loop := &fence.Loop{Agent: agent, Probe: up}
	ctx := context.Background()

	// While the apiserver answers, the agent only observes.
	loop.Pass(ctx)
	loop.Probe = down
	loop.Pass(ctx)
	// The wedged runtime freezes before its deadline and so never fences.
	pid, err := crihost.ContainerPID(ctx, r.rt, wC)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		st, _ := r.rt.ContainerStatus(ctx, wC, true)
		t.Fatalf("SIGSTOP of pid %d: %v; container %v; audit %v", pid, err, st.GetStatus(), auditLines(t, agent.AuditDir))
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	// Frozen for certain before the clock moves: an answer at a later pass
	// would date its deadline anew.
	poll.Until(t, 30*time.Second, "the wedged runtime's lease endpoint to stop answering", func() (bool, string) {
		c, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		st, err := fence.HTTPLease{}.Status(c, "127.0.0.1", pw)
		if err == nil {
			return false, fmt.Sprintf("it answered %+v", *st)
		}
		return true, ""
	})

	// The silent runtime is judged from the outage's start: a whole lease
	// and hold bound (15s).
	clk.Step(14 * time.Second)
	loop.Pass(ctx)
	if r.sandboxGone(sSB) {
		t.Fatal("the silent runtime was stopped before a lease and hold bound into the outage")
	}
	// The wedged one, within its deadline plus hold bound, is left.
	clk.Step(19 * time.Second)
	loop.Pass(ctx)
	if r.sandboxGone(wSB) {
		t.Fatal("the wedged runtime was stopped before its deadline plus hold bound")
	}
	if !r.sandboxGone(sSB) {
		t.Fatal("the silent runtime was not stopped a lease and hold bound into the outage")
	}
	// Past it (at most 40s + 5s): stopped, and only it.
	clk.Step(13 * time.Second)
	loop.Pass(ctx)
	if !r.sandboxGone(wSB) {
		t.Fatal("the wedged runtime was not stopped past its deadline plus hold bound")
	}
	for name, c := range map[string]string{"fenced": fC, "autonomous": aC, "healthy": hC} {
		if !r.running(c) {
			t.Errorf("the %s runtime was stopped", name)
		}
	}
	if n := len(events(t, r.ns, fence.ReasonWedgedRuntime)); n != 0 || agent.Pending() != 2 {
		t.Fatalf("events %d, pending %d while the apiserver is away; want 0 and 2", n, agent.Pending())
	}
	if got := auditLines(t, agent.AuditDir); len(got) != 2 || !strings.Contains(got[0], "never answered") || !strings.Contains(got[1], "stopped answering") {
		t.Fatalf("audit lines %v, want the silent and the wedged runtime's at once", got)
	}
	// The apiserver is back: the Event follows.
	loop.Probe = up
	loop.Pass(ctx)
	evs := events(t, r.ns, fence.ReasonWedgedRuntime)
	names := map[string]bool{}
	for _, e := range evs {
		names[e.InvolvedObject.Name] = true
	}
	if len(evs) != 2 || !names["wedged"] || !names["silent"] || agent.Pending() != 0 {
		t.Fatalf("events after the apiserver came back: %+v (pending %d)", evs, agent.Pending())
	}

	// A plugin that died after posting them but before recording them as
	// posted posts them again on its start: still one Event per fence.
	if err := os.Remove(filepath.Join(agent.AuditDir, "fence-events-posted")); err != nil {
		t.Fatal(err)
	}
	again := &fence.Agent{CRI: r.rt, Lease: fence.HTTPLease{}, Clock: clk, AuditDir: agent.AuditDir,
		Units: agent.Units, Notifier: agent.Notifier}
	if n, err := again.Recover(ctx); err != nil || n != 2 {
		t.Fatalf("recovered %d actions (%v), want both", n, err)
	}
	again.Flush(ctx)
	if evs := events(t, r.ns, fence.ReasonWedgedRuntime); len(evs) != 2 || again.Pending() != 0 {
		t.Fatalf("events after posting them again: %+v (pending %d), want the same two", evs, again.Pending())
	}
}

func auditLines(t *testing.T, dir string) []string {
	t.Helper()
	b, err := readFile(filepath.Join(dir, "fence-audit.jsonl"))
	if err != nil && !errors.Is(err, errNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}
