package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/holdfast-io/holdfast/test/crihost"
)

// Node is one real node: a network namespace with its own address on the
// control network's bridge and on the field network's, a private mount
// namespace (its own /var/lib and
// /var/log, so the kubelet's and containerd's fixed paths are its own),
// containerd with runc, and a kubelet.
type Node struct {
	Name string
	// IP is the node's address on the control network, its InternalIP
	// and every hostNetwork pod's IP.
	IP string
	// FieldIP is the node's address on the field network (its eth1),
	// where its runtimes' device requests come from.
	FieldIP string
	// Netns is the node's network namespace (ip netns name).
	Netns string
	// Dir holds every file of the node.
	Dir string
	// CRIEndpoint is containerd's socket, reachable from this process.
	CRIEndpoint string

	c          *Cluster
	index      int
	hubLink    string
	fieldLink  string
	cgroupRoot string
	holder     *proc
	mountNS    uint64
	containerd *proc
	kubelet    *proc
	networkUp  bool
	// staticPods: NodeSpec.StaticPods.
	staticPods bool
	// Host is the node's host half for an etcd member (systemd double and
	// member), nil on a node that never hosts one (etcd_nodes.go).
	Host *Host
}

// Paths inside every node's mount namespace, the same on every node as on
// real hosts, so one DaemonSet's host paths fit them all. The node's /var/lib
// is its own (<Dir>/var/lib), so each is also <Dir><path> from this process.
const (
	// NodeHostDir holds what holdfast-node reaches on the host:
	// holdfast/ (its host state), systemd/ (the server unit's drop-ins),
	// db/ (the etcd member's data) and dbus/ (the system bus socket).
	NodeHostDir = "/var/lib/holdfast-host"
	// NodeCRISocket is containerd's socket.
	NodeCRISocket = "/var/lib/hf-containerd/containerd.sock"
)

// HostDir is NodeHostDir of this node, as this process reaches it.
func (n *Node) HostDir() string { return filepath.Join(n.Dir, NodeHostDir) }

// NodeKubernetesDir is a kubeadm host's directory (kubeadm's
// /etc/kubernetes) inside every node: with NodeSpec.StaticPods the kubelet
// runs the static pods in its manifests/. The node's mount namespace
// shares the machine's /etc (only /var/lib and /var/log are its own), so
// it lies under /var/lib: one path on every node, as VoterPolicy
// spec.host.staticPod names it for all.
const NodeKubernetesDir = "/var/lib/kubernetes"

// KubernetesDir is NodeKubernetesDir of this node, as this process reaches
// it. The node sees its files at this path too (Dir is the machine's): a
// manifest's host paths under it, or under NodeKubernetesDir, name the
// same files.
func (n *Node) KubernetesDir() string { return filepath.Join(n.Dir, NodeKubernetesDir) }

// The bridge network of pods that are not hostNetwork: it exists only inside
// the node's network namespace. Its presence makes the node Ready. Each pod's
// default route leads to the bridge (isDefaultGateway), so an in-cluster
// client reaches the kubernetes Service's address (podnet.go).
const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "holdfast-e2e",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "isDefaultGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "{{podcidr}}"}]], "dataDir": "{{dir}}/cni/ipam"}},
    {"type": "loopback"}
  ]
}
`

const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {{ip}}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: {{pki}}/kubelet-{{name}}-serving.crt
tlsPrivateKeyFile: {{pki}}/kubelet-{{name}}-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: {{pki}}/ca.crt}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: {{criendpoint}}
cgroupDriver: cgroupfs
cgroupRoot: {{cgroupRoot}}
failCgroupV1: false
failSwapOn: false
resolvConf: ""
protectKernelDefaults: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
nodeStatusUpdateFrequency: 4s
nodeStatusReportFrequency: 20s
syncFrequency: 10s
fileCheckFrequency: 10s
serializeImagePulls: false
`

// staticPodConfig is the kubelet configuration's addition on a node with
// NodeSpec.StaticPods: kubeadm's staticPodPath, in the node's own
// KubernetesDir.
const staticPodConfig = `staticPodPath: ` + NodeKubernetesDir + `/manifests
`

func (n *Node) replacer() *strings.Replacer {
	return strings.NewReplacer("{{dir}}", n.Dir, "{{criendpoint}}", n.CRIEndpoint, "{{ip}}", n.IP, "{{name}}", n.Name, "{{pki}}", n.c.pki.dir,
		"{{cgroupRoot}}", n.cgroupRoot, "{{podcidr}}", podCIDR(n.index))
}

