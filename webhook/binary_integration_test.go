//go:build integration

package webhook_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-io/holdfast/internal/audit"
	"github.com/holdfast-io/holdfast/test/proc"
	"github.com/holdfast-io/holdfast/test/testenv"
	"github.com/holdfast-io/holdfast/webhook"
)

// The shipped binary, cmd/holdfast-webhook, serves the same rules where the
// apiserver calls the webhook, with the certificates mounted in its
// --cert-dir, and writes its audit lines to stdout.
func TestBinaryServesTheRules(t *testing.T) {
	kiln := env.Namespace(t)
	kilnCluster(t)
	boundUnit(t, kiln, "Expired")

	p := startBinary(t, env.Webhooks.LocalServingCertDir, "0")
	stdout, stderr, stop := &p.stdout, &p.stderr, p.stop

	res := p.ruleAnswers(t)
	refusedByTheNodeRule(t, res)

	// An admin's manual failover of an expired lease is allowed and audited.
	allowed(t, env.Kubectl().Run(t, "", "annotate", "-n", kiln, "unit", "kiln-1", "holdfast.io/failover-to=edge-2"))
	stop()
	var rec audit.Record
	line, _, _ := strings.Cut(stdout.String(), "\n")
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatalf("the binary's stdout does not start with an audit line: %v\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if rec.Reason != webhook.AuditManualFailover || rec.Actor != "admin" || rec.Object.Key() != kiln+"/kiln-1" || rec.Node != "edge-2" {
		t.Fatalf("audit record %+v", rec)
	}
}

// binaryProcess is cmd/holdfast-webhook running where envtest points the
// apiserver, in place of the in-process server.
type binaryProcess struct {
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	exited         chan struct{} // closed once the binary has ended, with err
	err            error
	stopped        bool
	t              *testing.T
}

// startBinary builds and starts cmd/holdfast-webhook on the suite's serving
// address with the certificates of certDir and /metrics on metricsAddr ("0"
// for none); the in-process server is stopped until the test ends.
func startBinary(t *testing.T, certDir, metricsAddr string) *binaryProcess {
	t.Helper()
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
	stopServer()
	t.Cleanup(func() {
		if err := startServer(); err != nil {
			t.Fatalf("restarting the in-process webhook server: %v", err)
		}
	})
	p := &binaryProcess{t: t, exited: make(chan struct{}), cmd: exec.Command(bin,
		"--host", env.Webhooks.LocalServingHost, "--port", strconv.Itoa(env.Webhooks.LocalServingPort),
		"--cert-dir", certDir,
		"--health-probe-bind-address", "127.0.0.1:0", "--metrics-bind-address", metricsAddr,
		"--voters-service-account", "holdfast-system/holdfast-controller-voters")}
	p.cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // runs after stop
		if t.Failed() {
			t.Logf("holdfast-webhook stderr:\n%s", p.stderr.String())
		}
	})
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(p.stop)
	return p
}

// stop sends SIGTERM and waits for the binary to exit.
func (p *binaryProcess) stop() {
	if p.stopped {
		return
	}
	p.stopped = true
	if !proc.Stop(p.cmd.Process, p.exited, 30*time.Second) {
		p.t.Errorf("holdfast-webhook did not stop on SIGTERM\n%s", p.stderr.String())
	}
}

// ruleAnswers labels node edge-9 with a desired role until the apiserver
// reaches the binary (the answer is no longer a failed call) and returns the
// answer: the node rule's refusal when the binary serves.
func (p *binaryProcess) ruleAnswers(t *testing.T) testenv.Result {
	t.Helper()
	k := env.Kubectl()
	deadline := time.Now().Add(60 * time.Second)
	for {
		res := k.Run(t, "", "label", "node", "edge-9", "holdfast.io/desired-role=server")
		if !strings.Contains(res.Stderr, "failed calling webhook") || time.Now().After(deadline) {
			return res
		}
		select {
		case <-p.exited:
			t.Fatalf("holdfast-webhook exited: %v\n%s", p.err, p.stderr.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// refusedByTheNodeRule asserts res is the node rule's refusal of edge-9's
// desired role.
func refusedByTheNodeRule(t *testing.T, res testenv.Result) {
	t.Helper()
	refusal(t, "", res, `admission webhook "nodes.holdfast.io" denied the request`,
		"only the holdfast voter controller (system:serviceaccount:holdfast-system:holdfast-controller-voters)")
}
