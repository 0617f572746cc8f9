//go:build integration

package voters_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/audit"
	"github.com/holdfast-io/holdfast/controller/voters"
	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/node-plugin/report"
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

// cluster is a test's fleet: each node a host with its own systemd double on
// a private bus, whose server unit runs a real etcd member, and the node
// plugin's role reconciler, tombstone watcher and reporter acting on its own
// Node as holdfast-node; a kubelet stand-in heartbeats each Node's Ready
// condition. The first `voters` nodes bootstrap the etcd cluster.
type cluster struct {
	t     testing.TB
	bin   string
	hosts map[string]*host
	names []string
	eps   []string
}

type host struct {
	c       *cluster
	name    string
	member  etcdproc.Member
	state   hoststate.State
	sd      *dbusdouble.Manager
	act     *actuator.Actuator
	initial string // the bootstrap cluster for a first voter

	mu      sync.Mutex
	proc    *dbusdouble.ExecProcess
	plugin  func()
	starts  int
	blocked bool

	down atomic.Bool
	// quiet holds the kubelet stand-in's heartbeats while the host stays
	// up: its Node keeps the last Ready it wrote.
	quiet atomic.Bool
}

// newCluster starts voters (bootstrapping a cluster) and standbys
// (voter-eligible, provisioned agents).
func newCluster(t testing.TB, voterNames, standbyNames []string) *cluster {
	t.Helper()
	c := &cluster{t: t, bin: filepath.Join(env.BinDir, "etcd"), hosts: map[string]*host{}}
	all := append(slices.Clone(voterNames), standbyNames...)
	c.names = all
	members, err := etcdproc.NewMembers(all...)
	if err != nil {
		t.Fatal(err)
	}
	initial := etcdproc.InitialCluster(members[:len(voterNames)]...)
	for i, name := range all {
		h := &host{c: c, name: name, member: members[i]}
		if i < len(voterNames) {
			h.initial = initial
		}
		c.hosts[name] = h
		c.eps = append(c.eps, members[i].ClientURL)
	}
	for _, name := range all {
		c.hosts[name].start(t)
	}
	cli := c.client(voterNames...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := etcdproc.WaitHealthy(ctx, cli); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *cluster) client(names ...string) *clientv3.Client {
	c.t.Helper()
	var ms []etcdproc.Member
	for _, n := range names {
		ms = append(ms, c.hosts[n].member)
	}
	cli, err := etcdproc.Client(ms...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cli.Close() })
	return cli
}

func (h *host) start(t testing.TB) {
	t.Helper()
	voter := h.initial != ""
	sh := systemdhost.Start(t, func(_ hoststate.State, roleIs func(string) []string) []dbusdouble.Unit {
		return []dbusdouble.Unit{
			{Name: serverUnit, ExecCondition: roleIs(holdfastv1.RoleServer), RestartAlways: true, RestartSec: 200 * time.Millisecond,
				Enabled: voter, Start: h.startEtcd},
			{Name: agentUnit, ExecCondition: roleIs(holdfastv1.RoleAgent), Enabled: !voter, Active: !voter},
		}
	})
	h.state, h.sd = sh.State, sh.Manager
	h.act = actuator.New(sh.Systemd, actuator.Config{ServerUnit: serverUnit, AgentUnit: agentUnit,
		SystemdDir: sh.SystemdDir, State: h.state})
	if voter {
		if _, err := h.sd.StartDirect(serverUnit); err != nil {
			t.Fatal(err)
		}
	}
	h.createNode(t, voter)
	h.startPlugin(t)
	go h.kubelet(t)
}

