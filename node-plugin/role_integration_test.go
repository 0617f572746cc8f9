//go:build integration

package nodeplugin_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/node-plugin/role"
	"github.com/holdfast-io/holdfast/node-plugin/tombstone"
	"github.com/holdfast-io/holdfast/test/dbusdouble"
	"github.com/holdfast-io/holdfast/test/etcdproc"
	"github.com/holdfast-io/holdfast/test/etcdwatch"
	"github.com/holdfast-io/holdfast/test/poll"
	"github.com/holdfast-io/holdfast/test/systemdhost"
)

const (
	serverUnit = "etcd-member.service"
	agentUnit  = "node-agent.service"
)

// plugin is one node's holdfast-node role half: the systemd double serving
// its units, the actuator, the role reconciler and the tombstone watcher.
type plugin struct {
	node  string
	mgr   *dbusdouble.Manager
	sd    *actuator.DBusSystemd
	state hoststate.State
	// stop ends this node's holdfast-node (its manager), as a reboot
	// does before the plugin's pod runs again; idempotent.
	stop func()
	// tombstoneClock paces the tombstone watcher (nil without one): each
	// step of tombstoneEvery is one check, so no test waits on its ticker.
	tombstoneClock *clocktesting.FakeClock
}

const tombstoneEvery = 5 * time.Second

// tombstoneCheck lets the watcher run one more check.
func (p *plugin) tombstoneCheck() { p.tombstoneClock.Step(tombstoneEvery) }

// startPlugin starts node's plugin; etcd (nil: none) is its tombstone
// watcher's and its promote's join check's, and configure, if any, changes
// its actuator's configuration.
func startPlugin(t *testing.T, node string, units systemdhost.Units, etcd *tombstone.ClientEtcd, configure ...func(*actuator.Config)) *plugin {
	t.Helper()
	h := systemdhost.Start(t, units)
	state, sd := h.State, h.Systemd
	cfg := actuator.Config{ServerUnit: serverUnit, AgentUnit: agentUnit, SystemdDir: h.SystemdDir, State: state, NodeName: node}
	if etcd != nil {
		cfg.Members = etcd
	}
	for _, c := range configure {
		c(&cfg)
	}
	act := actuator.New(sd, cfg)

	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  env.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Node{}: {Field: fields.OneTermEqualSelector("metadata.name", node)},
		}},
		Controller: ctrlConfig(),
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &role.Reconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), NodeName: node, Actuator: act,
		State: state, GuardEvery: 2 * time.Second}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	var clk *clocktesting.FakeClock
	if etcd != nil {
		clk = clocktesting.NewFakeClock(time.Now())
		if err := mgr.Add(&tombstone.Watcher{Etcd: etcd, State: state, Clock: clk, Every: tombstoneEvery}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return &plugin{node: node, mgr: h.Manager, sd: sd, state: state, stop: stop, tombstoneClock: clk}
}

// ctrlConfig lets several test managers register a controller of the same
// name in one process.
func ctrlConfig() config.Controller { return config.Controller{SkipNameValidation: new(true)} }

func createNode(t *testing.T, name string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Create(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), n) })
}

// setStep is the controller's write: desired role and role annotations.
func setStep(t *testing.T, node, desired, swap, step, join string) {
	t.Helper()
	n := &corev1.Node{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: node}, n); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(n.DeepCopy())
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Labels[holdfastv1.LabelDesiredRole] = desired
	n.Annotations[holdfastv1.AnnotationRoleSwap] = swap
	n.Annotations[holdfastv1.AnnotationRoleStep] = step
	if join != "" {
		n.Annotations[holdfastv1.AnnotationRoleJoin] = join
	}
	if err := env.Client.Patch(context.Background(), n, patch); err != nil {
		t.Fatal(err)
	}
}

func holdLease(t *testing.T, swap string) {
	t.Helper()
	ctx := context.Background()
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName,
		Labels:      map[string]string{holdfastv1.LabelGuarded: "true"},
		Annotations: map[string]string{holdfastv1.AnnotationSwapID: swap}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: new("holdfast-controller"), LeaseDurationSeconds: new(int32(300)),
			AcquireTime: &metav1.MicroTime{Time: time.Now()}, RenewTime: &metav1.MicroTime{Time: time.Now()}}}
	if err := env.Client.Create(ctx, l); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { releaseLease(t) })
}

