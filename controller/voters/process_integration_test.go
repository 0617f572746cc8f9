//go:build integration && e2e

package voters_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/voters"
	"github.com/holdfast-io/holdfast/policy"
	"github.com/holdfast-io/holdfast/test/poll"
	"github.com/holdfast-io/holdfast/test/testenv"
)

// buildController builds cmd/holdfast-controller into a directory of this
// package's own (the units suite builds its copy elsewhere).
func buildController(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin", "test", "voters", "holdfast-controller")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/holdfast-controller")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building holdfast-controller: %v\n%s", err, out)
	}
	return bin
}

// votersProcess is one `holdfast-controller --role=voters` process, as
// holdfast-controller's service account.
type votersProcess struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func startVotersProcess(t *testing.T, bin, kubeconfig, dir string) *votersProcess {
	t.Helper()
	logFile, err := os.OpenFile(filepath.Join(dir, "controller.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	p := &votersProcess{exited: make(chan struct{})}
	p.cmd = exec.Command(bin, "--role=voters", "--kubeconfig="+kubeconfig,
		"--leader-election-namespace="+releaseNS, "--identity=voters-process",
		"--voters-leader-election-lease-duration=3s", "--voters-leader-election-renew-deadline=2s", "--voters-leader-election-retry-period=500ms",
		"--voter-swap-lease-duration=6s", "--voter-swap-pass-interval=200ms", "--voter-idle-pass-interval=1s",
		"--etcd-peer-scheme=http", "--snapshot-dir="+filepath.Join(dir, "snapshots"),
		"--health-probe-bind-address=0", "--metrics-bind-address=0", "--audit-log-path="+filepath.Join(dir, "audit.jsonl"))
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); logFile.Close(); close(p.exited) }()
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *votersProcess) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// TestTheVotersRoleSIGKILLedAtEveryStepCompletesTheSwap runs the real
// holdfast-controller --role=voters process and SIGKILLs it once at every
// swap step it is seen at, starting a new one each time (same pod name, as
// a restarted container): the swap completes with three voters, no write
// lost.
func TestTheVotersRoleSIGKILLedAtEveryStepCompletesTheSwap(t *testing.T) {
	bin := buildController(t)
	_, kubeconfig, err := env.UserConfig(controllerUser, "system:serviceaccounts")
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, []string{"s1", "s2", "s3"}, []string{"s4"})
	c.policy(t, nil)
	dir := t.TempDir()
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "controller.log"))
			t.Logf("controller log:\n%s", b)
		}
	}()
	// The process stamps the VoterPolicy status on the real clock, and the
	// webhook must judge the stamps on the same clock: earlier tests moved
	// the suite's clock minutes ahead (make test-e2e saw "status is 7m15s
	// old" for a stamp the process had just made).
	shifted.Reset()
	p := startVotersProcess(t, bin, kubeconfig, dir)
	waitHealthyStatus(t, "s1", "s2", "s3")
	// The status an earlier test's controller left behind looks healthy too;
	// the webhook admits the swap only on one this process has stamped.
	poll.Until(t, time.Minute, "a VoterPolicy status the process stamped", func() (bool, string) {
		pol := &holdfastv1.VoterPolicy{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: holdfastv1.VoterPolicyName}, pol); err != nil {
			return false, err.Error()
		}
		if err := policy.StatusFresh(pol, shifted.Now()); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	cli := c.client("s2", "s3")
	_, _, clusterID := etcdMembers(t, cli)
	w := startWriter(cli)

	name := createSwap(t, "s1", "s4")
	var killedAt []holdfastv1.SwapStep
	deadline := time.Now().Add(3 * time.Minute)
	var s *holdfastv1.VoterSwap
	for {
		s = getSwap(t, name)
		if s.Status.Phase.Finished() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("swap not finished within 3m, killed at %v: %s\nhistory:\n%s\nnodes:\n%s", killedAt, describe(s), history(s), nodeReports(t))
		}
		if st := s.Status.Step; s.Status.Phase == holdfastv1.SwapRunning && st != "" && !slices.Contains(killedAt, st) {
			p.kill()
			killedAt = append(killedAt, st)
			p = startVotersProcess(t, bin, kubeconfig, dir)
		}
		time.Sleep(50 * time.Millisecond)
	}
	checkWriter(t, w)
	t.Logf("SIGKILLed at steps %v; history:\n%s", killedAt, history(s))
	if s.Status.Phase != holdfastv1.SwapSucceeded {
		t.Fatalf("swap finished %s after kills at %v: %s\nhistory:\n%s", s.Status.Phase, killedAt, describe(s), history(s))
	}
	// The long steps are always seen; the short ones when the poll lands.
	for _, st := range []holdfastv1.SwapStep{holdfastv1.StepPromote, holdfastv1.StepFinishDemote} {
		if !slices.Contains(killedAt, st) {
			t.Errorf("never killed at %s: %v", st, killedAt)
		}
	}
	v, learners, id := etcdMembers(t, cli)
	if !slices.Equal(v, []string{"s2", "s3", "s4"}) || len(learners) > 0 || id != clusterID {
		t.Fatalf("after the swap: voters %v learners %v cluster %x", v, learners, id)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "audit.jsonl")); err != nil || len(b) == 0 {
		t.Errorf("no audit trail written by the process: %v", err)
	}
}

// TestSwapResumesAfterACrashAfterEveryAction ends the in-process controller
// once after every kind of action on every node, before its record.
func TestSwapResumesAfterACrashAfterEveryAction(t *testing.T) {
	crashDrill(t, []string{"e1", "e2", "e3", "e4"}, func(voters.Kind) bool { return true },
		[]voters.Kind{voters.AcquireLease, voters.Snapshot, voters.Cordon, voters.AddLearner, voters.SetRoleStep,
			voters.PromoteMember, voters.SetEtcdLabel, voters.Uncordon, voters.RemoveMember, voters.ClearRoleLabels, voters.ClearRoleStep})
}