// startNodes builds the images and starts every node with them, one after
// another: each start is a few seconds and starting them together only
// makes two cores thrash.
func (c *Cluster) startNodes(ctx context.Context, images []Image) error {
	imgDir := filepath.Join(c.Dir, "images")
	if err := os.MkdirAll(imgDir, 0o755); err != nil {
		return err
	}
	c.logf("building images")
	var err error
	if c.images, err = buildImages(c.Root, imgDir, c.bins.K8s, images); err != nil {
		return err
	}
	for _, name := range c.NodeNames {
		c.logf("starting node %s", name)
		if err := c.Nodes[name].start(ctx); err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
	}
	return nil
}

// start brings the node up: namespaces, link, mounts, cgroups, containerd
// with the images, and the kubelet.
func (n *Node) start(ctx context.Context) error {
	dirs := []string{"var/lib/kubelet", "var/lib/cni", "var/log/pods", "var/log/containers", "cni/conf", "cni/ipam", "logs"}
	if n.staticPods {
		dirs = append(dirs, filepath.Join(NodeKubernetesDir, "manifests")[1:])
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o755); err != nil {
			return err
		}
	}
	c := n.c
	if !n.networkUp {
		if err := n.network(); err != nil {
			return err
		}
	}
	// The mount namespace lives as long as its holder, a process that only
	// sleeps; every node process enters it and the holder's network
	// namespace.
	holder, err := startProc(n.Name+"-holder", filepath.Join(n.Dir, "logs", "holder.log"), nil,
		inNetns(n.Netns, "unshare", "--mount", "--propagation", "private", "--", "sleep", "infinity")...)
	if err != nil {
		return err
	}
	n.holder = holder
	host, err := nsInode(os.Getpid(), "mnt")
	if err != nil {
		return err
	}
	if err := Poll(ctx, 10*time.Second, func() (bool, error) {
		if holder.Exited() {
			return false, fmt.Errorf("the namespace holder of %s exited: %s", n.Name, holder.tail(5))
		}
		ino, err := nsInode(holder.PID(), "mnt")
		n.mountNS = ino
		return err == nil && ino != host, nil
	}); err != nil {
		return err
	}
	// The kubelet and containerd write fixed paths under /var/lib and
	// /var/log: the node has its own, and the machine's are never touched.
	// Recursive: a member's node has its member disk mounted below.
	for _, m := range [][2]string{{"var/lib", "/var/lib"}, {"var/log", "/var/log"}} {
		if err := run(n.enter("mount", "--rbind", filepath.Join(n.Dir, m[0]), m[1])...); err != nil {
			return err
		}
	}
	if err := n.makeCgroups(); err != nil {
		return err
	}
	r := n.replacer()
	kubelet := kubeletConfig
	if n.staticPods {
		kubelet += staticPodConfig
	}
	for path, content := range map[string]string{
		filepath.Join(n.Dir, "cni", "conf", "10-holdfast.conflist"): cniConfig,
		filepath.Join(n.Dir, "kubelet.yaml"):                        kubelet,
	} {
		if err := os.WriteFile(path, []byte(r.Replace(content)), 0o644); err != nil {
			return err
		}
	}
	// containerd as test/crihost runs it, inside the node's namespaces.
	argv, env, err := n.containerdConfig().Prepare()
	if err != nil {
		return err
	}
	n.containerd, err = startProc(n.Name+"-containerd", filepath.Join(n.Dir, "logs", "containerd.log"), env, n.enter(argv...)...)
	if err != nil {
		return err
	}
	rt, err := crihost.WaitCRI(ctx, n.CRIEndpoint, 60*time.Second, func() error {
		if n.containerd.Exited() {
			return fmt.Errorf("containerd on %s exited: %s", n.Name, n.containerd.tail(10))
		}
		return nil
	})
	if err != nil {
		return err
	}
	_ = rt.Close(ctx)
	for _, img := range c.images {
		if err := n.Import(img); err != nil {
			return err
		}
	}
	return n.startKubelet()
}

