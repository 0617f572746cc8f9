package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/holdfast-io/holdfast/node-plugin/fence"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/test/cluster"
	"github.com/holdfast-io/holdfast/test/dbusdouble"
)

// NodePluginImage is holdfast-node's image on every node.
const NodePluginImage = "holdfast.test/holdfast-node:e2e"

const (
	nodePluginSA        = "holdfast-node"
	nodePluginProbePort = 8096
	serverUnit          = "k3s.service"
	agentUnit           = "k3s-agent.service"
)

// NodePlugin is holdfast-node's host half on one node: the systemd its pod
// talks to. These machines have no systemd (PID 1 is not systemd), so each
// node's systemd is test/dbusdouble's Manager on a private dbus-daemon whose
// socket lies in the node's host directory (cluster.NodeHostDir/dbus),
// where the DaemonSet's pod mounts it: holdfast-node's own D-Bus code runs
// unchanged.
type NodePlugin struct {
	Node    string
	bus     *dbusdouble.Bus
	systemd *dbusdouble.Manager
	// hostOwned: the node's host half (an etcd member's node) owns bus
	// and systemd, and the cluster stops them after the apiserver.
	hostOwned bool
}

func (p *NodePlugin) close() {
	if p.hostOwned {
		return
	}
	if p.systemd != nil {
		p.systemd.Close()
	}
	if p.bus != nil {
		p.bus.Close()
	}
}

// memberDataDir is the etcd member's data directory inside every node, and
// inside holdfast-node's pod (its parent is mounted at the same path, as the
// chart's node.memberDataParent).
var memberDataDir = filepath.Join(cluster.NodeHostDir, "db", "db")

// nodePluginHostDir is holdfast-node's --host-dir inside every node and
// inside its pod.
var nodePluginHostDir = filepath.Join(cluster.NodeHostDir, "holdfast")

// busSocket is the system bus socket inside every node (dbusdouble's
// socket in cluster.NodeHostDir/dbus).
var busSocket = filepath.Join(cluster.NodeHostDir, "dbus", "bus.sock")

// startNodePlugins gives every node its systemd, then runs holdfast-node as
// a DaemonSet (host network, the node's CRI socket, host directory and
// systemd drop-in directory mounted; with kubeadm, the kubeadm directory)
// and waits until its pod on each node is ready.
func (w *World) startNodePlugins(ctx context.Context, kubeadm bool) error {
	if err := w.startNodeHosts(); err != nil {
		return err
	}
	if err := w.EnsureNamespace(ctx, cluster.HoldfastNamespace); err != nil {
		return err
	}
	// The chart's RBAC for holdfast-node is not written yet (issue 9);
	// until then its service account is a cluster administrator here.
	for _, obj := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HoldfastNamespace, Name: nodePluginSA}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "holdfast-node-e2e"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: cluster.HoldfastNamespace, Name: nodePluginSA}}},
		nodePluginDaemonSet(kubeadm),
	} {
		if err := w.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return w.WaitNodePlugins(ctx, 2*time.Minute)
}

