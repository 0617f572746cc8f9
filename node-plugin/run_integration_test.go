//go:build integration

package nodeplugin_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	nodeplugin "github.com/holdfast-io/holdfast/node-plugin"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/test/dbusdouble"
)

// TestRunWiresEveryPart starts holdfast-node as its main does (Run), with
// systemd on the double's bus and CRI on the real containerd, and sees the
// reporter and the fence agent act through it.
func TestRunWiresEveryPart(t *testing.T) {
	r := newRig(t)
	dir := t.TempDir()
	bus := agentHost(t, dir)
	createNode(t, "w1")
	ports := freePorts(t, 2)
	port := ports[0]
	u := r.unit("wired", holdfastv1.Failover, port, 1)
	sb, _ := r.runtime("wired", 1, port, holdfastv1.Failover)

	startRun(t, nodeplugin.Options{NodeName: "w1", VoterSwaps: true,
		HostDir: filepath.Join(dir, "holdfast"), SystemdDir: filepath.Join(dir, "systemd"),
		MemberDataDir: filepath.Join(dir, "db"), ServerUnit: serverUnit, AgentUnit: agentUnit,
		EtcdLocal: fmt.Sprintf("http://127.0.0.1:%d", ports[1]), CRIEndpoint: r.host.Endpoint,
		SystemdBus: bus.Address, MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true})
	waitFor(t, "reports on the Node", func() bool {
		n := &corev1.Node{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "w1"}, n); err != nil {
			return false
		}
		return n.Annotations[holdfastv1.AnnotationProvisioned] == "true" && n.Labels[holdfastv1.LabelRole] == holdfastv1.RoleAgent &&
			n.Annotations[holdfastv1.AnnotationFitness] != ""
	})
	time.Sleep(200 * time.Millisecond) // an absence of a stop: only a window can show it
	if r.sandboxGone(sb) {
		t.Fatal("the current epoch's runtime was stopped")
	}
	r.bind(u, 2)
	waitFor(t, "stale runtime fenced through Run", func() bool { return r.sandboxGone(sb) })
}

// TestRunWithoutVoterSwapsNeedsNoSystemd starts holdfast-node as its main
// does with --voter-swaps=false and its systemd bus address naming a socket
// that does not exist: it starts, reports the server unit not provisioned
// (over a stale "true") with no fitness, and fences a stale runtime. A dial
// of systemd would fail Run. Of the host directory it uses only the fence
// audit's subdirectory (the one host directory the chart mounts then): a
// role file and a tombstone there from an earlier voter-swap install are
// neither published nor taken as gone (the Node's tombstone annotation
// stays).
func TestRunWithoutVoterSwapsNeedsNoSystemd(t *testing.T) {
	r := newRig(t)
	dir := t.TempDir()
	hostDir := filepath.Join(dir, "holdfast")
	earlier := hoststate.State{Dir: hostDir}
	if err := earlier.SetRole(holdfastv1.RoleServer); err != nil {
		t.Fatal(err)
	}
	if err := earlier.SetTombstone(holdfastv1.Tombstone{MemberID: "8e9e05c52164694d", ClusterID: "cdf818194e3a8c32"}); err != nil {
		t.Fatal(err)
	}
	const tombstone = `{"memberID":"1","clusterID":"2","at":null}`
	createNode(t, "w2")
	stale := &corev1.Node{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "w2"}, stale); err != nil {
		t.Fatal(err)
	}
	stale.Annotations = map[string]string{holdfastv1.AnnotationProvisioned: "true", holdfastv1.AnnotationTombstone: tombstone}
	if err := env.Client.Update(context.Background(), stale); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	u := r.unit("nosystemd", holdfastv1.Failover, port, 1)
	sb, _ := r.runtime("nosystemd", 1, port, holdfastv1.Failover)

	exited := startRun(t, nodeplugin.Options{NodeName: "w2", VoterSwaps: false,
		HostDir: hostDir, SystemdDir: filepath.Join(dir, "no-systemd"),
		MemberDataDir: filepath.Join(dir, "no-db"), CRIEndpoint: r.host.Endpoint,
		SystemdBus: "unix:path=" + filepath.Join(dir, "no-bus"), MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true})
	waitFor(t, "the reporter's pass on the Node", func() bool {
		if stopped, err := exited(); stopped {
			t.Fatalf("Run stopped with voter swaps off: %v", err)
		}
		n := &corev1.Node{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "w2"}, n); err != nil {
			return false
		}
		return n.Annotations[holdfastv1.AnnotationProvisioned] == "false"
	})
	n := &corev1.Node{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "w2"}, n); err != nil {
		t.Fatal(err)
	}
	if f, ok := n.Annotations[holdfastv1.AnnotationFitness]; ok {
		t.Errorf("fitness reported with voter swaps off: %s", f)
	}
	if role, ok := n.Labels[holdfastv1.LabelRole]; ok {
		t.Errorf("role %q published from the host directory with voter swaps off", role)
	}
	if got := n.Annotations[holdfastv1.AnnotationTombstone]; got != tombstone {
		t.Errorf("tombstone annotation %q with voter swaps off; want it left as it was, %q", got, tombstone)
	}
	r.bind(u, 2)
	waitFor(t, "stale runtime fenced with voter swaps off", func() bool { return r.sandboxGone(sb) })
	// In the fence audit's own directory. (The unit reconciler and the loop
	// may both stop the one sandbox and audit it twice.)
	waitFor(t, "the fence audit line", func() bool { return len(auditLines(t, filepath.Join(hostDir, hoststate.FenceAuditDir))) > 0 })
	for _, l := range auditLines(t, filepath.Join(hostDir, hoststate.FenceAuditDir)) {
		if !strings.Contains(l, `"reason":"StaleRuntimeStopped"`) || !strings.Contains(l, `"pod":"nosystemd-runtime-e1"`) {
			t.Errorf("fence audit line %s; want the stale nosystemd runtime's stop", l)
		}
	}
	entries, err := os.ReadDir(hostDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{hoststate.FenceAuditDir, hoststate.RoleFile, hoststate.TombstoneFile}; !slices.Equal(names, want) {
		t.Errorf("host directory holds %v with voter swaps off; want %v (the earlier install's files and the fence audit's directory)", names, want)
	}
	for _, p := range []string{"no-systemd", "no-db"} {
		if _, err := os.Stat(filepath.Join(dir, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s touched with voter swaps off: %v", p, err)
		}
	}
}

// startRun runs Run as the main does until the test ends, then checks it
// stopped cleanly; exited says whether (and with what) Run already returned.
func startRun(t *testing.T, o nodeplugin.Options) (exited func() (bool, error)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- nodeplugin.Run(ctx, env.Config, o) }()
	returned := false
	t.Cleanup(func() {
		cancel()
		if returned {
			return
		}
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return func() (bool, error) {
		select {
		case err := <-done:
			returned = true
			return true, err
		default:
			return false, nil
		}
	}
}

// agentHost serves systemd on a private bus for a host that is an agent:
// the server unit installed and stopped, the agent unit enabled and
// running, drop-ins under dir/systemd.
func agentHost(t *testing.T, dir string) *dbusdouble.Bus {
	t.Helper()
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
	return bus
}
