//go:build integration

package nodeplugin_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	nodeplugin "github.com/holdfast-io/holdfast/node-plugin"
	"github.com/holdfast-io/holdfast/test/dbusdouble"
)

// TestRunWiresEveryPart starts holdfast-node as its main does (Run), with
// systemd on the double's bus and CRI on the real containerd, and sees the
// reporter and the fence agent act through it.
func TestRunWiresEveryPart(t *testing.T) {
	r := newRig(t)
	dir := t.TempDir()
	bus, err := dbusdouble.StartBus(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Close)
	m, err := dbusdouble.Serve(bus, dbusdouble.Config{DropInDir: filepath.Join(dir, "systemd"), Units: []dbusdouble.Unit{
		{Name: serverUnit}, {Name: agentUnit, Enabled: true, Active: true}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	createNode(t, "w1")
	ports := freePorts(t, 2)
	port := ports[0]
	u := r.unit("wired", holdfastv1.Failover, port, 1)
	sb, _ := r.runtime("wired", 1, port, holdfastv1.Failover)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- nodeplugin.Run(ctx, env.Config, nodeplugin.Options{NodeName: "w1",
			HostDir: filepath.Join(dir, "holdfast"), SystemdDir: filepath.Join(dir, "systemd"),
			MemberDataDir: filepath.Join(dir, "db"), ServerUnit: serverUnit, AgentUnit: agentUnit,
			EtcdLocal: fmt.Sprintf("http://127.0.0.1:%d", ports[1]), CRIEndpoint: r.host.Endpoint,
			SystemdBus: bus.Address, MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	waitFor(t, "reports on the Node", func() bool {
		n := &corev1.Node{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "w1"}, n); err != nil {
			return false
		}
		return n.Annotations[holdfastv1.AnnotationProvisioned] == "true" && n.Labels[holdfastv1.LabelRole] == holdfastv1.RoleAgent &&
			n.Annotations[holdfastv1.AnnotationFitness] != ""
	})
	time.Sleep(200 * time.Millisecond)
	if r.sandboxGone(sb) {
		t.Fatal("the current epoch's runtime was stopped")
	}
	r.bind(u, 2)
	waitFor(t, "stale runtime fenced through Run", func() bool { return r.sandboxGone(sb) })
}