// startNodeHosts gives every node the host half holdfast-node talks to: its
// host directory and its systemd (the etcd member's node has its own).
func (w *World) startNodeHosts() error {
	for _, name := range w.NodeNames {
		n := w.Nodes[name]
		p := &NodePlugin{Node: name}
		w.NodePlugins = append(w.NodePlugins, p)
		dir := n.HostDir()
		busDir := filepath.Join(dir, "dbus")
		for _, d := range []string{busDir, filepath.Join(dir, "holdfast"), filepath.Join(dir, "systemd"), filepath.Join(dir, "db")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		if n.Host != nil && n.Host.Systemd != nil {
			p.bus, p.systemd, p.hostOwned = n.Host.Bus, n.Host.Systemd, true
			continue
		}
		var err error
		if p.bus, err = dbusdouble.StartBus(busDir); err != nil {
			return fmt.Errorf("node %s: dbus-daemon: %w", name, err)
		}
		if p.systemd, err = dbusdouble.Serve(p.bus, dbusdouble.Config{DropInDir: filepath.Join(dir, "systemd"),
			Units: []dbusdouble.Unit{{Name: serverUnit}, {Name: agentUnit, Enabled: true, Active: true}}}); err != nil {
			return fmt.Errorf("node %s: systemd double: %w", name, err)
		}
	}
	return nil
}

// WaitNodePlugins waits until holdfast-node's DaemonSet has a ready pod on
// every node.
func (w *World) WaitNodePlugins(ctx context.Context, timeout time.Duration) error {
	labels := nodePluginLabels
	if w.install == Chart {
		labels = map[string]string{"app.kubernetes.io/component": "node"}
	}
	var last string
	err := cluster.Poll(ctx, timeout, func() (bool, error) {
		var pods corev1.PodList
		if err := w.Client.List(ctx, &pods, client.InNamespace(cluster.HoldfastNamespace), client.MatchingLabels(labels)); err != nil {
			last = err.Error()
			return false, nil
		}
		ready := map[string]bool{}
		var states []string
		for i := range pods.Items {
			p := &pods.Items[i]
			if podReady(p) && p.DeletionTimestamp.IsZero() {
				ready[p.Spec.NodeName] = true
			}
			states = append(states, fmt.Sprintf("%s on %s: %s ready=%v", p.Name, p.Spec.NodeName, p.Status.Phase, podReady(p)))
		}
		last = strings.Join(states, "; ")
		for _, n := range w.NodeNames {
			if !ready[n] {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		var logs []string
		var pods corev1.PodList
		if w.Client.List(ctx, &pods, client.InNamespace(cluster.HoldfastNamespace), client.MatchingLabels(labels)) == nil {
			for _, p := range pods.Items {
				if !podReady(&p) {
					logs = append(logs, fmt.Sprintf("%s log:\n%s", p.Name, w.podLogTail(ctx, p, 10)))
				}
			}
		}
		return fmt.Errorf("holdfast-node not ready on every node (%s): %w\n%s", last, err, strings.Join(logs, "\n"))
	}
	return nil
}

func (w *World) stopNodePlugins() {
	for _, p := range w.NodePlugins {
		p.close()
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

var nodePluginLabels = map[string]string{"app.kubernetes.io/name": "holdfast-node"}

// nodePluginDaemonSet is holdfast-node's DaemonSet as the chart renders it,
// with the host paths of these nodes (cluster.NodeHostDir,
// cluster.NodeCRISocket) and the systemd double's unit names; with
// kubeadm, the kubeadm directory read-write at its own path, as the chart
// mounts node.staticPod's directories.
func nodePluginDaemonSet(kubeadm bool) *appsv1.DaemonSet {
	hostPath := func(n, path string) corev1.Volume {
		return corev1.Volume{Name: n, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}}
	}
	busDir := filepath.Dir(busSocket)
	pod := corev1.PodSpec{
		HostNetwork:        true,
		DNSPolicy:          corev1.DNSClusterFirstWithHostNet,
		ServiceAccountName: nodePluginSA,
		Tolerations:        []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		Containers: []corev1.Container{{
			Name:            "holdfast-node",
			Image:           NodePluginImage,
			ImagePullPolicy: corev1.PullNever,
			Args: []string{
				"--node-name=$(NODE_NAME)",
				// At the node's own path, as the chart mounts it: the
				// server's start condition runs the copy holdfast-node
				// puts there, on the host.
				"--host-dir=" + nodePluginHostDir,
				"--systemd-dir=/etc/systemd/system",
				"--member-data-dir=" + memberDataDir,
				"--server-unit=" + serverUnit, "--agent-unit=" + agentUnit,
				"--cri-endpoint=unix:///run/containerd/containerd.sock",
				"--systemd-bus-address=unix:path=" + busSocket,
				"--etcd-local-endpoint=" + cluster.LocalEtcdURL,
				// Fitness probed well within the shortest fitness window
				// (60 s), as a drill judges a voter over it.
				"--report-interval=5s", "--fitness-interval=10s",
				fmt.Sprintf("--health-probe-bind-address=:%d", nodePluginProbePort),
				"--metrics-bind-address=0",
			},
			Env: []corev1.EnvVar{
				{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
			},
			VolumeMounts: []corev1.VolumeMount{
				{Name: "host", MountPath: nodePluginHostDir},
				{Name: "systemd", MountPath: "/etc/systemd/system"},
				{Name: "db", MountPath: filepath.Dir(memberDataDir)},
				{Name: "dbus", MountPath: busDir},
				{Name: "cri", MountPath: "/run/containerd/containerd.sock"},
			},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/readyz", Port: intstr.FromInt32(nodePluginProbePort)}}, PeriodSeconds: 2},
		}},
		Volumes: []corev1.Volume{
			hostPath("host", nodePluginHostDir),
			hostPath("systemd", filepath.Join(cluster.NodeHostDir, "systemd")),
			hostPath("db", filepath.Join(cluster.NodeHostDir, "db")),
			hostPath("dbus", busDir),
			hostPath("cri", cluster.NodeCRISocket),
		},
	}
	if kubeadm {
		ct := &pod.Containers[0]
		// The kubelet's kubeconfig in the kubeadm directory, as the chart
		// passes node.kubeletKubeconfig.
		ct.Args = append(ct.Args, "--kubelet-kubeconfig="+cluster.NodeKubeletKubeconfig)
		ct.VolumeMounts = append(ct.VolumeMounts, corev1.VolumeMount{Name: "kubernetes", MountPath: cluster.NodeKubernetesDir})
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: "kubernetes", VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: cluster.NodeKubernetesDir, Type: new(corev1.HostPathDirectoryOrCreate)}}})
	}
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HoldfastNamespace, Name: "holdfast-node"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: nodePluginLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: nodePluginLabels}, Spec: pod}}}
}

// FenceActions reads holdfast-node's fence audit on a node (one line per
// stop it carried out), as an operator would on the host.
func (w *World) FenceActions(node string) ([]fence.Action, error) {
	n, ok := w.Nodes[node]
	if !ok {
		return nil, fmt.Errorf("no node %s", node)
	}
	b, err := os.ReadFile(filepath.Join(n.HostDir(), "holdfast", hoststate.FenceAuditDir, "fence-audit.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []fence.Action
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var a fence.Action
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			return out, fmt.Errorf("fence audit of %s: %w: %q", node, err, line)
		}
		out = append(out, a)
	}
	return out, nil
}
