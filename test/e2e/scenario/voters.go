package scenario

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/cluster"
	"github.com/holdfast-io/holdfast/test/etcdwatch"
)

// VotersOptions put the control plane's etcd on nodes (each member the
// server unit of its node's systemd, or its kubelet's etcd static pod,
// carried out by holdfast-node) and run holdfast-controller --role voters
// on it.
type VotersOptions struct {
	// Voters bootstrap the etcd cluster the apiserver uses.
	Voters []string
	// Standbys are voter-eligible nodes that can be promoted.
	Standbys []string
	// Layout is how the hosts run a member (default LayoutSystemd).
	Layout Layout
}

// Layout is how the voters' hosts run an etcd member.
type Layout string

const (
	// LayoutSystemd: a k3s-style host, the member its server unit
	// (holdfast-node's Systemd actuator).
	LayoutSystemd Layout = "systemd"
	// LayoutStaticPod: a kubeadm host, the member its kubelet's etcd
	// static pod (the StaticPod actuator); the first voters' manifests
	// are written before their kubelets start, as kubeadm init and join
	// write them, and every etcd node is provisioned with the cluster's
	// etcd CA and the kube-apiserver template (cluster.ProvisionKubeadm).
	LayoutStaticPod Layout = "staticpod"
)

// VotersLayoutEnv names the Layout of a voters world over its Options
// (make test-e2e runs the voter drills of STATICPOD_VOTER_DRILLS with
// HOLDFAST_E2E_VOTERS_LAYOUT=staticpod).
const VotersLayoutEnv = "HOLDFAST_E2E_VOTERS_LAYOUT"

// ParseLayout reads a Layout by name.
func ParseLayout(s string) (Layout, error) {
	switch l := Layout(s); l {
	case LayoutSystemd, LayoutStaticPod:
		return l, nil
	}
	return "", fmt.Errorf("%s=%q: must be %s or %s", VotersLayoutEnv, s, LayoutSystemd, LayoutStaticPod)
}

// staticPods says whether the hosts are kubeadm hosts.
func (o *VotersOptions) staticPods() bool { return o != nil && o.Layout == LayoutStaticPod }

func (o *VotersOptions) etcdRole(node string) string {
	switch {
	case o == nil:
		return ""
	case slices.Contains(o.Voters, node):
		return cluster.EtcdVoter
	case slices.Contains(o.Standbys, node):
		return cluster.EtcdStandby
	}
	return ""
}

// VotersControllerPort is the voters role's health port in the hub (its
// metrics on the next).
const VotersControllerPort = 8300

// votersIdentity is the voters role's holder identity; a restart keeps it.
const votersIdentity = "holdfast-controller-voters"

// startVoters labels the nodes and creates VoterPolicy default
// (votersPolicy), starts the voters role, then waits for it to report etcd
// healthy. Installed by the chart, the release runs the voters role and
// votersPolicy came before it (Up).
func (w *World) startVoters(ctx context.Context, o VotersOptions) error {
	if w.install == Chart {
		// The webhook refuses a swap onto a node holdfast-node has not
		// reported provisioned yet; it reports every 30 s.
		for _, n := range append(slices.Clone(o.Voters), o.Standbys...) {
			if err := w.WaitProvisioned(ctx, n, 2*time.Minute); err != nil {
				return err
			}
		}
		return w.WaitVotersHealthy(ctx, 3*time.Minute, o.Voters...)
	}
	if err := w.votersPolicy(ctx, o); err != nil {
		return err
	}
	w.logf("starting holdfast-controller --role voters")
	if err := w.startVotersController(ctx); err != nil {
		return err
	}
	w.superviseVoters()
	return w.WaitVotersHealthy(ctx, 2*time.Minute, o.Voters...)
}

