//go:build integration

package webhook_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-io/holdfast/test/testenv"
	"github.com/holdfast-io/holdfast/webhook"
)

// The shipped binary, cmd/holdfast-webhook, serves the same rules where the
// apiserver calls the webhook, with the certificates mounted in its
// --cert-dir, and writes its audit lines to stdout.
func TestBinaryServesTheRules(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "holdfast-webhook")
	build := exec.Command("go", "build", "-o", bin, "./cmd/holdfast-webhook")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building cmd/holdfast-webhook: %v\n%s", err, out)
	}

	kiln := env.Namespace(t)
	kilnCluster(t)
	boundUnit(t, kiln, "Expired")

	stopServer()
	t.Cleanup(func() {
		if err := startServer(); err != nil {
			t.Fatalf("restarting the in-process webhook server: %v", err)
		}
	})
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin,
		"--host", env.Webhooks.LocalServingHost, "--port", strconv.Itoa(env.Webhooks.LocalServingPort),
		"--cert-dir", env.Webhooks.LocalServingCertDir,
		"--health-probe-bind-address", "127.0.0.1:0", "--metrics-bind-address", "0",
		"--voters-service-account", "holdfast-system/holdfast-controller-voters")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // runs after stop
		if t.Failed() {
			t.Logf("holdfast-webhook stderr:\n%s", stderr.String())
		}
	})
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("holdfast-webhook did not stop on SIGTERM\n%s", stderr.String())
		}
	}
	t.Cleanup(stop)

	// Wait until the apiserver reaches the binary: the refusal is then the
	// rule's, not a failed call.
	k := env.Kubectl()
	var res testenv.Result
	deadline := time.Now().Add(60 * time.Second)
	for {
		res = k.Run(t, "", "label", "node", "edge-9", "holdfast.io/desired-role=server")
		if !strings.Contains(res.Stderr, "failed calling webhook") || time.Now().After(deadline) {
			break
		}
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("holdfast-webhook exited: %v\n%s", err, stderr.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
	refusal(t, "", res, `admission webhook "nodes.holdfast.io" denied the request`,
		"only the holdfast voter controller (system:serviceaccount:holdfast-system:holdfast-controller-voters)")

	// An admin's manual failover of an expired lease is allowed and audited.
	allowed(t, k.Run(t, "", "annotate", "-n", kiln, "unit", "kiln-1", "holdfast.io/failover-to=edge-2"))
	stop()
	var rec webhook.AuditRecord
	line, _, _ := strings.Cut(stdout.String(), "\n")
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatalf("the binary's stdout does not start with an audit line: %v\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if rec.Audit != webhook.AuditManualFailover || rec.User != "admin" || rec.Object.Name != "kiln-1" || rec.Target != "edge-2" {
		t.Fatalf("audit record %+v", rec)
	}
}
