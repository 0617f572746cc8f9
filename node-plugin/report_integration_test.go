//go:build integration

package nodeplugin_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/node-plugin/report"
	"github.com/holdfast-io/holdfast/test/dbusdouble"
)

// TestReporterPublishesProvisionedRoleTombstoneAndFitness: the Node shows
// what the host knows, updated only on change, with the fitness probes
// rate-limited on the injected clock.
func TestReporterPublishesProvisionedRoleTombstoneAndFitness(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	bus, err := dbusdouble.StartBus(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Close)
	m, err := dbusdouble.Serve(bus, dbusdouble.Config{DropInDir: filepath.Join(dir, "systemd"), Units: []dbusdouble.Unit{
		{Name: serverUnit, Enabled: true, Active: true}, {Name: agentUnit}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	conn, err := bus.Systemd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	state := hoststate.State{Dir: filepath.Join(dir, "holdfast"), MemberDataDir: filepath.Join(dir, "db")}
	act := actuator.New(&actuator.DBusSystemd{Conn: conn}, actuator.Config{ServerUnit: serverUnit, AgentUnit: agentUnit, State: state})
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
	if err := rep.Pass(ctx); err != nil {
		t.Fatal(err)
	}
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
}
