//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/units"
	"github.com/holdfast-io/holdfast/test/devicesim"
	"github.com/holdfast-io/holdfast/test/poll"
	"github.com/holdfast-io/holdfast/test/proc"
)

// controllerProcess is one holdfast-controller --role=units process.
type controllerProcess struct {
	identity string
	cmd      *exec.Cmd
	exited   chan struct{}
	logPath  string
}

func startControllerProcess(t testing.TB, ns, electionID, identity string) *controllerProcess {
	t.Helper()
	ensureNamespace(t, electionNamespace)
	dir := t.TempDir()
	p := &controllerProcess{identity: identity, exited: make(chan struct{}), logPath: filepath.Join(dir, identity+".log")}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(controllerBinary, "--role=units",
		"--kubeconfig="+env.Kubeconfig,
		"--watch-namespace="+ns,
		"--leader-election-namespace="+electionNamespace,
		"--units-leader-election-id="+electionID,
		"--identity="+identity,
		"--health-probe-bind-address=127.0.0.1:0",
		"--metrics-bind-address=0",
		"--audit-log-path="+filepath.Join(dir, identity+".audit"),
		"--lease-ca-dir="+leaseCADir,
	)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); logFile.Close(); close(p.exited) }()
	t.Cleanup(func() {
		proc.Stop(p.cmd.Process, p.exited, 20*time.Second)
		if t.Failed() {
			b, _ := os.ReadFile(p.logPath)
			t.Logf("%s log:\n%s", identity, b)
		}
	})
	return p
}

// TestTheLeaderKilledMidLeaseNeverFencesTheRuntime: two holdfast-controller
// processes; the leader is SIGKILLed while it holds a runtime's lease at
// the default 30s. The standby acquires the election, starts its renewal
// loop from its cache and extends the lease before the runtime's budget
// after a renewal runs out: the runtime (asked over its own endpoint all
// along) never holds and never fences, and goes on writing to the device.
func TestTheLeaderKilledMidLeaseNeverFencesTheRuntime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := env.Namespace(t)
	dev, err := devicesim.Start(devicesim.Config{Address: "127.0.0.1:0", EpochRegister: devicesim.DefaultEpochRegister})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dev.Close() })
	k := newKubelet(t, ns)
	primary := ns + "-edge"
	k.node(primary, map[string]string{"holdfast.io/device": ns})
	k.node(ns+"-standby-1", nil)

	electionID := "grantor-" + ns
	a := startControllerProcess(t, ns, electionID, "ctl-a")
	poll.Until(t, 60*time.Second, "ctl-a leading", func() (bool, string) {
		h := holder(electionLease(t, electionID))
		return strings.HasPrefix(h, "ctl-a_"), h
	})
	b := startControllerProcess(t, ns, electionID, "ctl-b")

	u := &holdfastv1.Unit{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kiln"},
		Spec: holdfastv1.UnitSpec{
			Runtime:      holdfastv1.UnitRuntime{Image: "holdfast.local/unit-runtime:dev", Args: runtimeArgs(dev.Addr()), HealthPort: 9440, LeasePort: 9443},
			NodeSelector: map[string]string{"holdfast.io/device": ns},
			Availability: holdfastv1.Availability{Mode: holdfastv1.Failover, LeaseDurationSeconds: 30, RuntimeStartupGraceSeconds: 120,
				Targets: &holdfastv1.FailoverTargets{Nodes: []string{ns + "-standby-1"}}},
		},
	}
	if err := env.Client.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: ns, Name: "kiln"}
	e1 := waitNewEpoch(t, key, 0)
	poll.Until(t, 30*time.Second, "the first runtime pod", func() (bool, string) { return runtimePod(t, u, e1) != nil, "" })
	schedule(t, key, e1, primary)
	poll.Until(t, 30*time.Second, "the lease held", func() (bool, string) {
		bd := getUnit(t, key).Status.RuntimeBinding
		return bd != nil && bd.LeaseState == holdfastv1.LeaseHeld, fmt.Sprintf("%+v", bd)
	})
	rt := k.proc(units.PodName("kiln", e1))
	// Kill the leader in the worst phase: steady renewals (the runtime's
	// anchor one renewal behind), just before its next renewal, when the
	// runtime has the least of its lease left: about 30s - 2 x 5s.
	poll.Until(t, 60*time.Second, "ctl-a renewing in the worst phase", func() (bool, string) {
		st, err := rt.leaseStatus()
		if err != nil || st.LastGrantor != "ctl-a" || st.State != leaseapi.Held || st.LastSeq < 5 || st.RemainingMillis == nil {
			return false, fmt.Sprintf("%+v %v", st, err)
		}
		rem := time.Duration(*st.RemainingMillis) * time.Millisecond
		return rem > 20*time.Second && rem <= 20600*time.Millisecond, fmt.Sprintf("remaining %v", rem)
	})
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	<-a.exited

	// Watch the runtime's own view until ctl-b has extended it for a while.
	// A read that times out on a loaded machine says nothing of the lease
	// (the runtime's log below says whether it ever held or fenced); a
	// runtime that answers no read for 10s has stopped.
	var handedOver, answered time.Time
	var minRemaining = time.Hour
	for answered = time.Now(); ; time.Sleep(100 * time.Millisecond) {
		st, err := rt.leaseStatus()
		if err != nil {
			if time.Since(answered) > 10*time.Second {
				t.Fatalf("the runtime answered no status read for %v: %v", time.Since(answered).Round(time.Second), err)
			}
			continue
		}
		answered = time.Now()
		if st.Fenced || st.State != leaseapi.Held {
			t.Fatalf("the runtime left Held %v after the leader was killed: %+v", time.Since(killedAt), st)
		}
		if st.RemainingMillis != nil {
			minRemaining = min(minRemaining, time.Duration(*st.RemainingMillis)*time.Millisecond)
		}
		if st.LastGrantor == "ctl-b" && handedOver.IsZero() {
			handedOver = time.Now()
		}
		if !handedOver.IsZero() && time.Since(handedOver) > 6*time.Second {
			break
		}
		if time.Since(killedAt) > 40*time.Second {
			t.Fatalf("ctl-b never renewed the runtime: %+v", st)
		}
	}
	t.Logf("handed over %v after the kill; the runtime had at least %v of its lease left throughout", handedOver.Sub(killedAt), minRemaining)
	if log := rt.log(); strings.Contains(log, "Control lease expired") {
		t.Fatalf("the runtime's lease expired during the handover (it held or fenced):\n%s", log)
	}
	if h := holder(electionLease(t, electionID)); !strings.HasPrefix(h, "ctl-b_") {
		t.Fatalf("election Lease held by %q, want ctl-b", h)
	}
	bd := getUnit(t, key).Status.RuntimeBinding
	if bd.Epoch != e1 || bd.LeaseState != holdfastv1.LeaseHeld {
		t.Fatalf("binding after the handover: %+v", bd)
	}
	for _, e := range events(t, u) {
		if e.Reason == units.EventLeaseExpired || e.Reason == units.EventHold || e.Reason == units.EventRebound {
			t.Fatalf("the handover produced %s: %s", e.Reason, e.Note)
		}
	}
	// The device went on taking the binding's writes through the handover.
	var after int
	for _, w := range devicesim.ByEpoch(dev.Writes())[e1] {
		if w.Time.After(killedAt.Add(10 * time.Second)) {
			after++
		}
	}
	if after == 0 {
		t.Fatal("no accepted writes after the handover: the runtime stopped driving")
	}
	if err := devicesim.CheckOneWriter(dev.Writes()); err != nil {
		t.Fatal(err)
	}
	_ = b
}
