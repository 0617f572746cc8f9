//go:build integration

package nodeplugin_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/node-plugin/periodic/periodictest"
	"github.com/holdfast-io/holdfast/node-plugin/report"
	"github.com/holdfast-io/holdfast/test/dbusdouble"
	"github.com/holdfast-io/holdfast/test/systemdhost"
)

// TestReporterPublishesProvisionedRoleTombstoneAndFitness: the Node shows
// what the host knows, updated only on change, with the fitness probes
// rate-limited on the injected clock.
func TestReporterPublishesProvisionedRoleTombstoneAndFitness(t *testing.T) {
	ctx := context.Background()
	act, state := reporterHost(t)
	createNode(t, "rep1")

	// One voter answers on its peer port, one does not.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	up := fmt.Sprintf("http://%s", l.Addr())
	down := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	clk := clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	rep := &report.Reporter{Client: env.Client, NodeName: "rep1", Units: act, State: state, Clock: clk,
		FitnessEvery: 5 * time.Minute, FsyncSamples: 20,
		Peers: func(context.Context) ([]string, error) { return []string{up, down}, nil }}

	node := func() *corev1.Node {
		n := &corev1.Node{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "rep1"}, n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// holdfast_node_reports_total counts each report written, by kind.
	written := reportCounts(t, "written")
	wantWritten := func(when string, want map[string]float64) {
		t.Helper()
		now := reportCounts(t, "written")
		if diff := cmp.Diff(want, rose(written, now)); diff != "" {
			t.Fatalf("%s: holdfast_node_reports_total{result=written} rose by (-want +got):\n%s", when, diff)
		}
		written = now
	}
	failed := reportCounts(t, "failed")
	if err := rep.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	wantWritten("the first pass", map[string]float64{"provisioned": 1, "role": 1, "tombstone": 0, "fitness": 1})
	n := node()
	if n.Annotations[holdfastv1.AnnotationProvisioned] != "true" || n.Labels[holdfastv1.LabelRole] != holdfastv1.RoleServer {
		t.Fatalf("provisioned %q role %q, want true and server", n.Annotations[holdfastv1.AnnotationProvisioned], n.Labels[holdfastv1.LabelRole])
	}
	var fit holdfastv1.Fitness
	if err := jsonUnmarshal(n.Annotations[holdfastv1.AnnotationFitness], &fit); err != nil {
		t.Fatal(err)
	}
	if fit.FsyncSamples != 20 || fit.FsyncP99Micros <= 0 || fit.PeerRTTMicros[up] < 0 || fit.PeerRTTMicros[down] != -1 || !fit.At.Time.Equal(clk.Now()) {
		t.Fatalf("fitness %+v", fit)
	}
	if _, ok := n.Annotations[holdfastv1.AnnotationTombstone]; ok {
		t.Fatal("tombstone annotation without a tombstone")
	}

	// Nothing changed: no write at all.
	rv := n.ResourceVersion
	clk.Step(time.Minute)
	if err := rep.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if node().ResourceVersion != rv {
		t.Fatal("a pass with nothing new wrote the Node (fitness is rate-limited to FitnessEvery)")
	}
	wantWritten("a pass with nothing new", map[string]float64{"provisioned": 0, "role": 0, "tombstone": 0, "fitness": 0})

	// A tombstone is mirrored, and removed with the file.
	ts := holdfastv1.Tombstone{MemberID: "8e9e05c52164694d", ClusterID: "cdf818194e3a8c32", At: metav1.Time{Time: clk.Now()}}
	if err := state.SetTombstone(ts); err != nil {
		t.Fatal(err)
	}
	if err := rep.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := holdfastv1.ParseTombstone(node().Annotations[holdfastv1.AnnotationTombstone])
	if err != nil || got.MemberID != ts.MemberID || got.ClusterID != ts.ClusterID {
		t.Fatalf("tombstone annotation %+v, %v", got, err)
	}
	wantWritten("the tombstone", map[string]float64{"provisioned": 0, "role": 0, "tombstone": 1, "fitness": 0})
	if err := state.RetireTombstone(); err != nil {
		t.Fatal(err)
	}
	clk.Step(5 * time.Minute)
	if err := rep.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	n = node()
	if _, ok := n.Annotations[holdfastv1.AnnotationTombstone]; ok {
		t.Fatal("tombstone annotation left after the tombstone was retired")
	}
	if err := jsonUnmarshal(n.Annotations[holdfastv1.AnnotationFitness], &fit); err != nil || !fit.At.Time.Equal(clk.Now()) {
		t.Fatalf("fitness not probed again after FitnessEvery: %+v %v", fit, err)
	}
	wantWritten("the tombstone retired and fitness probed again", map[string]float64{"provisioned": 0, "role": 0, "tombstone": 1, "fitness": 1})
	if d := rose(failed, reportCounts(t, "failed")); d["provisioned"]+d["role"]+d["tombstone"]+d["fitness"] != 0 {
		t.Fatalf("holdfast_node_reports_total{result=failed} rose by %v with every report landing", d)
	}
}

// TestReporterCountsReportsItCouldNotPublish: a pass that cannot bring its
// reports up to date (here its Node is gone from the apiserver) counts each
// one failed in holdfast_node_reports_total, and writes none; once the Node
// is back, the next pass writes them.
func TestReporterCountsReportsItCouldNotPublish(t *testing.T) {
	ctx := context.Background()
	act, state := reporterHost(t)
	clk := clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	rep := &report.Reporter{Client: env.Client, NodeName: "rep3", Units: act, State: state, Clock: clk,
		FitnessEvery: 5 * time.Minute, FsyncSamples: 5}
	failed, written := reportCounts(t, "failed"), reportCounts(t, "written")
	if err := rep.Pass(ctx); err == nil {
		t.Fatal("a pass without its Node reported no error")
	}
	all := map[string]float64{"provisioned": 1, "role": 1, "tombstone": 1, "fitness": 1}
	none := map[string]float64{"provisioned": 0, "role": 0, "tombstone": 0, "fitness": 0}
	if diff := cmp.Diff(all, rose(failed, reportCounts(t, "failed"))); diff != "" {
		t.Fatalf("without its Node: holdfast_node_reports_total{result=failed} rose by (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(none, rose(written, reportCounts(t, "written"))); diff != "" {
		t.Fatalf("without its Node: holdfast_node_reports_total{result=written} rose by (-want +got):\n%s", diff)
	}
	createNode(t, "rep3")
	failed = reportCounts(t, "failed")
	if err := rep.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]float64{"provisioned": 1, "role": 1, "tombstone": 0, "fitness": 1}, rose(written, reportCounts(t, "written"))); diff != "" {
		t.Fatalf("with its Node back: holdfast_node_reports_total{result=written} rose by (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(none, rose(failed, reportCounts(t, "failed"))); diff != "" {
		t.Fatalf("with its Node back: holdfast_node_reports_total{result=failed} rose by (-want +got):\n%s", diff)
	}
}

// reporterHost is a provisioned voter host: its server unit enabled and
// active on a systemd double, and an actuator on it.
func reporterHost(t *testing.T) (*actuator.Actuator, hoststate.State) {
	t.Helper()
	h := systemdhost.Start(t, func(hoststate.State, func(string) []string) []dbusdouble.Unit {
		return []dbusdouble.Unit{{Name: serverUnit, Enabled: true, Active: true}, {Name: agentUnit}}
	})
	return actuator.New(h.Systemd, actuator.Config{ServerUnit: serverUnit, AgentUnit: agentUnit, State: h.State}), h.State
}

// gatedUnits holds each pass at its start (its first systemd question)
// until the test lets it go: a pass received means the one before it has
// finished.
type gatedUnits struct {
	report.Units
	clk     *clocktesting.FakeClock
	passes  chan time.Time
	release chan struct{}
}

func (g gatedUnits) Provisioned(ctx context.Context) (bool, error) {
	g.passes <- g.clk.Now()
	<-g.release
	return g.Units.Provisioned(ctx)
}

// TestReporterPassesOnTheInjectedClock: Reporter.Start reports at once and
// then on every tick of Every on its clock, here a fake one: a tombstone
// written between two ticks reaches the Node on the next tick, half an
// interval is no tick, and no real time is waited. Every is longer than the
// test waits for a pass, so a reporter on a real ticker fails it.
func TestReporterPassesOnTheInjectedClock(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	act, state := reporterHost(t)
	createNode(t, "rep2")
	clk := clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	g := gatedUnits{Units: act, clk: clk, passes: make(chan time.Time), release: make(chan struct{})}
	rep := &report.Reporter{Client: env.Client, NodeName: "rep2", Units: g, State: state, Clock: clk,
		Every: time.Minute, FitnessEvery: time.Hour, FsyncSamples: 5}
	done := make(chan error)
	go func() { done <- rep.Start(ctx) }()
	start := clk.Now()
	next := func(want time.Duration) {
		t.Helper()
		if at := periodictest.Next(t, g.passes); at.Sub(start) != want {
			t.Fatalf("a pass at %v, want at %v (one a tick of Every on the injected clock)", at.Sub(start), want)
		}
	}
	node := func() *corev1.Node {
		n := &corev1.Node{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "rep2"}, n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	next(0)
	g.release <- struct{}{}
	clk.Step(time.Minute)
	next(time.Minute) // the first pass has finished
	n := node()
	if n.Annotations[holdfastv1.AnnotationProvisioned] != "true" || n.Labels[holdfastv1.LabelRole] != holdfastv1.RoleServer {
		t.Fatalf("after the first pass: provisioned %q role %q", n.Annotations[holdfastv1.AnnotationProvisioned], n.Labels[holdfastv1.LabelRole])
	}
	if _, ok := n.Annotations[holdfastv1.AnnotationTombstone]; ok {
		t.Fatal("tombstone annotation without a tombstone")
	}
	ts := holdfastv1.Tombstone{MemberID: "8e9e05c52164694d", ClusterID: "cdf818194e3a8c32", At: metav1.Time{Time: clk.Now()}}
	if err := state.SetTombstone(ts); err != nil {
		t.Fatal(err)
	}
	g.release <- struct{}{}
	clk.Step(30 * time.Second)
	clk.Step(30 * time.Second)
	next(2 * time.Minute) // the second pass has finished
	if got, err := holdfastv1.ParseTombstone(node().Annotations[holdfastv1.AnnotationTombstone]); err != nil || got.MemberID != ts.MemberID {
		t.Fatalf("the pass after the tombstone: annotation %+v, %v", got, err)
	}
	cancel()
	g.release <- struct{}{}
	periodictest.Ended(t, done, "Start")
}