func releaseLease(t *testing.T) {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName}}
	_ = client.IgnoreNotFound(env.Client.Delete(context.Background(), l))
}

// waitReport waits for the actuator report of step to reach phase.
func waitReport(t *testing.T, node, step, phase string) *holdfastv1.ActuatorReport {
	t.Helper()
	var loggedFailure string
	var found *holdfastv1.ActuatorReport
	poll.Until(t, waitTimeout, fmt.Sprintf("%s: a %s report for %s", node, phase, step), func() (bool, string) {
		n := &corev1.Node{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: node}, n); err != nil {
			t.Fatal(err)
		}
		last := n.Annotations[holdfastv1.AnnotationActuator]
		if last == "" {
			return false, "no report"
		}
		rep, err := holdfastv1.ParseActuatorReport(last)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Step == step && rep.Phase == phase {
			found = rep
			return true, ""
		}
		if rep.Step == step && rep.Phase == holdfastv1.ActuatorRefused && phase == holdfastv1.ActuatorDone {
			t.Fatalf("%s %s: %s: %s", node, step, rep.Phase, rep.Message)
		}
		// A failed step is retried with backoff (every step is safe to
		// repeat); the test waits for it to complete and says so.
		if rep.Step == step && rep.Phase == holdfastv1.ActuatorFailed && last != loggedFailure {
			loggedFailure = last
			t.Logf("%s %s failed, to be retried: %s", node, step, rep.Message)
		}
		return false, last
	})
	return found
}

// waitTimeout bounds each wait for the host or etcd to reach a state:
// generous, because a real-etcd step on a 2-core machine at load 50-60 can
// take a minute and more (etcd refuses a reconfiguration until its members
// have been connected for 5 s without a break), and bounded, so a step that
// never happens fails the test by name. etcdCallTimeout bounds one call.
const (
	waitTimeout     = 3 * time.Minute
	etcdCallTimeout = 15 * time.Second
)

func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	poll.Until(t, waitTimeout, what, func() (bool, string) {
		ok, err := cond()
		return ok, fmt.Sprint(err)
	})
}

// addLearner is the controller's part of a promote: the standby added as a
// learner (retried: a fresh cluster refuses reconfiguration until its members
// have been connected for a while, as the controller's gates would wait), and
// the role-join annotation naming every member, the new one by its node's name.
func addLearner(t *testing.T, cli *clientv3.Client, standby etcdproc.Member) (*clientv3.MemberAddResponse, string) {
	t.Helper()
	var added *clientv3.MemberAddResponse
	eventually(t, "learner added", func() (bool, error) {
		c, cancel := context.WithTimeout(t.Context(), etcdCallTimeout)
		defer cancel()
		var err error
		added, err = cli.MemberAddAsLearner(c, []string{standby.PeerURL})
		return err == nil, err
	})
	var join []string
	for _, m := range added.Members {
		name := m.Name
		if m.ID == added.Member.ID {
			name = standby.Name
		}
		join = append(join, name+"="+m.PeerURLs[0])
	}
	return added, strings.Join(join, ",")
}

// writer is test/etcdwatch's Writer: it puts keys throughout, reads each
// back, and records its history.
type writer struct{ w *etcdwatch.Writer }

func startWriter(cli *clientv3.Client) *writer {
	return &writer{etcdwatch.StartWriter(cli, "/holdfast-test/", 2*time.Second)}
}

// check stops the writer: no acknowledged write lost, its history of puts
// and gets linearizable, enough writes acknowledged during the swap.
func (w *writer) check(t *testing.T) {
	t.Helper()
	r, err := w.w.Stop(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Lost) > 0 {
		t.Fatalf("acknowledged writes lost: %v", r.Lost)
	}
	if r.NotLinearizable != nil {
		t.Fatalf("the writer's history: %v", r.NotLinearizable)
	}
	if r.Acked < 20 {
		t.Fatalf("only %d writes acknowledged during the swap", r.Acked)
	}
	t.Logf("writer: %s", r)
}