// network makes the node's network namespace: a veth pair from the hub's
// bridge to the node's eth0 and one from the field bridge to its eth1. An
// etcd member on the node (etcd_nodes.go) needs it before the control plane
// starts, so it runs apart from start.
func (n *Node) network() error {
	c := n.c
	if err := run("ip", "netns", "add", n.Netns); err != nil {
		return err
	}
	c.netns = append(c.netns, n.Netns)
	for _, argv := range [][]string{
		{"ip", "-n", c.HubNetns, "link", "add", n.hubLink, "type", "veth", "peer", "name", string(Control), "netns", n.Netns},
		{"ip", "-n", c.HubNetns, "link", "set", n.hubLink, "master", hubBridge, "up"},
		{"ip", "-n", n.Netns, "addr", "add", n.IP + "/24", "dev", string(Control)},
		{"ip", "-n", n.Netns, "link", "set", string(Control), "up"},
		{"ip", "-n", n.Netns, "link", "set", "lo", "up"},
	} {
		if err := run(argv...); err != nil {
			return err
		}
	}
	if err := n.fieldNetwork(); err != nil {
		return err
	}
	n.networkUp = true
	return nil
}

// enter is argv run in the node's network and mount namespaces.
func (n *Node) enter(argv ...string) []string {
	return append([]string{"nsenter", "--target", strconv.Itoa(n.holder.PID()), "--mount", "--net", "--"}, argv...)
}

// containerdConfig is the node's containerd: its files in the directory of
// NodeCRISocket, the e2e CNI plugins and the node's networks.
func (n *Node) containerdConfig() crihost.Config {
	return crihost.Config{Dir: filepath.Join(n.Dir, filepath.Dir(NodeCRISocket)), Bin: n.c.bins.CRI, CNIBin: n.c.bins.CNI,
		CNIConf: filepath.Join(n.Dir, "cni", "conf"), Pause: PauseImage}
}

// Import imports an image tarball into the k8s.io namespace CRI uses.
func (n *Node) Import(tarball string) error {
	return run(filepath.Join(n.c.bins.CRI, "ctr"), "--address", n.containerdConfig().Socket(),
		"--namespace", "k8s.io", "images", "import", tarball)
}

// startKubelet starts the node's kubelet (again, after StopKubelet).
func (n *Node) startKubelet() error {
	var err error
	n.kubelet, err = startProc(n.Name+"-kubelet", filepath.Join(n.Dir, "logs", "kubelet.log"), nil,
		n.enter(n.c.bins.Kubelet,
			"--config", filepath.Join(n.Dir, "kubelet.yaml"),
			"--kubeconfig", n.kubeletKubeconfig(),
			"--hostname-override", n.Name,
			"--node-ip", n.IP,
			// The VM lacks CAP_SYS_RESOURCE: a negative score is EPERM.
			"--oom-score-adj", "0",
			"--v", "1")...)
	return err
}

// StopKubelet stops the kubelet (SIGTERM); its pods keep running, as on a
// host whose kubelet service stopped.
func (n *Node) StopKubelet() { n.kubelet.Stop(15 * time.Second) }

// StartKubelet starts a kubelet stopped by StopKubelet.
func (n *Node) StartKubelet() error {
	if n.kubelet != nil && !n.kubelet.Exited() {
		return fmt.Errorf("the kubelet of %s is running", n.Name)
	}
	return n.startKubelet()
}

// KubeletPID is the kubelet's process ID.
func (n *Node) KubeletPID() int { return n.kubelet.PID() }

// Cut takes both of the node's links down at their bridges: the node loses
// the apiserver, the grantor and its devices at once, as when it loses power
// to its switches. CutLink cuts one.
func (n *Node) Cut() error {
	return errors.Join(n.CutLink(Control), n.CutLink(Field))
}

// Mend brings both links back up.
func (n *Node) Mend() error {
	return errors.Join(n.MendLink(Control), n.MendLink(Field))
}

// InNode is argv as run inside the node's namespaces.
func (n *Node) InNode(argv ...string) []string { return n.enter(argv...) }

// stop stops the kubelet, every pod, containerd and whatever they left, then
// the holder (so the mount namespace and every mount in it go), the
// cgroups and the network namespace.
func (n *Node) stop() []error {
	var errs []error
	n.kubelet.Stop(15 * time.Second)
	if n.containerd != nil && !n.containerd.Exited() {
		n.removeSandboxes()
	}
	n.containerd.Stop(15 * time.Second)
	// Shims and containers outlive containerd by design: stop each by PID,
	// found by the node's cgroups and mount namespace.
	for _, pid := range n.cgroupPIDs() {
		killPID(pid)
	}
	if n.mountNS != 0 {
		for _, pid := range pidsInMountNS(n.mountNS) {
			if n.holder != nil && pid == n.holder.PID() {
				continue
			}
			killPID(pid)
		}
	}
	n.holder.Stop(5 * time.Second)
	if err := n.removeCgroups(); err != nil {
		errs = append(errs, err)
	}
	return errs
}

