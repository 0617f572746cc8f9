//go:build integration

package nodeplugin_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	nodeplugin "github.com/holdfast-io/holdfast/node-plugin"
	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/test/dbusdouble"
	"github.com/holdfast-io/holdfast/test/etcdproc"
)

// TestAFormerMemberNeverStartsItsServerBeforeItIsJudged: holdfast-node
// (Run, as its main runs it) on the host of voter j3 installs the server
// unit's start condition, a persistent drop-in, and records the member and
// the voters it reads. The host goes down (plugin and member stopped). On
// each "reboot" (systemd afresh, no runtime state, the server unit carrying
// only what the drop-ins give it, the node plugin not running yet) the
// server unit's start is judged by holdfast-node on the host: still a
// member, it starts; removed from the member list while the host was down,
// it never starts, and the tombstone is written.
func TestAFormerMemberNeverStartsItsServerBeforeItIsJudged(t *testing.T) {
	r := newRig(t)
	bin := filepath.Join(env.BinDir, "etcd")
	dir := t.TempDir()
	ms, err := etcdproc.NewMembers("j1", "j2", "j3")
	if err != nil {
		t.Fatal(err)
	}
	cli, stops := startVoters(t, bin, dir, ms, ms[:2])
	ctx := t.Context()
	vp := &holdfastv1.VoterPolicy{ObjectMeta: metav1.ObjectMeta{Name: holdfastv1.VoterPolicyName},
		Spec: holdfastv1.VoterPolicySpec{TargetVoters: 3, DryRun: new(true),
			Etcd: holdfastv1.EtcdAccess{Endpoints: []string{ms[0].ClientURL}}}}
	if err := env.Client.Create(ctx, vp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), vp) })

	systemdDir := filepath.Join(dir, "systemd")
	state := hoststate.State{Dir: filepath.Join(dir, "holdfast"), MemberDataDir: filepath.Join(dir, "j3")}
	bus, err := dbusdouble.StartBus(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Close)
	var started atomic.Int32
	// boot is systemd as it comes up: the server unit has no condition of
	// its own, only what its drop-ins say.
	boot := func() *dbusdouble.Manager {
		m, err := dbusdouble.Serve(bus, dbusdouble.Config{DropInDir: systemdDir, Units: []dbusdouble.Unit{
			{Name: serverUnit, Enabled: true, Start: func(context.Context, map[string]string) (dbusdouble.Process, error) {
				started.Add(1)
				return nil, nil
			}},
			{Name: agentUnit}}})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := boot()
	createNode(t, "j3")
	runCtx, stopRun := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- nodeplugin.Run(runCtx, env.Config, nodeplugin.Options{NodeName: "j3", VoterSwaps: true,
			HostDir: state.Dir, SystemdDir: systemdDir, MemberDataDir: state.MemberDataDir, ServerUnit: serverUnit, AgentUnit: agentUnit,
			EtcdLocal: ms[2].ClientURL, CRIEndpoint: r.host.Endpoint, SystemdBus: bus.Address, MetricsAddr: "0", ProbeAddr: "0",
			SkipNameValidation: true})
	}()
	eventually(t, "the start condition installed, the member and the voters recorded", func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(systemdDir, serverUnit+".d", actuator.StartDropIn))
		if err != nil {
			return false, err
		}
		member, err := state.Member()
		if err != nil {
			return false, err
		}
		eps, err := state.MemberEndpoints()
		return strings.Contains(string(b), "ExecCondition="+filepath.Join(state.Dir, nodeplugin.HostBinary)+" start-condition") &&
			member != nil && len(eps) == 3, fmt.Errorf("drop-in %q, member %v, voters %v: %v", b, member, eps, err)
	})
	member, _ := state.Member()

	// The host goes down: its node plugin and its member stop.
	stopRun()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	m.Close()
	stops["j3"]()

	// A reboot while j3 is still a member: judged, and started.
	m = boot()
	if _, err := m.StartDirect(serverUnit); err != nil {
		t.Fatal(err)
	}
	if s := m.ActiveState(serverUnit); s != "active" || started.Load() != 1 {
		t.Fatalf("a member's server after a reboot: %s, started %d times; want it started", s, started.Load())
	}
	m.Close()

	// j3 is removed while its host is down; at the next boot its server is
	// judged before it starts, and never starts.
	removeMember(t, cli, ms[2])
	// First with the host's member lock held (the node plugin checking, or
	// finishing the host while systemd runs this start): judged without
	// the lock, and nothing written.
	for _, locked := range []bool{true, false} {
		var unlock func()
		if locked {
			if unlock, err = state.Lock(); err != nil {
				t.Fatal(err)
			}
		}
		m = boot()
		if _, err := m.StartDirect(serverUnit); err != nil {
			t.Fatal(err)
		}
		if s := m.ActiveState(serverUnit); s != "inactive" || started.Load() != 1 || m.ConditionSkips(serverUnit) != 1 {
			t.Fatalf("a removed member's server after a reboot (member lock held: %v): %s, started %d times, %d skips; want it never started",
				locked, s, started.Load(), m.ConditionSkips(serverUnit))
		}
		m.Close()
		if unlock != nil {
			unlock()
			if ts, err := state.Tombstone(); err != nil || ts != nil {
				t.Fatalf("a start condition without the member lock wrote tombstone %+v (%v)", ts, err)
			}
		}
	}
	ts, err := state.Tombstone()
	if err != nil || ts == nil || ts.MemberID != member.ID || !strings.Contains(ts.How, "member list") {
		t.Fatalf("tombstone %+v (%v), want member %s's", ts, err, member.ID)
	}
}