// startEtcd is the server unit's ExecStart: an etcd member configured from
// the join drop-in's environment (a first voter bootstraps). A host whose
// peer traffic is blocked sees every other member's peer URL as a black
// hole.
func (h *host) startEtcd(_ context.Context, env map[string]string) (dbusdouble.Process, error) {
	join, state := env[actuator.EnvJoin], env[actuator.EnvClusterState]
	if join == "" {
		if h.initial == "" {
			return nil, errors.New("no join target")
		}
		join, state = h.initial, "new"
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.blocked {
		join = h.c.blackhole(join, h.member.PeerURL)
	}
	p, err := dbusdouble.StartExec(etcdproc.Command(h.c.bin, h.member, h.state.MemberDataDir, join, state))
	if err != nil {
		return nil, err
	}
	h.proc = p
	h.starts++
	return p, nil
}

// blackhole rewrites every peer URL in an initial-cluster string but own to
// a listener that accepts connections and never answers: the peer network
// of this host is cut.
func (c *cluster) blackhole(join, own string) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, conn)
			mu.Unlock()
		}
	}()
	c.t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, h := range held {
			h.Close()
		}
		mu.Unlock()
	})
	var parts []string
	for _, e := range strings.Split(join, ",") {
		name, u, _ := strings.Cut(e, "=")
		if u != own {
			pu, _ := url.Parse(u)
			pu.Host = l.Addr().String()
			u = pu.String()
		}
		parts = append(parts, name+"="+u)
	}
	return strings.Join(parts, ",")
}

func (h *host) createNode(t testing.TB, voter bool) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h.name,
		Labels:      map[string]string{corev1.LabelHostname: h.name},
		Annotations: map[string]string{holdfastv1.AnnotationEtcdPeerURL: h.member.PeerURL}}}
	if voter {
		// As k3s marks its servers.
		n.Labels[holdfastv1.LabelEtcdRole] = "true"
		n.Labels[holdfastv1.LabelControlPlaneRole] = "true"
		n.Labels[holdfastv1.LabelMasterRole] = "true"
		n.Annotations["etcd.k3s.cattle.io/node-name"] = h.name + "-0a1b2c3d"
		n.Annotations["etcd.k3s.cattle.io/node-address"] = "127.0.0.1"
	} else {
		n.Labels[holdfastv1.LabelVoterEligible] = "true"
	}
	if err := env.Client.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), n) })
	h.heartbeat(ctx, corev1.ConditionTrue)
}

// heartbeat writes the Node's Ready condition as a kubelet does.
func (h *host) heartbeat(ctx context.Context, status corev1.ConditionStatus) {
	n := &corev1.Node{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: h.name}, n); err != nil {
		return
	}
	now := metav1.Now()
	cond := corev1.NodeCondition{Type: corev1.NodeReady, Status: status, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}
	found := false
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			if n.Status.Conditions[i].Status == status {
				cond.LastTransitionTime = n.Status.Conditions[i].LastTransitionTime
			}
			n.Status.Conditions[i] = cond
			found = true
		}
	}
	if !found {
		n.Status.Conditions = append(n.Status.Conditions, cond)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	_ = env.Client.Status().Update(ctx, n)
}

// kubelet heartbeats every 500ms while the host is up, and removes the pods
// deleted on its node (a kubelet confirms their end).
func (h *host) kubelet(t testing.TB) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if h.down.Load() {
			continue
		}
		if !h.quiet.Load() {
			h.heartbeat(ctx, corev1.ConditionTrue)
		}
		var pods corev1.PodList
		if err := env.Client.List(ctx, &pods, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("spec.nodeName", h.name)}); err == nil {
			for i := range pods.Items {
				if p := &pods.Items[i]; p.DeletionTimestamp != nil {
					_ = env.Client.Delete(ctx, p, client.GracePeriodSeconds(0))
				}
			}
		}
	}
}

