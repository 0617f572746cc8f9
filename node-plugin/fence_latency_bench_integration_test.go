//go:build integration

package nodeplugin_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/fence"
)

// BenchmarkFenceLatency measures the node plugin's fence from its decision
// to the runtime's container stopped, on real containerd and runc, for both
// of the fence agent's roads (docs/design.md §5):
//
//   - wedged: the apiserver is out of reach (the real readyz probe against a
//     closed port) and a local Failover runtime answers that its lease is
//     past deadline + hold bound and it has not fenced; one watchdog pass
//     (fence.Loop.Pass) probes, polls the runtime's lease status, judges and
//     stops it.
//   - stale: the unit's binding moves to a new epoch; the fence agent's Unit
//     watch (fence.UnitReconciler under a manager) judges the runtime behind
//     the binding and stops it.
//
// The decision is the instant the agent begins the stop of the judged
// sandbox (its first CRI call for it, ListContainers by sandbox, which
// follows the judgement with nothing between); stopped is when CRI
// StopContainer (timeout 0: SIGKILL) returned, which containerd answers
// once the task has exited; removed is when RemovePodSandbox returned. The
// CRI is the real client, timed at its interface. Also reported: the whole
// watchdog pass until stopped (wedged) and the binding write until stopped
// (stale). Goal: decision to stopped <= 1s. Each iteration starts a fresh
// runtime pod (not timed); run with -benchtime=20x.
func BenchmarkFenceLatency(b *testing.B) {
	b.Run("path=wedged", benchFenceWedged)
	b.Run("path=stale", benchFenceStale)
}

func benchFenceWedged(b *testing.B) {
	r := newRig(b)
	ports := freePorts(b, 2)
	port := ports[0]
	r.unit("wedged", holdfastv1.Failover, port, 1)
	cri := &timedCRI{Runtime: r.rt}
	agent := &fence.Agent{CRI: cri, Lease: fence.HTTPLease{}, AuditDir: filepath.Join(r.dir, "audit")}
	agent.Units = fence.CacheUnits{Client: startManager(b, func(ctrl.Manager) error { return nil })}
	away := rest.CopyConfig(env.Config)
	away.Host = fmt.Sprintf("https://127.0.0.1:%d", ports[1])
	down, err := fence.ReadyzProbe(away)
	if err != nil {
		b.Fatal(err)
	}
	loop := &fence.Loop{Agent: agent, Probe: down}
	ctx := context.Background()
	var lat fenceLatencies
	for i := range b.N {
		b.StopTimer()
		// Past its deadline by 20s with a 5s hold bound, and not fenced.
		sb, c := r.runtime("wedged", int64(i+1), port, holdfastv1.Failover, "--deadline-in", "-20s", "--hold-bound", "5s")
		cri.reset()
		b.StartTimer()
		start := time.Now()
		loop.Pass(ctx)
		lat.record(b, r, cri, sb, c, start)
	}
	lat.report(b, "pass")
}

func benchFenceStale(b *testing.B) {
	r := newRig(b)
	port := freePort(b)
	u := r.unit("stale", holdfastv1.Failover, port, 1)
	cri := &timedCRI{Runtime: r.rt}
	agent := &fence.Agent{CRI: cri, Lease: fence.HTTPLease{}, AuditDir: filepath.Join(r.dir, "audit")}
	startManager(b, func(mgr ctrl.Manager) error {
		agent.Units = fence.CacheUnits{Client: mgr.GetClient()}
		return (&fence.UnitReconciler{Agent: agent}).SetupWithManager(mgr)
	})
	var lat fenceLatencies
	for i := range b.N {
		epoch := int64(i + 1)
		b.StopTimer()
		sb, c := r.runtime("stale", epoch, port, holdfastv1.Failover)
		cri.reset()
		b.StartTimer()
		start := time.Now()
		r.bind(u, epoch+1)
		deadline := time.Now().Add(time.Minute)
		for !cri.removedSandbox(sb) {
			if time.Now().After(deadline) {
				b.Fatalf("the runtime of epoch %d was not fenced within a minute of the binding moving to %d", epoch, epoch+1)
			}
			time.Sleep(time.Millisecond)
		}
		lat.record(b, r, cri, sb, c, start)
	}
	lat.report(b, "write")
}

// fenceLatencies are the iterations' figures.
type fenceLatencies struct {
	decideToStopped, decideToRemoved, startToStopped []time.Duration
	// inStopContainer is the part of decideToStopped spent inside CRI
	// StopContainer (containerd killing the task and waiting for its exit).
	inStopContainer []time.Duration
}