// TestPromoteStepDownFinishDemoteWithRealEtcd drives a standby host through
// a whole swap with the test as the controller: promoted (learner, then
// voter) with the join drop-in starting a real etcd member, stepped down,
// removed (tombstone written), finished to an agent, and then refused a
// server start both as a tombstoned member and as a former member with
// nowhere to join. A client writes throughout; no acknowledged write is
// lost and the cluster ID never changes.
func TestPromoteStepDownFinishDemoteWithRealEtcd(t *testing.T) {
	bin := filepath.Join(env.BinDir, "etcd")
	voters, standby, cli, clusterID := threeVotersAndAStandby(t, bin, "n1", "n2", "n3", "n4")
	// No budget for the whole test: on a starved machine its steps add up
	// to minutes (one such budget ran out during the removal at load
	// 50-60). Each wait has its own deadline and each etcd call its own
	// bound, so a slow step never leaves a later one without time.
	ctx := t.Context()
	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, etcdCallTimeout) }

	createNode(t, "n4")
	var starts sync.Map
	p := startPlugin(t, "n4", func(state hoststate.State, cond func(string) []string) []dbusdouble.Unit {
		return []dbusdouble.Unit{
			{Name: serverUnit, ExecCondition: cond(holdfastv1.RoleServer), RestartAlways: true, RestartSec: 200 * time.Millisecond,
				// The unit's ExecStart: an etcd member configured from
				// the join drop-in's environment.
				Start: func(_ context.Context, env map[string]string) (dbusdouble.Process, error) {
					starts.Store(time.Now(), env)
					return dbusdouble.StartExec(etcdproc.Command(bin, standby, state.MemberDataDir,
						env[actuator.EnvJoin], env[actuator.EnvClusterState]))
				}},
			{Name: agentUnit, ExecCondition: cond(holdfastv1.RoleAgent), Enabled: true, Active: true},
		}
	}, &tombstone.ClientEtcd{LocalEndpoint: standby.ClientURL,
		Cluster: func(context.Context) ([]string, error) {
			return []string{voters[0].ClientURL, voters[1].ClientURL, voters[2].ClientURL}, nil
		}})
	w := startWriter(cli)

	// Promote: the controller adds the learner, takes the Lease and sets the step.
	const swap = "20260301T120000Z-n1-n4"
	holdLease(t, swap)
	added, join := addLearner(t, cli, standby)
	steps := stepCounts(t)
	setStep(t, "n4", holdfastv1.RoleServer, swap, holdfastv1.RoleStepPromote, join)
	rep := waitReport(t, "n4", holdfastv1.RoleStepPromote, holdfastv1.ActuatorDone)
	if rep.StartedAt == nil || rep.Role != holdfastv1.RoleServer || rep.Swap != swap {
		t.Fatalf("promote report %+v, want startedAt, role server and the swap", rep)
	}
	eventually(t, "learner promoted to voter", func() (bool, error) {
		c, cancel := call()
		defer cancel()
		_, err := cli.MemberPromote(c, added.Member.ID)
		return err == nil, err
	})
	cctx, ccancel := call()
	defer ccancel()
	ml, err := cli.MemberList(cctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ml.Members) != 4 {
		t.Fatalf("members after promote: %d, want 4", len(ml.Members))
	}
	for _, m := range ml.Members {
		if m.IsLearner {
			t.Fatalf("member %s still a learner", m.Name)
		}
	}
	eventually(t, "local member recorded", func() (bool, error) {
		p.tombstoneCheck()
		m, err := p.state.Member()
		return m != nil && m.ID == tombstone.FormatID(added.Member.ID), err
	})

	// Step down: role file agent before the removal, server still voting.
	setStep(t, "n4", holdfastv1.RoleAgent, swap, holdfastv1.RoleStepStepDown, "")
	waitReport(t, "n4", holdfastv1.RoleStepStepDown, holdfastv1.ActuatorDone)
	if r, _ := p.state.Role(); r != holdfastv1.RoleAgent {
		t.Fatalf("role file after step-down: %q, want agent before the removal", r)
	}
	if s := p.mgr.ActiveState(serverUnit); s != "active" {
		t.Fatalf("server unit %s after step-down, want active until removed", s)
	}
	if ts, _ := p.state.Tombstone(); ts != nil {
		t.Fatal("tombstone written before the removal")
	}

	// The controller removes the member; the host notices and writes the tombstone.
	// etcd refuses a removal until the others have been connected for a
	// while after the step-down restart ("unhealthy cluster"); a controller
	// retries while they are healthy.
	eventually(t, "member removed", func() (bool, error) {
		c, cancel := call()
		defer cancel()
		_, err := cli.MemberRemove(c, added.Member.ID)
		return err == nil, err
	})
	var ts *holdfastv1.Tombstone
	eventually(t, "tombstone written", func() (bool, error) {
		p.tombstoneCheck()
		var err error
		ts, err = p.state.Tombstone()
		return ts != nil, err
	})
	if ts.MemberID != tombstone.FormatID(added.Member.ID) || ts.ClusterID != tombstone.FormatID(clusterID) {
		t.Fatalf("tombstone %+v, want member %x of cluster %x", ts, added.Member.ID, clusterID)
	}

	// Finish-demote needs no Lease once the member is tombstoned.
	releaseLease(t)
	setStep(t, "n4", holdfastv1.RoleAgent, swap, holdfastv1.RoleStepFinishDemote, "")
	waitReport(t, "n4", holdfastv1.RoleStepFinishDemote, holdfastv1.ActuatorDone)
	if s := p.mgr.ActiveState(agentUnit); s != "active" {
		t.Fatalf("agent unit %s after finish-demote", s)
	}
	if s := p.mgr.ActiveState(serverUnit); s != "inactive" {
		t.Fatalf("server unit %s after finish-demote", s)
	}
	if _, err := os.Stat(filepath.Join(p.state.MovedAside(), "member")); err != nil {
		t.Fatalf("member data not moved aside: %v", err)
	}
	// holdfast_node_actuator_steps_total: each step started and done once.
	got := rose(steps, stepCounts(t))
	for _, step := range []string{holdfastv1.RoleStepPromote, holdfastv1.RoleStepStepDown, holdfastv1.RoleStepFinishDemote} {
		if got[step+"/done"] != 1 || got[step+"/running"] < 1 {
			t.Errorf("holdfast_node_actuator_steps_total for %s rose by running %v, done %v; want at least 1 and 1", step, got[step+"/running"], got[step+"/done"])
		}
	}

	// A start of the server afterwards is refused: masked now...
	if _, err := p.mgr.StartDirect(serverUnit); err == nil || !strings.Contains(err.Error(), "masked") {
		t.Fatalf("server start after finish-demote: %v, want masked", err)
	}
	// ...and after a reboot clears the runtime mask, by its ExecCondition,
	// even when a person writes the role file server: a former member with
	// its data moved aside and no join target never starts a new cluster.
	// The reboot comes before holdfast-node runs again, so its guard, which
	// would mask the unit again, is not running.
	p.stop()
	if err := p.sd.UnmaskRuntime(ctx, serverUnit); err != nil {
		t.Fatal(err)
	}
	if err := p.state.SetRole(holdfastv1.RoleServer); err != nil {
		t.Fatal(err)
	}
	before := countStarts(&starts)
	if _, err := p.mgr.StartDirect(serverUnit); err != nil {
		t.Fatal(err)
	}
	if s := p.mgr.ActiveState(serverUnit); s != "inactive" || p.mgr.ConditionSkips(serverUnit) == 0 {
		t.Fatalf("server unit %s (condition skips %d), want skipped", s, p.mgr.ConditionSkips(serverUnit))
	}
	if countStarts(&starts) != before {
		t.Fatal("etcd was started on a former member with no join target")
	}

	w.check(t)
	cctx, ccancel = call()
	defer ccancel()
	ml, err = cli.MemberList(cctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ml.Members) != 3 || ml.Header.ClusterId != clusterID {
		t.Fatalf("after the swap: %d members in cluster %x, want 3 in %x", len(ml.Members), ml.Header.ClusterId, clusterID)
	}
}