// startPlugin runs this host's holdfast-node parts as holdfast-node's
// service account bound to the node.
func (h *host) startPlugin(t testing.TB) {
	cfg := as(nodePluginUser, map[string][]string{serviceaccount.NodeNameKey: {h.name}})
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  env.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Node{}: {Field: fields.OneTermEqualSelector("metadata.name", h.name)},
		}},
		Controller: config.Controller{SkipNameValidation: new(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	eps := h.c.eps
	etcd := &tombstone.ClientEtcd{LocalEndpoint: h.member.ClientURL, Cluster: func(context.Context) ([]string, error) { return eps, nil }}
	watcher := &tombstone.Watcher{Etcd: etcd, State: h.state, Clock: clock.RealClock{}, Every: 300 * time.Millisecond}
	if err := mgr.Add(watcher); err != nil {
		t.Fatal(err)
	}
	r := &role.Reconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), NodeName: h.name, Actuator: h.act,
		State: h.state, GuardEvery: time.Second, Removal: watcher.Check}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(&report.Reporter{Client: mgr.GetClient(), NodeName: h.name, Units: h.act, State: h.state,
		Clock: clock.RealClock{}, Every: time.Second, FitnessEvery: time.Hour, FsyncSamples: 5}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = mgr.Start(ctx)
	}()
	stop := func() { cancel(); <-done }
	h.mu.Lock()
	h.plugin = stop
	h.mu.Unlock()
	t.Cleanup(func() {
		h.mu.Lock()
		p := h.plugin
		h.plugin = nil
		h.mu.Unlock()
		if p != nil {
			p()
		}
	})
}

// pause takes the host down: its etcd member SIGSTOPped, its node plugin
// stopped, its Node NotReady (as node lifecycle marks a silent kubelet).
func (h *host) pause(t testing.TB) {
	t.Helper()
	h.down.Store(true)
	h.mu.Lock()
	stop := h.plugin
	h.plugin = nil
	proc := h.proc
	h.mu.Unlock()
	if stop != nil {
		stop()
	}
	if proc != nil {
		_ = proc.Cmd.Process.Signal(syscall.SIGSTOP)
	}
	h.heartbeat(context.Background(), corev1.ConditionUnknown)
}

// resume brings the host back: SIGCONT, its node plugin started again,
// heartbeats again.
func (h *host) resume(t testing.TB) {
	t.Helper()
	h.mu.Lock()
	proc := h.proc
	h.mu.Unlock()
	if proc != nil {
		_ = proc.Cmd.Process.Signal(syscall.SIGCONT)
	}
	h.startPlugin(t)
	h.down.Store(false)
}

// pauseEtcd SIGSTOPs only the etcd member (the host and its Node stay up).
func (h *host) pauseEtcd(t testing.TB) func() {
	h.mu.Lock()
	proc := h.proc
	h.mu.Unlock()
	_ = proc.Cmd.Process.Signal(syscall.SIGSTOP)
	return func() { _ = proc.Cmd.Process.Signal(syscall.SIGCONT) }
}

// policy creates VoterPolicy default for the cluster, with the shortest
// timings the CRD allows.
func (c *cluster) policy(t testing.TB, mutate func(*holdfastv1.VoterPolicy)) {
	t.Helper()
	p := &holdfastv1.VoterPolicy{ObjectMeta: metav1.ObjectMeta{Name: holdfastv1.VoterPolicyName},
		Spec: holdfastv1.VoterPolicySpec{TargetVoters: 3, DryRun: new(false), OperationTimeoutSeconds: 60,
			WorkloadDrainWaitSeconds: new(int32(60)), LearnerStallSeconds: 30,
			Etcd: holdfastv1.EtcdAccess{Endpoints: c.eps},
			Host: holdfastv1.HostRoleSettings{ServerUnit: serverUnit, AgentUnit: agentUnit}}}
	if mutate != nil {
		mutate(p)
	}
	if err := env.Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanupSwaps(t); _ = env.Client.Delete(context.Background(), p) })
}

// cleanupSwaps ends whatever a failed test left: swaps marked finished and
// deleted, the Lease freed and deleted.
func cleanupSwaps(t testing.TB) {
	ctx := context.Background()
	var swaps holdfastv1.VoterSwapList
	if err := env.Client.List(ctx, &swaps); err == nil {
		for i := range swaps.Items {
			s := &swaps.Items[i]
			if !s.Status.Phase.Finished() {
				s.Status.Phase = holdfastv1.SwapAbandoned
				_ = env.Client.Status().Update(ctx, s)
			}
			_ = env.Client.Delete(ctx, s)
		}
	}
	ctrlClient := clientAs(t, controllerUser, nil)
	l := &coordinationv1.Lease{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName}, l); err == nil {
		l.Spec.HolderIdentity = nil
		_ = ctrlClient.Update(ctx, l)
		_ = ctrlClient.Delete(ctx, l)
	}
}