func (n *Node) removeSandboxes() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rt, err := remote.NewRemoteRuntimeService(ctx, n.CRIEndpoint, 10*time.Second, noop.NewTracerProvider(), false)
	if err != nil {
		return
	}
	defer rt.Close(ctx)
	sbs, err := rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{})
	if err != nil {
		return
	}
	for _, sb := range sbs {
		_ = rt.StopPodSandbox(ctx, sb.Id)
		_ = rt.RemovePodSandbox(ctx, sb.Id)
	}
}

// cgroupMounts lists the mounted cgroup hierarchies: the v1 ones and, on a
// hybrid host, the unified one (runc creates the containers' cgroups there
// too).
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && (fields[i+1] == "cgroup" || fields[i+1] == "cgroup2") {
				out = append(out, fields[4])
			}
		}
	}
	return out, s.Err()
}

// makeCgroups creates the node's cgroup root in every v1 hierarchy (the
// kubelet's --cgroup-root must exist), so two kubelets never share
// kubepods.
func (n *Node) makeCgroups() error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, m := range mounts {
		dir := filepath.Join(m, n.cgroupRoot)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			return err
		}
		n.c.cgroups = append(n.c.cgroups, dir)
		// A new cpuset starts with no CPUs and no memory nodes.
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if b, err := os.ReadFile(filepath.Join(m, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// cgroupPIDs lists every process in the node's cgroups.
func (n *Node) cgroupPIDs() []int {
	seen := map[int]bool{}
	mounts, _ := cgroupMounts()
	for _, m := range mounts {
		_ = filepath.WalkDir(filepath.Join(m, n.cgroupRoot), func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, l := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(l); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	var out []int
	for p := range seen {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}

// removeCgroups removes the node's cgroups in every hierarchy.
func (n *Node) removeCgroups() error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	var firstErr error
	for _, m := range mounts {
		if err := removeCgroupTree(filepath.Join(m, n.cgroupRoot)); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// ContainerPID is the host PID of a running container of a pod on this
// node, read from containerd (CRI) as the kubelet sees it.
func (n *Node) ContainerPID(ctx context.Context, namespace, pod, container string) (int, error) {
	pid := 0
	err := n.runningContainers(ctx, namespace, pod, container, func(rt internalapi.RuntimeService, cs []*runtimeapi.Container) error {
		if len(cs) != 1 {
			return fmt.Errorf("%d running containers %s in %s/%s on %s", len(cs), container, namespace, pod, n.Name)
		}
		st, err := rt.ContainerStatus(ctx, cs[0].Id, true)
		if err != nil {
			return err
		}
		var info struct {
			Pid int `json:"pid"`
		}
		if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil {
			return err
		}
		if info.Pid == 0 {
			return fmt.Errorf("container %s has no pid", cs[0].Id)
		}
		pid = info.Pid
		return nil
	})
	return pid, err
}

// RunningContainers counts the node's running containers named container
// in pod namespace/pod, as its CRI reports them.
func (n *Node) RunningContainers(ctx context.Context, namespace, pod, container string) (int, error) {
	count := 0
	err := n.runningContainers(ctx, namespace, pod, container, func(_ internalapi.RuntimeService, cs []*runtimeapi.Container) error {
		count = len(cs)
		return nil
	})
	return count, err
}

// runningContainers hands fn the node's running containers named container
// in pod namespace/pod, with the CRI connection they were listed on.
func (n *Node) runningContainers(ctx context.Context, namespace, pod, container string, fn func(internalapi.RuntimeService, []*runtimeapi.Container) error) error {
	rt, err := remote.NewRemoteRuntimeService(ctx, n.CRIEndpoint, 10*time.Second, noop.NewTracerProvider(), false)
	if err != nil {
		return err
	}
	defer rt.Close(ctx)
	cs, err := rt.ListContainers(ctx, &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{
			"io.kubernetes.pod.namespace": namespace, "io.kubernetes.pod.name": pod, "io.kubernetes.container.name": container,
		},
	})
	if err != nil {
		return err
	}
	return fn(rt, cs)
}
