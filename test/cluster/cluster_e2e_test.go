//go:build e2e

package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/holdfast-io/holdfast/api/lease"
	"github.com/holdfast-io/holdfast/test/cluster"
)

const runtimeImage = "holdfast.test/unit-runtime:e2e"

// TestTwoRealKubeletsRunPodsAndTearDownClean starts two real kubelets on
// this machine, each in its own network and mount namespace, runs a unit
// runtime pod on each from a locally built image, reaches both over the
// cluster network, and checks that Stop leaves nothing behind: no process,
// namespace, mount or cgroup, and the kernel settings the kubelets changed
// restored.
func TestTwoRealKubeletsRunPodsAndTearDownClean(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	hostKubeletDir := dirExists("/var/lib/kubelet")
	c, err := cluster.Start(ctx, cluster.Config{
		Nodes:  []cluster.NodeSpec{{Name: "edge-a"}, {Name: "edge-b", Labels: map[string]string{"plant.example/zone": "b"}}},
		Images: []cluster.Image{{Ref: runtimeImage, Package: "cmd/unit-runtime"}},
		Logf:   t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = c.Stop()
		}
	}()

	for _, name := range c.NodeNames {
		var n corev1.Node
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
			t.Fatal(err)
		}
		if got := n.Status.NodeInfo.KubeletVersion; got != "v1.37.2" {
			t.Errorf("node %s reports kubelet %q, want v1.37.2", name, got)
		}
		if got := nodeIP(&n); got != c.Nodes[name].IP {
			t.Errorf("node %s reports InternalIP %q, want %s", name, got, c.Nodes[name].IP)
		}
	}
	var b corev1.Node
	if err := c.Client.Get(ctx, client.ObjectKey{Name: "edge-b"}, &b); err != nil {
		t.Fatal(err)
	}
	if b.Labels["plant.example/zone"] != "b" {
		t.Errorf("edge-b labels %v, want plant.example/zone=b", b.Labels)
	}

	for i, name := range c.NodeNames {
		pod := runtimePod(fmt.Sprintf("rt-%d", i), name)
		if err := c.Client.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	for i, name := range c.NodeNames {
		key := client.ObjectKey{Namespace: "default", Name: fmt.Sprintf("rt-%d", i)}
		var pod corev1.Pod
		if err := wait(ctx, 2*time.Minute, func() bool {
			return c.Client.Get(ctx, key, &pod) == nil && podReady(&pod)
		}); err != nil {
			t.Fatalf("pod %s on %s not Ready: phase %s, %v", key.Name, name, pod.Status.Phase, pod.Status.ContainerStatuses)
		}
		if pod.Status.PodIP != c.Nodes[name].IP {
			t.Errorf("pod %s has IP %s, want its node's %s", key.Name, pod.Status.PodIP, c.Nodes[name].IP)
		}
		// The lease endpoint answers over the cluster network at the
		// node's address, as the grantor reaches it.
		resp, err := c.HTTPClient().Get(fmt.Sprintf("http://%s:9443%s", c.Nodes[name].IP, lease.Path))
		if err != nil {
			t.Fatalf("lease endpoint of %s: %v", key.Name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var st lease.Status
		if err := json.Unmarshal(body, &st); err != nil {
			t.Fatalf("lease status of %s: %v: %s", key.Name, err, body)
		}
		if st.Unit != "default/unit-"+key.Name[3:] || st.Epoch != 1 {
			t.Errorf("lease status of %s: %+v", key.Name, st)
		}
	}

	dir := c.Dir
	if err := c.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	stopped = true
	if left := c.Leftovers(); len(left) > 0 {
		t.Errorf("left behind after Stop:\n%s", strings.Join(left, "\n"))
	}
	if dirExists("/var/lib/kubelet") != hostKubeletDir {
		t.Errorf("the machine's /var/lib/kubelet changed: the kubelets must use their own")
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("cluster directory %s left behind", dir)
	}
}

func runtimePod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{
			NodeName:    node,
			HostNetwork: true,
			Containers: []corev1.Container{{
				Name:  "runtime",
				Image: runtimeImage, ImagePullPolicy: corev1.PullNever,
				// No grantor here: the lease endpoint serves plain HTTP for
				// the status read below.
				Args: []string{"--unit", "default/unit-" + name[3:], "--epoch", "1", "--mode", "Autonomy",
					"--device", "d=sim://", "--output", "o=d:100,step=1", "--insecure-plaintext-lease"},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9440, Service: ptr.To("holdfast.readiness")}},
					PeriodSeconds: 2,
				},
			}},
		},
	}
}

func nodeIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func wait(ctx context.Context, timeout time.Duration, f func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for !f() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil
}

// TestReapOrphansCleansUpAfterADeadOwner: a cluster whose owning process
// died without Stop (a panic, a SIGKILL) is cleaned up by the next Start:
// its processes killed by PID, its namespaces, cgroups and directory
// removed, the kernel settings it found put back.
func TestReapOrphansCleansUpAfterADeadOwner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Config{Nodes: []cluster.NodeSpec{{Name: "edge-a"}}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop() }()
	// A helper started beside the cluster in the machine's own namespaces
	// (as the nodes' dbus-daemons are) is found by the cluster's directory
	// on its command line.
	sleepBin, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(sleepBin)
	if err != nil {
		t.Fatal(err)
	}
	helperBin := filepath.Join(c.Dir, "helper-sleep")
	if err := os.WriteFile(helperBin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	helper := exec.Command(helperBin, "infinity")
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	helperDone := make(chan struct{})
	go func() { _ = helper.Wait(); close(helperDone) }()
	defer func() { _ = helper.Process.Kill() }()
	// Play the owner's death: its state names a process that is gone.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	statePath := filepath.Join(c.Dir, "state.json")
	b, err = os.ReadFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	st["owner"] = dead.Process.Pid
	if b, err = json.Marshal(st); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(statePath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	reaped := cluster.ReapOrphans()
	if !slices.Contains(reaped, c.ID) {
		t.Fatalf("ReapOrphans reaped %v, not the orphaned cluster %s", reaped, c.ID)
	}
	select {
	case <-helperDone:
	case <-time.After(30 * time.Second):
		t.Fatal("ReapOrphans left the helper naming the cluster's directory running")
	}
	if err := wait(ctx, time.Minute, func() bool { return len(c.Leftovers()) == 0 }); err != nil {
		t.Fatalf("left behind after ReapOrphans:\n%s", strings.Join(c.Leftovers(), "\n"))
	}
	if _, err := os.Stat(c.Dir); err == nil {
		t.Errorf("cluster directory %s left behind", c.Dir)
	}
}