// controller is one in-process voter controller, as holdfast-controller's
// service account.
type controller struct {
	rec  *voters.Reconciler
	stop func()
	done chan struct{}
	// crashed is closed when AfterAction ended it.
	crashed chan struct{}
}

// afterPasses waits until the controller has finished n more passes
// (each observes etcd and decides): a test asserting that nothing happens
// gives the controller its chances this way, not by sleeping.
func (c *controller) afterPasses(t testing.TB, n int64) {
	t.Helper()
	want := c.rec.Passes() + n
	poll.Until(t, time.Minute, fmt.Sprintf("%d more controller passes", n), func() (bool, string) {
		got := c.rec.Passes()
		return got >= want, fmt.Sprintf("%d passes, want %d", got, want)
	})
}

type ctrlOpts struct {
	identity string
	// crashAfter, when it returns true for an action, ends the controller
	// right after carrying it out, before it is recorded.
	crashAfter func(voters.Action) bool
	// audit receives the audit trail's lines (JSON).
	audit io.Writer
	// shipped runs the passes at the shipped intervals (2s with a swap,
	// 15s without) and the shipped Lease duration, for a benchmark.
	shipped bool
	// snapshotDir is the controller's snapshot volume (empty: a new one).
	snapshotDir string
}

func startController(t testing.TB, o ctrlOpts) *controller {
	t.Helper()
	if o.identity == "" {
		o.identity = "holdfast-controller-test"
	}
	if o.snapshotDir == "" {
		o.snapshotDir = t.TempDir()
	}
	mgr, err := ctrl.NewManager(as(controllerUser, nil), ctrl.Options{
		Scheme: voters.Scheme(), Cache: voters.CacheOptions(), Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: new(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &controller{done: make(chan struct{}), crashed: make(chan struct{})}
	var once sync.Once
	r := &voters.Reconciler{
		Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("holdfast-voters"),
		Clock: shifted, Settings: voters.Settings{Identity: o.identity, LeaseDuration: 6 * time.Second, PeerPort: 2380, PeerScheme: "http"},
		EtcdFor: func(context.Context, *holdfastv1.VoterPolicy) (voters.Etcd, error) {
			return &voters.ClientEtcd{StatusTimeout: time.Second, RequestTimeout: 3 * time.Second}, nil
		},
		SnapshotDir: o.snapshotDir, SnapshotVolume: testSnapshotVolume, CandidateNamespace: releaseNS,
		RunningEvery: 200 * time.Millisecond, IdleEvery: time.Second,
	}
	if o.shipped {
		r.RunningEvery, r.IdleEvery, r.Settings.LeaseDuration = 0, 0, voters.DefaultSettings().LeaseDuration
	}
	if o.audit != nil {
		r.Audit = audit.New(o.audit, "voters", shifted)
	}
	if o.crashAfter != nil {
		r.AfterAction = func(a voters.Action) error {
			if o.crashAfter(a) {
				once.Do(func() { close(c.crashed); cancel() })
				return fmt.Errorf("crashed after %s", a.Kind)
			}
			return nil
		}
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	c.rec = r
	go func() {
		defer close(c.done)
		_ = mgr.Start(ctx)
	}()
	c.stop = func() { cancel(); <-c.done }
	t.Cleanup(c.stop)
	return c
}

// --- waiting ----------------------------------------------------------------

func getSwap(t testing.TB, name string) *holdfastv1.VoterSwap {
	t.Helper()
	s := &holdfastv1.VoterSwap{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func describe(s *holdfastv1.VoterSwap) string {
	out := fmt.Sprintf("phase %s step %s outcome %s", s.Status.Phase, s.Status.Step, s.Status.Outcome)
	if c := meta.FindStatusCondition(s.Status.Conditions, holdfastv1.ConditionProgressing); c != nil {
		out += fmt.Sprintf("; progressing %s %s: %s", c.Status, c.Reason, c.Message)
	}
	if n := len(s.Status.History); n > 0 {
		h := s.Status.History[n-1]
		out += fmt.Sprintf("; last %s %s %s: %s", h.Step, h.Outcome, h.Reason, h.Message)
	}
	return out
}

// waitPhase waits for the swap to finish in phase.
func waitPhase(t testing.TB, name string, phase holdfastv1.SwapPhase, within time.Duration) *holdfastv1.VoterSwap {
	t.Helper()
	var s *holdfastv1.VoterSwap
	// What the nodes said the last time the swap waited, for a failure.
	var waited string
	poll.Until(t, within, "swap "+name+" "+string(phase), func() (bool, string) {
		s = getSwap(t, name)
		if s.Status.Phase.Finished() && s.Status.Phase != phase {
			t.Fatalf("swap %s finished %s, want %s: %s\nhistory:\n%s\nnodes while it waited:\n%s", name, s.Status.Phase, phase, describe(s), history(s), waited)
		}
		if c := meta.FindStatusCondition(s.Status.Conditions, holdfastv1.ConditionProgressing); c != nil && c.Reason == holdfastv1.SwapReasonWaitingForNodePlugin {
			waited = c.Message + "\n" + nodeReports(t)
		}
		return s.Status.Phase == phase, describe(s) + "\n" + nodeReports(t)
	})
	return s
}

// nodeReports prints every Node's role labels, role step and node plugin
// report, for a failure message.
func nodeReports(t testing.TB) string {
	var nodes corev1.NodeList
	if err := env.Client.List(context.Background(), &nodes); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, n := range nodes.Items {
		_, etcdRole := n.Labels[holdfastv1.LabelEtcdRole]
		fmt.Fprintf(&b, "  %s: desired %q etcd-label %v step %q/%q cordoned %v tombstone %q\n    report %s\n", n.Name,
			n.Labels[holdfastv1.LabelDesiredRole], etcdRole, n.Annotations[holdfastv1.AnnotationRoleSwap], n.Annotations[holdfastv1.AnnotationRoleStep],
			n.Spec.Unschedulable, n.Annotations[holdfastv1.AnnotationTombstone], n.Annotations[holdfastv1.AnnotationActuator])
	}
	return b.String()
}

func history(s *holdfastv1.VoterSwap) string {
	var b strings.Builder
	for _, h := range s.Status.History {
		fmt.Fprintf(&b, "  %s %s %s %s: %s\n", h.At.Format("15:04:05.000"), h.Step, h.Outcome, h.Reason, h.Message)
	}
	return b.String()
}

// waitHealthyStatus waits for the controller to report etcd healthy with
// these voters (the webhook's gates read that status).
func waitHealthyStatus(t testing.TB, voterNames ...string) {
	t.Helper()
	want := slices.Clone(voterNames)
	slices.Sort(want)
	poll.Until(t, time.Minute, "VoterPolicy status healthy with voters "+strings.Join(want, ","), func() (bool, string) {
		p := &holdfastv1.VoterPolicy{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: holdfastv1.VoterPolicyName}, p); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(p.Status.Conditions, holdfastv1.ConditionEtcdHealthy)
		if c == nil {
			return false, "no EtcdHealthy condition"
		}
		return c.Status == metav1.ConditionTrue && slices.Equal(p.Status.Voters, want), fmt.Sprintf("%s %s: %s; voters %v", c.Status, c.Reason, c.Message, p.Status.Voters)
	})
}

// createSwap asks for a manual swap as an administrator would.
func createSwap(t testing.TB, out, in string) string {
	t.Helper()
	var name string
	// The incoming host's node plugin reports it provisioned on its first
	// pass; until the webhook has read that report, admission refuses the
	// swap for it. Any other refusal fails the test.
	poll.Until(t, 30*time.Second, "the swap "+out+" -> "+in+" admitted", func() (bool, string) {
		s := &holdfastv1.VoterSwap{ObjectMeta: metav1.ObjectMeta{GenerateName: "swap-" + out + "-"},
			Spec: holdfastv1.VoterSwapSpec{Outgoing: out, Incoming: in, Reason: "test", Origin: holdfastv1.SwapManual}}
		err := env.Client.Create(context.Background(), s)
		switch {
		case err == nil:
			name = s.Name
			return true, ""
		case in != "" && strings.Contains(err.Error(), in+" is not provisioned"):
			return false, err.Error()
		}
		t.Fatalf("creating the swap %s -> %s: %v", out, in, err)
		return false, ""
	})
	return name
}

// bindCandidate binds the swap's voter-candidate pod to node, as
// holdfast-scheduler would.
func bindCandidate(t testing.TB, swap, node string) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{}
	poll.Until(t, 30*time.Second, "voter-candidate pod", func() (bool, string) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: releaseNS, Name: voters.CandidatePodName(swap)}, pod)
		return err == nil, fmt.Sprint(err)
	})
	if pod.Spec.SchedulerName != holdfastv1.SchedulerName || pod.Labels[holdfastv1.LabelRole] != holdfastv1.RoleVoterCandidate {
		t.Fatalf("candidate pod %s: scheduler %q labels %v", pod.Name, pod.Spec.SchedulerName, pod.Labels)
	}
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := clientAs(t, schedulerUser, nil).SubResource("binding").Create(ctx, pod, b); err != nil {
		t.Fatal(err)
	}
}

// etcdMembers are etcd's own voters and learners, by name, and its
// cluster ID, as a client of names answers.
func etcdMembers(t testing.TB, cli *clientv3.Client) (voterNames, learners []string, clusterID uint64) {
	t.Helper()
	v, l, id, err := etcdwatch.Members(context.Background(), cli)
	if err != nil {
		t.Fatal(err)
	}
	return v, l, id
}

func getNode(t testing.TB, name string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	return n
}

func getLease(t testing.TB) *coordinationv1.Lease {
	t.Helper()
	l := &coordinationv1.Lease{}
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName}, l)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// startWriter puts a key every 50ms and reads it back (test/etcdwatch),
// each attempt given a second on these loopback members.
func startWriter(cli *clientv3.Client) *etcdwatch.Writer {
	return etcdwatch.StartWriter(cli, "/holdfast-writer/", time.Second)
}