// record checks that the iteration's runtime was fenced (its container no
// longer running, its sandbox gone) and keeps its figures.
func (l *fenceLatencies) record(b *testing.B, r *rig, cri *timedCRI, sb, c string, start time.Time) {
	b.Helper()
	decided, called, stopped, removed, ok := cri.times(sb)
	if !ok {
		b.Fatalf("sandbox %s was not stopped and removed through CRI", sb)
	}
	if r.running(c) || !r.sandboxGone(sb) {
		b.Fatalf("container %s still running or sandbox %s still there after the fence", c, sb)
	}
	l.decideToStopped = append(l.decideToStopped, stopped.Sub(decided))
	l.inStopContainer = append(l.inStopContainer, stopped.Sub(called))
	l.decideToRemoved = append(l.decideToRemoved, removed.Sub(decided))
	l.startToStopped = append(l.startToStopped, stopped.Sub(start))
}

func (l *fenceLatencies) report(b *testing.B, from string) {
	q := func(ds []time.Duration, p float64) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[int(p*float64(len(s)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(q(l.decideToStopped, 0.5), "ms-p50-decide-to-stopped")
	b.ReportMetric(q(l.decideToStopped, 1), "ms-max-decide-to-stopped")
	b.ReportMetric(q(l.decideToRemoved, 0.5), "ms-p50-decide-to-removed")
	b.ReportMetric(q(l.startToStopped, 0.5), "ms-p50-"+from+"-to-stopped")
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(q(l.inStopContainer, 0.5), "ms-p50-in-StopContainer")
	b.Logf("%d fences: decision to stopped p50 %.1fms p90 %.1fms max %.1fms (in CRI StopContainer p50 %.1fms p90 %.1fms max %.1fms); decision to sandbox removed p50 %.1fms p90 %.1fms max %.1fms; %s to stopped p50 %.1fms p90 %.1fms max %.1fms",
		len(l.decideToStopped), q(l.decideToStopped, 0.5), q(l.decideToStopped, 0.9), q(l.decideToStopped, 1),
		q(l.inStopContainer, 0.5), q(l.inStopContainer, 0.9), q(l.inStopContainer, 1),
		q(l.decideToRemoved, 0.5), q(l.decideToRemoved, 0.9), q(l.decideToRemoved, 1),
		from, q(l.startToStopped, 0.5), q(l.startToStopped, 0.9), q(l.startToStopped, 1))
}

// timedCRI is the real CRI runtime service, noting when the agent began
// each sandbox's stop, when its containers' StopContainer returned and when
// RemovePodSandbox returned.
type timedCRI struct {
	fence.Runtime
	mu      sync.Mutex
	decided map[string]time.Time // sandbox -> ListContainers by sandbox
	called  map[string]time.Time // sandbox -> first StopContainer called
	stopped map[string]time.Time // sandbox -> last StopContainer returned
	removed map[string]time.Time
	owner   map[string]string // container -> sandbox
}

func (c *timedCRI) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.decided, c.called, c.stopped, c.removed, c.owner = map[string]time.Time{}, map[string]time.Time{}, map[string]time.Time{}, map[string]time.Time{}, map[string]string{}
}

func (c *timedCRI) ListContainers(ctx context.Context, f *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	at := time.Now()
	cs, err := c.Runtime.ListContainers(ctx, f)
	if f != nil && f.PodSandboxId != "" {
		c.mu.Lock()
		if _, ok := c.decided[f.PodSandboxId]; !ok {
			c.decided[f.PodSandboxId] = at
		}
		for _, ct := range cs {
			c.owner[ct.Id] = f.PodSandboxId
		}
		c.mu.Unlock()
	}
	return cs, err
}

func (c *timedCRI) StopContainer(ctx context.Context, id string, timeout int64) error {
	called := time.Now()
	err := c.Runtime.StopContainer(ctx, id, timeout)
	at := time.Now()
	c.mu.Lock()
	if sb, ok := c.owner[id]; ok && err == nil {
		c.stopped[sb] = at
		if _, ok := c.called[sb]; !ok {
			c.called[sb] = called
		}
	}
	c.mu.Unlock()
	return err
}

func (c *timedCRI) RemovePodSandbox(ctx context.Context, id string) error {
	err := c.Runtime.RemovePodSandbox(ctx, id)
	at := time.Now()
	if err == nil {
		c.mu.Lock()
		c.removed[id] = at
		c.mu.Unlock()
	}
	return err
}

func (c *timedCRI) removedSandbox(sb string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.removed[sb]
	return ok
}

func (c *timedCRI) times(sb string) (decided, called, stopped, removed time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	decided, ok1 := c.decided[sb]
	stopped, ok2 := c.stopped[sb]
	removed, ok3 := c.removed[sb]
	return decided, c.called[sb], stopped, removed, ok1 && ok2 && ok3
}
