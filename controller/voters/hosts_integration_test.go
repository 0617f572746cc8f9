//go:build integration

package voters_test

import (
	"context"
	"errors"
	"net"
	"net/url"
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
	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/node-plugin/report"
	"github.com/holdfast-io/holdfast/node-plugin/role"
	"github.com/holdfast-io/holdfast/node-plugin/tombstone"
	"github.com/holdfast-io/holdfast/test/dbusdouble"
	"github.com/holdfast-io/holdfast/test/etcdproc"
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
	// etcd is the node plugin's etcd client: its tombstone watcher's and
	// its promote's join check's.
	etcd *tombstone.ClientEtcd

	mu      sync.Mutex
	proc    *dbusdouble.ExecProcess
	plugin  func()
	starts  int
	blocked bool

	down atomic.Bool
	// beat is held across the kubelet stand-in's look at down and its
	// heartbeat, so a host paused while a heartbeat is on its way is
	// marked down only after that heartbeat, never overwritten by it.
	beat sync.Mutex
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
	eps := h.c.eps
	h.etcd = &tombstone.ClientEtcd{LocalEndpoint: h.member.ClientURL, Cluster: func(context.Context) ([]string, error) { return eps, nil }}
	h.act = actuator.New(sh.Systemd, actuator.Config{ServerUnit: serverUnit, AgentUnit: agentUnit,
		SystemdDir: sh.SystemdDir, State: h.state, NodeName: h.name, Members: h.etcd})
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
		h.beat.Lock()
		down := h.down.Load()
		if !down && !h.quiet.Load() {
			h.heartbeat(ctx, corev1.ConditionTrue)
		}
		h.beat.Unlock()
		if down {
			continue
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
	cfg := env.As(nodePluginUser, map[string][]string{serviceaccount.NodeNameKey: {h.name}})
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
	watcher := &tombstone.Watcher{Etcd: h.etcd, State: h.state, Clock: clock.RealClock{}, Every: 300 * time.Millisecond}
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
	h.beat.Lock()
	h.down.Store(true)
	h.beat.Unlock()
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
	// The write may lose to another writer of the Node (the controller's
	// cordon, taint or annotations): written again until it is seen.
	poll.Until(t, time.Minute, h.name+"'s Node not Ready", func() (bool, string) {
		h.heartbeat(context.Background(), corev1.ConditionUnknown)
		n := &corev1.Node{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: h.name}, n); err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionUnknown, string(c.Status)
			}
		}
		return false, "no Ready condition"
	})
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
	ctrlClient := env.ClientAs(t, controllerUser, nil)
	l := &coordinationv1.Lease{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName}, l); err == nil {
		l.Spec.HolderIdentity = nil
		_ = ctrlClient.Update(ctx, l)
		_ = ctrlClient.Delete(ctx, l)
	}
}
