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

// NodePlugin is holdfast-node on one node: a pod on the node's real kubelet
// (host network, its CRI socket, host directory and systemd drop-in
// directory mounted from the node), and the systemd it talks to. These
// machines have no systemd (PID 1 is not systemd), so each node's systemd
// is test/dbusdouble's Manager on a private dbus-daemon whose socket the
// pod mounts: holdfast-node's own D-Bus code runs unchanged.
type NodePlugin struct {
	Node string
	// Pod is the plugin's pod in the release namespace.
	Pod     string
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

// startNodePlugins runs holdfast-node on every node and waits until each
// is ready.
func (w *World) startNodePlugins(ctx context.Context) error {
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
	} {
		if err := w.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	owner, err := nodePluginDaemonSet(ctx, w.Client)
	if err != nil {
		return err
	}
	for _, name := range w.NodeNames {
		n := w.Nodes[name]
		p := &NodePlugin{Node: name, Pod: "holdfast-node-" + name}
		w.NodePlugins = append(w.NodePlugins, p)
		dir := filepath.Join(n.Dir, "host")
		busDir := filepath.Join(dir, "dbus")
		for _, d := range []string{busDir, filepath.Join(dir, "holdfast"), filepath.Join(dir, "systemd"), filepath.Join(dir, "db")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		var err error
		// The etcd member's placeholder on a node that holds none.
		etcdLocal := "http://127.0.0.1:2379"
		if n.Host != nil {
			p.bus, p.systemd, p.hostOwned = n.Host.Bus, n.Host.Systemd, true
			etcdLocal = n.Host.ClientURL
		} else {
			if p.bus, err = dbusdouble.StartBus(busDir); err != nil {
				return fmt.Errorf("node %s: dbus-daemon: %w", name, err)
			}
			if p.systemd, err = dbusdouble.Serve(p.bus, dbusdouble.Config{DropInDir: filepath.Join(dir, "systemd"),
				Units: []dbusdouble.Unit{{Name: serverUnit}, {Name: agentUnit, Enabled: true, Active: true}}}); err != nil {
				return fmt.Errorf("node %s: systemd double: %w", name, err)
			}
		}
		pod := nodePluginPod(p.Pod, name, n.IP, dir, busDir, p.bus.Address, n.CRIEndpoint, etcdLocal)
		pod.OwnerReferences = owner
		if err := w.Client.Create(ctx, pod); err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
	}
	for _, p := range w.NodePlugins {
		var pod corev1.Pod
		err := cluster.Poll(ctx, 2*time.Minute, func() (bool, error) {
			if err := w.Client.Get(ctx, client.ObjectKey{Namespace: cluster.HoldfastNamespace, Name: p.Pod}, &pod); err != nil {
				return false, nil
			}
			return podReady(&pod), nil
		})
		if err != nil {
			return fmt.Errorf("holdfast-node on %s not ready: phase %s %+v: %w", p.Node, pod.Status.Phase, pod.Status.ContainerStatuses, err)
		}
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

// nodePluginPod is the DaemonSet's pod for one node, named to it (there is
// no DaemonSet controller without a kube-controller-manager).
func nodePluginPod(name, node, ip, hostDir, busDir, busAddr, criEndpoint, etcdLocal string) *corev1.Pod {
	hostPath := func(n, path string) corev1.Volume {
		return corev1.Volume{Name: n, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}}
	}
	criSocket := criEndpoint[len("unix://"):]
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HoldfastNamespace, Name: name,
			Labels: map[string]string{"app.kubernetes.io/name": "holdfast-node"}},
		Spec: corev1.PodSpec{
			NodeName:           node,
			HostNetwork:        true,
			ServiceAccountName: nodePluginSA,
			Tolerations:        []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name:            "holdfast-node",
				Image:           NodePluginImage,
				ImagePullPolicy: corev1.PullNever,
				Args: []string{
					"--node-name=$(NODE_NAME)",
					"--host-dir=/var/lib/holdfast",
					"--systemd-dir=/etc/systemd/system",
					"--member-data-dir=/var/lib/holdfast-db/db",
					"--server-unit=" + serverUnit, "--agent-unit=" + agentUnit,
					"--cri-endpoint=unix:///run/containerd/containerd.sock",
					"--systemd-bus-address=" + busAddr,
					"--etcd-local-endpoint=" + etcdLocal,
					fmt.Sprintf("--health-probe-bind-address=%s:%d", ip, nodePluginProbePort),
					"--metrics-bind-address=0",
				},
				Env: []corev1.EnvVar{
					{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
					// No kube-proxy: the kubernetes Service's address
					// routes nowhere, so in-cluster config names the
					// apiserver itself.
					{Name: "KUBERNETES_SERVICE_HOST", Value: cluster.HubIP},
					{Name: "KUBERNETES_SERVICE_PORT", Value: fmt.Sprint(cluster.APIServerPort)},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "host", MountPath: "/var/lib/holdfast"},
					{Name: "systemd", MountPath: "/etc/systemd/system"},
					{Name: "db", MountPath: "/var/lib/holdfast-db"},
					{Name: "dbus", MountPath: busDir},
					{Name: "cri", MountPath: "/run/containerd/containerd.sock"},
				},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: "/readyz", Port: intstr.FromInt32(nodePluginProbePort)}}, PeriodSeconds: 2},
			}},
			Volumes: []corev1.Volume{
				hostPath("host", filepath.Join(hostDir, "holdfast")),
				hostPath("systemd", filepath.Join(hostDir, "systemd")),
				hostPath("db", filepath.Join(hostDir, "db")),
				hostPath("dbus", busDir),
				hostPath("cri", criSocket),
			},
		},
	}
}

// FenceActions reads holdfast-node's fence audit on a node (one line per
// stop it carried out), as an operator would on the host.
func (w *World) FenceActions(node string) ([]fence.Action, error) {
	n, ok := w.Nodes[node]
	if !ok {
		return nil, fmt.Errorf("no node %s", node)
	}
	b, err := os.ReadFile(filepath.Join(n.Dir, "host", "holdfast", "fence-audit.jsonl"))
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

// nodePluginDaemonSet creates holdfast-node's DaemonSet as the chart does
// and returns the owner reference its pods carry. There is no DaemonSet
// controller here (no kube-controller-manager), so the pods are made one per
// node by startNodePlugins; owned by the DaemonSet, they are what a drain
// leaves alone (the voter controller drains a swap's nodes).
func nodePluginDaemonSet(ctx context.Context, c client.Client) ([]metav1.OwnerReference, error) {
	labels := map[string]string{"app.kubernetes.io/name": "holdfast-node"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HoldfastNamespace, Name: "holdfast-node"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "holdfast-node", Image: NodePluginImage}}}}}}
	if err := c.Create(ctx, ds); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(ds), ds); err != nil {
			return nil, err
		}
	}
	return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID,
		Controller: new(true), BlockOwnerDeletion: new(true)}}, nil
}