// checkWriter stops the writer and asserts no write failed, no
// acknowledged write is lost and its history of puts and gets is
// linearizable; it returns what the writer saw.
func checkWriter(t testing.TB, w *etcdwatch.Writer) etcdwatch.Report {
	t.Helper()
	r, err := w.Stop(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Lost) > 0 {
		t.Errorf("acknowledged writes lost: %v", r.Lost)
	}
	if len(r.Failed) > 0 {
		t.Errorf("%d writes failed (never acknowledged within 10s)", len(r.Failed))
	}
	if r.NotLinearizable != nil {
		t.Errorf("the writer's history: %v", r.NotLinearizable)
	}
	if r.Acked < 20 {
		t.Errorf("only %d writes acknowledged", r.Acked)
	}
	t.Logf("writer: %s", r)
	return r
}

func hostDataMovedAside(h *host) bool {
	_, err := os.Stat(filepath.Join(h.state.MovedAside(), "member"))
	return err == nil
}

func hasSwapTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == holdfastv1.TaintVoterSwap {
			return true
		}
	}
	return false
}

// labelNode sets a label as an administrator.
func labelNode(t testing.TB, node, key, value string) {
	t.Helper()
	n := getNode(t, node)
	patch := client.MergeFrom(n.DeepCopy())
	n.Labels[key] = value
	if err := env.Client.Patch(context.Background(), n, patch); err != nil {
		t.Fatal(err)
	}
}