// votersPolicy labels the nodes as an admin would and creates VoterPolicy
// default (dry run: only the swaps a drill asks for are carried out). It
// comes before holdfast-node starts with voter swaps on: holdfast-node reads
// the policy's host settings (the member data directory) once, at start.
func (w *World) votersPolicy(ctx context.Context, o VotersOptions) error {
	for _, n := range o.Voters {
		if err := w.LabelNode(ctx, n, map[string]string{holdfastv1.LabelEtcdRole: "true", holdfastv1.LabelVoterEligible: "true"}); err != nil {
			return err
		}
	}
	for _, n := range o.Standbys {
		if err := w.LabelNode(ctx, n, map[string]string{holdfastv1.LabelVoterEligible: "true"}); err != nil {
			return err
		}
	}
	host := holdfastv1.HostRoleSettings{ServerUnit: cluster.ServerUnit, AgentUnit: cluster.AgentUnit, MemberDataDir: memberDataDir}
	if o.staticPods() {
		// One layout for every node (cluster.Node.KubeadmLayout).
		k := w.Nodes[o.Voters[0]].KubeadmLayout()
		host.Actuator = holdfastv1.ActuatorStaticPod
		host.StaticPod = &holdfastv1.StaticPodSettings{EtcdImage: cluster.EtcdImage, ManifestsDir: k.ManifestsDir, PKIDir: k.PKIDir,
			APIServerTemplate: k.APIServerTemplate}
	}
	p := &holdfastv1.VoterPolicy{ObjectMeta: metav1.ObjectMeta{Name: holdfastv1.VoterPolicyName},
		Spec: holdfastv1.VoterPolicySpec{TargetVoters: 3, DryRun: new(true),
			OperationTimeoutSeconds: 90, WorkloadDrainWaitSeconds: new(int32(60)), LearnerStallSeconds: 30,
			Etcd: holdfastv1.EtcdAccess{Endpoints: w.EtcdEndpoints()}, Host: host}}
	if err := w.Client.Create(ctx, p); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// votersFlags are the voters role's flags for this cluster beside its
// defaults: plain-HTTP members on the nodes' peer port, and passes short
// enough for drills.
var votersFlags = []string{"--etcd-peer-scheme=http", fmt.Sprintf("--etcd-peer-port=%d", cluster.EtcdPeerPort),
	"--voter-swap-pass-interval=1s", "--voter-swap-lease-duration=15s", "--voter-idle-pass-interval=2s"}

// superviseVoters keeps the voters role running, as its Deployment would:
// the role exits by design when it loses its election (an apiserver slow
// past its renew deadline), and a drill SIGKILLs it (KillVoters).
func (w *World) superviseVoters() {
	w.keepRunning(votersIdentity, func() (supervised, bool) {
		if v := w.Voters(); v != nil {
			return v, false
		}
		return nil, false
	}, w.startVotersController)
}

// Voters is the running voters role process (installed by the chart: its
// election's holder pod, Process nil).
func (w *World) Voters() *cluster.Controller {
	if w.install == Chart {
		return w.chartVotersLeader()
	}
	w.votersMu.Lock()
	defer w.votersMu.Unlock()
	return w.VotersController
}

// KillVoters SIGKILLs the voters role and waits until its supervisor has
// started it again (a new process, same identity).
func (w *World) KillVoters(ctx context.Context) error {
	if w.install == Chart {
		return w.killChartVoters(ctx)
	}
	old := w.Voters()
	old.Kill()
	return cluster.Poll(ctx, 2*time.Minute, func() (bool, error) {
		v := w.Voters()
		return v != old && !v.Exited(), nil
	})
}

// startVotersController starts holdfast-controller --role voters with the
// same identity and ports every time: a restart takes its own election
// Lease back at once.
func (w *World) startVotersController(ctx context.Context) error {
	w.votersMu.Lock()
	defer w.votersMu.Unlock()
	if v := w.VotersController; v != nil && !v.Exited() {
		return fmt.Errorf("%s is running", v.Identity)
	}
	snap := filepath.Join(w.Dir, "snapshots")
	if err := os.MkdirAll(snap, 0o700); err != nil {
		return err
	}
	ctl, err := w.StartController(ctx, "voters", votersIdentity, VotersControllerPort,
		append([]string{"--snapshot-dir=" + snap}, votersFlags...)...)
	if ctl != nil {
		// Started but perhaps not healthy: it holds the ports, and its
		// supervisor watches it.
		w.VotersController = ctl
	}
	return err
}

// WaitVotersHealthy waits until VoterPolicy's status says etcd is healthy
// with exactly these voters (the webhook's swap gates read that status).
func (w *World) WaitVotersHealthy(ctx context.Context, within time.Duration, voters ...string) error {
	want := slices.Sorted(slices.Values(voters))
	var last string
	err := cluster.Poll(ctx, within, func() (bool, error) {
		p := &holdfastv1.VoterPolicy{}
		if err := w.Client.Get(ctx, client.ObjectKey{Name: holdfastv1.VoterPolicyName}, p); err != nil {
			last = err.Error()
			return false, nil
		}
		c := meta.FindStatusCondition(p.Status.Conditions, holdfastv1.ConditionEtcdHealthy)
		if c == nil {
			last = "no EtcdHealthy condition"
			return false, nil
		}
		last = fmt.Sprintf("%s %s: %s; voters %v", c.Status, c.Reason, c.Message, p.Status.Voters)
		return c.Status == metav1.ConditionTrue && slices.Equal(p.Status.Voters, want), nil
	})
	if err != nil {
		return fmt.Errorf("VoterPolicy not healthy with voters %v: %s: %w", want, last, err)
	}
	return nil
}

// The demo and the drills watch etcd with test/etcdwatch.
var (
	EtcdMembers = etcdwatch.Members
	// StartEtcdWriter writes under prefix with etcdwatch's default attempt
	// timeout.
	StartEtcdWriter = func(cli *clientv3.Client, prefix string) *etcdwatch.Writer {
		return etcdwatch.StartWriter(cli, prefix, 0)
	}
	StartQuorumWatch = etcdwatch.StartQuorum
)

// PauseHost pauses a whole voter host, as a host that hangs: its kubelet,
// its holdfast-node and its etcd member are SIGSTOPped together (its
// systemd, the double in this process, only answers calls and restarts a
// unit whose process exits, and none does). It returns the resume, which
// continues all three.
func (w *World) PauseHost(ctx context.Context, node string) (func(), error) {
	n := w.Nodes[node]
	if n == nil || n.Host == nil {
		return nil, fmt.Errorf("%s holds no etcd member", node)
	}
	var pods corev1.PodList
	if err := w.Client.List(ctx, &pods, client.InNamespace(cluster.HoldfastNamespace), client.MatchingLabels(nodePluginLabels)); err != nil {
		return nil, err
	}
	plugin := 0
	for _, p := range pods.Items {
		if p.Spec.NodeName != node || p.DeletionTimestamp != nil {
			continue
		}
		pid, err := n.ContainerPID(ctx, p.Namespace, p.Name, "holdfast-node")
		if err != nil {
			return nil, err
		}
		plugin = pid
	}
	pids := []int{n.KubeletPID(), plugin, n.Host.MemberPID()}
	for i, what := range []string{"kubelet", "holdfast-node", "etcd member"} {
		if pids[i] == 0 {
			return nil, fmt.Errorf("no %s runs on %s", what, node)
		}
	}
	var stopped []int
	resume := func() {
		for _, pid := range stopped {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			resume()
			return nil, err
		}
		stopped = append(stopped, pid)
	}
	return resume, nil
}

// WaitProvisioned waits until node's holdfast-node has reported its server
// unit installed (holdfastv1.AnnotationProvisioned "true"), which the webhook
// requires of a swap's incoming node. holdfast-node reports every 30 s, so a
// node back from a cut, or one whose node plugin just started, may not have
// reported yet.
func (w *World) WaitProvisioned(ctx context.Context, node string, within time.Duration) error {
	var last string
	err := cluster.Poll(ctx, within, func() (bool, error) {
		var n corev1.Node
		if err := w.Client.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("%s=%q", holdfastv1.AnnotationProvisioned, n.Annotations[holdfastv1.AnnotationProvisioned])
		return n.Annotations[holdfastv1.AnnotationProvisioned] == "true", nil
	})
	if err != nil {
		return fmt.Errorf("node %s not reported provisioned (%s): %w", node, last, err)
	}
	return nil
}