// threeVotersAndAStandby makes four members named names, starts the first
// three as a new cluster (startVoters), and returns them, the fourth (not
// started), a client of the three, and the cluster's ID.
func threeVotersAndAStandby(t *testing.T, bin string, names ...string) ([]etcdproc.Member, etcdproc.Member, *clientv3.Client, uint64) {
	t.Helper()
	members, err := etcdproc.NewMembers(names...)
	if err != nil || len(members) != 4 {
		t.Fatalf("members %v: %v", names, err)
	}
	voters := members[:3]
	cli, _ := startVoters(t, bin, t.TempDir(), voters, voters)
	ctx, cancel := context.WithTimeout(t.Context(), etcdCallTimeout)
	defer cancel()
	st, err := cli.Status(ctx, voters[0].ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	return voters, members[3], cli, st.Header.ClusterId
}

// startVoters starts voters as a new cluster (each stopped at the test's
// end), waits until it serves through a client of clientOf, and returns
// that client and each member's stop by name.
func startVoters(t *testing.T, bin, dir string, voters, clientOf []etcdproc.Member) (*clientv3.Client, map[string]func()) {
	t.Helper()
	stops := map[string]func(){}
	for _, m := range voters {
		p, err := etcdproc.Start(bin, dir, m, voters...)
		if err != nil {
			t.Fatal(err)
		}
		stops[m.Name] = p.Stop
		t.Cleanup(p.Stop)
	}
	cli, err := etcdproc.Client(clientOf...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	if err := etcdproc.WaitHealthy(ctx, cli); err != nil {
		t.Fatal(err)
	}
	return cli, stops
}

func countStarts(m *sync.Map) int {
	n := 0
	m.Range(func(any, any) bool { n++; return true })
	return n
}

func plainUnits(withServer bool) func(hoststate.State, func(string) []string) []dbusdouble.Unit {
	return func(_ hoststate.State, cond func(string) []string) []dbusdouble.Unit {
		units := []dbusdouble.Unit{{Name: agentUnit, ExecCondition: cond(holdfastv1.RoleAgent), Enabled: true, Active: true}}
		if withServer {
			units = append(units, dbusdouble.Unit{Name: serverUnit, ExecCondition: cond(holdfastv1.RoleServer)})
		}
		return units
	}
}

func wantRefused(t *testing.T, p *plugin, step, contains string) {
	t.Helper()
	var last string
	eventually(t, "refusal saying "+contains, func() (bool, error) {
		n := &corev1.Node{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: p.node}, n); err != nil {
			return false, err
		}
		last = n.Annotations[holdfastv1.AnnotationActuator]
		rep, err := holdfastv1.ParseActuatorReport(last)
		if err != nil {
			return false, err
		}
		return rep.Step == step && rep.Phase == holdfastv1.ActuatorRefused && strings.Contains(rep.Message, contains),
			fmt.Errorf("last report %s", last)
	})
	for _, c := range p.mgr.Calls() {
		if c.Method != "MaskUnitFiles" {
			t.Fatalf("a refused step changed a unit: %v", p.mgr.Calls())
		}
	}
	if r, _ := p.state.Role(); r != "" {
		t.Fatalf("a refused step wrote the role file %q", r)
	}
}

// TestRoleStepRefusals: a step is refused, changing nothing on the host,
// when no Lease is held for its swap ID (absent, another swap, expired),
// when the role is unknown or contradicts the step, and a promote when the
// host is not provisioned.
func TestRoleStepRefusals(t *testing.T) {
	createNode(t, "r1")
	p := startPlugin(t, "r1", plainUnits(true), nil)
	const join = "a=http://127.0.0.1:1"
	before := stepCounts(t)

	setStep(t, "r1", holdfastv1.RoleServer, "swap-a", holdfastv1.RoleStepPromote, join)
	wantRefused(t, p, holdfastv1.RoleStepPromote, "no Lease held for swap swap-a: kube-system/holdfast-voter-swap does not exist")

	holdLease(t, "swap-b")
	setStep(t, "r1", holdfastv1.RoleServer, "swap-a", holdfastv1.RoleStepPromote, join+",b=http://127.0.0.1:2")
	wantRefused(t, p, holdfastv1.RoleStepPromote, `the Lease names swap "swap-b"`)

	setStep(t, "r1", "voter", "swap-b", holdfastv1.RoleStepPromote, join)
	wantRefused(t, p, holdfastv1.RoleStepPromote, `unknown role "voter"`)

	setStep(t, "r1", holdfastv1.RoleAgent, "swap-b", holdfastv1.RoleStepPromote, join)
	wantRefused(t, p, holdfastv1.RoleStepPromote, "needs desired role server")

	setStep(t, "r1", holdfastv1.RoleAgent, "swap-b", "demote", "")
	wantRefused(t, p, "demote", `unknown role step "demote"`)

	// Finish-demote without the Lease and without a tombstone: the member
	// may still vote.
	releaseLease(t)
	setStep(t, "r1", holdfastv1.RoleAgent, "swap-b", holdfastv1.RoleStepFinishDemote, "")
	wantRefused(t, p, holdfastv1.RoleStepFinishDemote, "no Lease held for swap swap-b")

	createNode(t, "r2")
	q := startPlugin(t, "r2", plainUnits(false), nil)
	holdLease(t, "swap-c")
	setStep(t, "r2", holdfastv1.RoleServer, "swap-c", holdfastv1.RoleStepPromote, join)
	wantRefused(t, q, holdfastv1.RoleStepPromote, "host not provisioned")

	// holdfast_node_actuator_steps_total counts the refusals, under the
	// step's name or unknown; nothing ran.
	got := rose(before, stepCounts(t))
	for _, k := range []string{"promote/refused", "finish-demote/refused", "unknown/refused"} {
		if got[k] < 1 {
			t.Errorf("holdfast_node_actuator_steps_total{%s} did not rise: %v", k, got)
		}
	}
	for k, v := range got {
		if !strings.HasSuffix(k, "/refused") && v != 0 {
			t.Errorf("refused steps counted %v as %s", v, k)
		}
	}
}

// TestARefusalIsWrittenOnceWhileItStands: a step refused for the same
// reason is judged again (on its guard period) but its report is written
// once: rewriting it is a Node change that would judge it again at once,
// a write to the Node every second for as long as the refusal stands.
func TestARefusalIsWrittenOnceWhileItStands(t *testing.T) {
	createNode(t, "r5")
	p := startPlugin(t, "r5", plainUnits(false), nil)
	holdLease(t, "swap-e")
	setStep(t, "r5", holdfastv1.RoleServer, "swap-e", holdfastv1.RoleStepPromote, "a=http://127.0.0.1:1")
	wantRefused(t, p, holdfastv1.RoleStepPromote, "host not provisioned")
	ctx := context.Background()
	n := &corev1.Node{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "r5"}, n); err != nil {
		t.Fatal(err)
	}
	rep, err := holdfastv1.ParseActuatorReport(n.Annotations[holdfastv1.AnnotationActuator])
	if err != nil {
		t.Fatal(err)
	}
	// Judged again after its guard period (2s), in a later second than the
	// report's: a rewrite would carry another time and change the Node.
	judged := func() float64 {
		return counter(t, "holdfast_node_actuator_steps_total", map[string]string{"step": holdfastv1.RoleStepPromote, "phase": holdfastv1.ActuatorRefused})
	}
	before := judged()
	eventually(t, "the refusal judged twice more, two seconds after its report", func() (bool, error) {
		return judged() >= before+2 && time.Now().Unix() > rep.At.Unix()+2, nil
	})
	m := &corev1.Node{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "r5"}, m); err != nil {
		t.Fatal(err)
	}
	if m.ResourceVersion != n.ResourceVersion {
		t.Fatalf("the standing refusal was written again: Node r5 at %s, then %s (%s)", n.ResourceVersion, m.ResourceVersion, m.Annotations[holdfastv1.AnnotationActuator])
	}
}

