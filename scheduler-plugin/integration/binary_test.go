//go:build integration

package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/plugintest"
	"github.com/holdfast-io/holdfast/test/ports"
	"github.com/holdfast-io/holdfast/test/proc"
	"github.com/holdfast-io/holdfast/test/testenv"
)

// buildBinary builds cmd/holdfast-scheduler into bin/ once per test binary;
// go build leaves an up-to-date binary alone, so a second run only checks.
var buildBinary = sync.OnceValues(func() (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(root, "bin", "holdfast-scheduler")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/holdfast-scheduler")
	cmd.Dir = root
	if output, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/holdfast-scheduler: %v\n%s", err, output)
	}
	return out, nil
})

// lockedBuffer collects a process's output for the test log.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// binaryConfig is the shipped configuration pointed at the test apiserver,
// electing its leader in namespace.
func binaryConfig(t *testing.T, namespace string) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "scheduler-plugin", "config", "scheduler-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["clientConnection"] = map[string]any{"kubeconfig": env.Kubeconfig, "qps": 100, "burst": 200}
	cfg["leaderElection"].(map[string]any)["resourceNamespace"] = namespace
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "scheduler-config.yaml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestHoldfastSchedulerBinary runs the built holdfast-scheduler with the
// shipped configuration as a separate process: it wins its leader election,
// answers /healthz, places a first binding on the primary and a re-bind on
// the standby, and records both.
func TestHoldfastSchedulerBinary(t *testing.T) {
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	p := newPlant(t)
	p.node("bin-primary", label(device, "boiler-1"))
	p.node("bin-standby")
	p.unit(plugintest.MakeUnit("", "boiler-1").Targets("bin-standby").Obj(), &holdfastv1.RuntimeBinding{Epoch: 1, Origin: holdfastv1.OriginInitial})

	port := ports.Free(t, 1)[0]
	var output lockedBuffer
	cmd := exec.Command(bin,
		"--config", binaryConfig(t, p.ns),
		"--authentication-kubeconfig", env.Kubeconfig,
		"--authorization-kubeconfig", env.Kubeconfig,
		"--bind-address", "127.0.0.1",
		"--secure-port", fmt.Sprint(port),
		"--cert-dir", t.TempDir(),
		"-v", "2")
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var exitErr error
	go func() { exitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		proc.Stop(cmd.Process, exited, 30*time.Second)
		if t.Failed() {
			t.Logf("holdfast-scheduler output:\n%s", output.String())
		}
	})

	healthz := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // its own self-signed serving certificate
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		select {
		case <-exited:
			return false, fmt.Errorf("holdfast-scheduler exited: %v", exitErr)
		default:
		}
		resp, err := healthz.Get(fmt.Sprintf("https://127.0.0.1:%d/healthz", port))
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("holdfast-scheduler /healthz never answered 200: %v", err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		lease, err := p.cs.CoordinationV1().Leases(p.ns).Get(ctx, "holdfast-scheduler", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "", nil
	})
	if err != nil {
		t.Fatalf("holdfast-scheduler never took its leader-election Lease %s/holdfast-scheduler: %v", p.ns, err)
	}

	first := p.runtimePod("boiler-1", 1, "")
	if got := p.boundNode(first.Name); got != "bin-primary" {
		t.Fatalf("first binding landed on %s, want bin-primary", got)
	}
	p.authorise("boiler-1", holdfastv1.RuntimeBinding{Epoch: 2, Origin: holdfastv1.OriginAutomatic, PreviousNode: "bin-primary"})
	second := p.runtimePod("boiler-1", 2, "")
	if got := p.boundNode(second.Name); got != "bin-standby" {
		t.Fatalf("re-bind landed on %s, want bin-standby", got)
	}
	b := p.getUnit("boiler-1").Status.RuntimeBinding
	if b.Node != "bin-standby" || b.Pod != second.Name || b.BoundAt == nil {
		t.Errorf("binding = %+v, want bin-standby, pod %s and boundAt recorded", b, second.Name)
	}
}