// stepCounts reads holdfast_node_actuator_steps_total by step/phase.
func stepCounts(t *testing.T) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, step := range []string{holdfastv1.RoleStepPromote, holdfastv1.RoleStepStepDown, holdfastv1.RoleStepFinishDemote, holdfastv1.RoleStepRollback, "unknown"} {
		for _, phase := range []string{holdfastv1.ActuatorRunning, holdfastv1.ActuatorDone, holdfastv1.ActuatorFailed, holdfastv1.ActuatorRefused} {
			out[step+"/"+phase] = counter(t, "holdfast_node_actuator_steps_total", map[string]string{"step": step, "phase": phase})
		}
	}
	return out
}

// TestExpiredLeaseRefusesStep: a Lease past renewTime + duration holds
// nothing, whoever it names.
func TestExpiredLeaseRefusesStep(t *testing.T) {
	createNode(t, "r3")
	p := startPlugin(t, "r3", plainUnits(true), nil)
	ctx := context.Background()
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName,
		Annotations: map[string]string{holdfastv1.AnnotationSwapID: "swap-d"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: new("holdfast-controller"), LeaseDurationSeconds: new(int32(15)),
			RenewTime: &metav1.MicroTime{Time: time.Now().Add(-time.Minute)}}}
	if err := env.Client.Create(ctx, l); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { releaseLease(t) })
	setStep(t, "r3", holdfastv1.RoleServer, "swap-d", holdfastv1.RoleStepPromote, "a=http://127.0.0.1:1")
	wantRefused(t, p, holdfastv1.RoleStepPromote, "the Lease expired at")
}
