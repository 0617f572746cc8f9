// Package cluster runs a real Kubernetes cluster on one machine for the
// end-to-end drills and the demo: etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler (kube.go) and, per node,
// containerd with runc and a real kubelet v1.37.2 (make k8s-bin cri-bin
// cni-bin), with holdfast's components started as processes beside them.
//
// Every part lives in network namespaces the cluster creates, in a plant's
// topology of two networks that nothing routes between:
//   - the control network: a hub namespace with a bridge holds the control
//     plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
//     holdfast-webhook and holdfast-scheduler when they run as processes)
//     and the MQTT broker a drill starts (test/e2e/scenario); each
//     holdfast-controller process runs on a control host of its own on the
//     same bridge (controlhost.go), and the nodes route their pods' subnets
//     to one another over it (podnet.go);
//   - the field network: a namespace with a bridge of its own holds the
//     plant, the device simulators (field.go).
//
// Each node is its own network namespace with a veth to each bridge (eth0 on
// the control network, eth1 on the field network) and a private mount
// namespace. A node reaches its devices only over its field link, so the
// control link and the field link fail independently (Node.CutLink,
// Node.DropOn, faults.go): a node cut from the control plane keeps its
// devices, which is the partition the control lease exists for.
//
// The MQTT broker stays on the control side: telemetry is the operators'
// view of a unit (SCADA and historians sit on the control network), it
// writes nothing to the field, and a control cut then shows what an
// operator sees of a cut node, its last will and then silence.
//
// Nothing is added to the machine's own network namespace: this process
// reaches the cluster with DialContextIn (Dial picks the field network's
// namespace for a field address, the hub's for any other), so no test
// traffic can leave the machine. Stop stops every process by its own
// PID, removes the namespaces (and with them every mount the nodes made)
// and the cgroups, restores the kernel settings the kubelet changed, and
// reports anything left behind.
//
// It needs root.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/testenv"
)

const (
	// HubIP is the hub's address on the cluster bridge: the apiserver, the
	// webhook and the plant listen here. Addresses exist only inside the
	// cluster's own namespaces, so two clusters on one machine do not
	// collide.
	HubIP     = "198.18.0.1"
	hubBridge = "hfbr0"
	// APIServerPort is the apiserver's secure port on HubIP.
	APIServerPort = 6443
	// ServiceCIDR is only an allocation range: nothing routes to it (there
	// is no kube-proxy); pods reach the apiserver at HubIP.
	ServiceCIDR = "198.19.255.0/24"
)

// The kernel settings the kubelet changes on start; Stop puts back what it
// found.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// NodeSpec is one node to start.
type NodeSpec struct {
	Name   string
	Labels map[string]string
	// Etcd is the node's etcd role at start: "" (none), EtcdVoter or
	// EtcdStandby (etcd_nodes.go). With any voter, the control plane's
	// etcd runs on the nodes instead of the hub.
	Etcd string
	// StaticPods gives the kubelet kubeadm's static pod path: it runs the
	// manifests in Node.KubernetesDir()/manifests (node.go).
	StaticPods bool
}

// Config says what to start.
type Config struct {
	Nodes []NodeSpec
	// Images are built from this module (or make k8s-bin's binaries) and
	// imported into every node.
	Images []Image
	// EtcdMembers is the control plane's etcd member count (default 1).
	EtcdMembers int
	// EvictionSeconds is how long pods without a toleration of their own
	// stay on a NotReady or unreachable node before eviction (the
	// apiserver's --default-*-toleration-seconds; default
	// DefaultEvictionSeconds).
	EvictionSeconds int
	// Logf reports progress (default: nothing).
	Logf func(format string, args ...any)
}

// Binaries are the directories the cluster's programs come from.
type Binaries struct {
	// K8s holds kube-apiserver, kube-controller-manager, kube-scheduler,
	// kubectl and etcd (make k8s-bin).
	K8s string
	// Kubelet is the kubelet binary (make k8s-bin builds it into K8s in
	// the same go build; HOLDFAST_KUBELET names another).
	Kubelet string
	// CRI holds containerd, its shim, ctr and runc (make cri-bin).
	CRI string
	// CNI holds the CNI plugins (make cni-bin).
	CNI string
}

// Cluster is a running cluster.
type Cluster struct {
	// ID names the cluster's namespaces: hfe-<ID>-hub, hfe-<ID>-<node>.
	ID string
	// Dir holds every file of the cluster.
	Dir string
	// HubNetns is the hub's network namespace (the control network).
	HubNetns string
	// FieldNetns is the field network's namespace, where the devices are.
	FieldNetns string
	// Kubeconfig is an administrator's kubeconfig (system:masters); run
	// kubectl with it inside the hub (Kubectl does).
	Kubeconfig string
	// Config reaches the apiserver as an administrator from this process.
	Config *rest.Config
	// Client is a controller-runtime client with holdfast's kinds.
	Client client.Client
	Scheme *runtime.Scheme
	// Nodes by name, in start order in NodeNames.
	Nodes     map[string]*Node
	NodeNames []string
	Root      string
	// EvictionSeconds is how long a pod without a toleration of its own
	// stays on a NotReady or unreachable node (Config.EvictionSeconds).
	EvictionSeconds int

	bins     Binaries
	pki      *pki
	hosts    map[string]*ControlHost
	logf     func(string, ...any)
	mu       sync.Mutex
	procs    []*proc // control plane and components, in start order
	netns    []string
	cgroups  []string
	sysctls  map[string]string
	images   []string
	stopped  bool
	binaries map[string]string

	// The apiserver and its argv, for RestartAPIServer.
	apiserver     *Process
	apiserverArgv []string

	// The lease CA directory (LeaseCADir), made once.
	leaseCAOnce sync.Once
	leaseCA     string
	leaseCAErr  error

	// The etcd CA of kubeadm hosts (kubeadm.go), made once.
	etcdCACert, etcdCAKey []byte
}

// FindBinaries locates the built binaries under the repository's bin/.
func FindBinaries(root string) (Binaries, error) {
	ver, err := testenv.KubernetesVersion(root)
	if err != nil {
		return Binaries{}, err
	}
	b := Binaries{
		K8s:     filepath.Join(root, "bin", "k8s", ver),
		Kubelet: filepath.Join(root, "bin", "k8s", ver, "kubelet"),
		CRI:     filepath.Join(root, "bin", "cri", "current"),
		CNI:     filepath.Join(root, "bin", "cni", "v1.10.0"),
	}
	if d := os.Getenv("HOLDFAST_CRI_BIN"); d != "" {
		b.CRI = d
	}
	if f := os.Getenv("HOLDFAST_KUBELET"); f != "" {
		b.Kubelet = f
	}
	if _, err := os.Stat(b.Kubelet); err != nil {
		return b, fmt.Errorf("%s missing: run make k8s-bin (or set HOLDFAST_KUBELET): %w", b.Kubelet, err)
	}
	for dir, files := range map[string][]string{
		b.K8s: {"kube-apiserver", "etcd", "kubectl", "kube-controller-manager", "kube-scheduler"},
		b.CRI: {"containerd", "containerd-shim-runc-v2", "ctr", "runc"},
		b.CNI: {"bridge", "host-local", "loopback"},
	} {
		for _, f := range files {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				return b, fmt.Errorf("%s missing: run make k8s-bin cri-bin cni-bin: %w", filepath.Join(dir, f), err)
			}
		}
	}
	return b, nil
}

// Start starts the cluster and waits until every node is Ready. On error
// everything started is stopped again.
func Start(ctx context.Context, cfg Config) (c *Cluster, err error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	bins, err := FindBinaries(root)
	if err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("the e2e cluster needs root (network and mount namespaces, cgroups)")
	}
	idb := make([]byte, 3)
	_, _ = rand.Read(idb)
	// Short paths: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "hfe-")
	if err != nil {
		return nil, err
	}
	c = &Cluster{ID: hex.EncodeToString(idb), Dir: dir, Root: root, bins: bins, Nodes: map[string]*Node{},
		logf: cfg.Logf, sysctls: map[string]string{}}
	if c.logf == nil {
		c.logf = func(string, ...any) {}
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	if reaped := ReapOrphans(); len(reaped) > 0 {
		c.logf("cleaned up after clusters whose process died: %v", reaped)
	}
	c.HubNetns = "hfe-" + c.ID + "-hub"
	c.FieldNetns = "hfe-" + c.ID + "-field"
	defer func() {
		if err != nil {
			if serr := c.Stop(); serr != nil {
				err = errors.Join(err, serr)
			}
			c = nil
		}
	}()
	for _, s := range kubeletSysctls {
		b, err := os.ReadFile(filepath.Join("/proc/sys", s))
		if err == nil {
			c.sysctls[s] = strings.TrimSpace(string(b))
		}
	}
	if err := c.writeState(); err != nil {
		return c, err
	}
	if err := c.startHub(); err != nil {
		return c, err
	}
	if err := c.startField(); err != nil {
		return c, err
	}
	if c.pki, err = newPKI(filepath.Join(dir, "pki")); err != nil {
		return c, err
	}
	for i, spec := range cfg.Nodes {
		n := &Node{Name: spec.Name, IP: fmt.Sprintf("198.18.0.%d", 11+i), FieldIP: fmt.Sprintf("%s%d", fieldPrefix, 11+i),
			Netns: "hfe-" + c.ID + "-" + spec.Name,
			Dir:   filepath.Join(dir, spec.Name), c: c, index: i + 1, hubLink: fmt.Sprintf("n%d", i+1), fieldLink: fieldLinkName(i + 1),
			cgroupRoot: "/hfe-" + c.ID + "-" + spec.Name, staticPods: spec.StaticPods}
		n.CRIEndpoint = n.containerdConfig().Endpoint()
		c.Nodes[spec.Name] = n
		c.NodeNames = append(c.NodeNames, spec.Name)
		if err := c.nodeCredentials(n); err != nil {
			return c, err
		}
	}
	if err := c.startEtcdHosts(cfg.Nodes); err != nil {
		return c, err
	}
	// Static pod members run under their nodes' kubelets: the nodes start
	// before the apiserver, as kubeadm init's kubelet runs etcd before it.
	kubeletsFirst := staticPodVoters(cfg.Nodes)
	if kubeletsFirst {
		if err := c.startNodes(ctx, cfg.Images); err != nil {
			return c, err
		}
	}
	if err := c.waitEtcd(ctx); err != nil {
		return c, err
	}
	if err := c.startControlPlane(ctx, cfg.EtcdMembers, cfg.EvictionSeconds); err != nil {
		return c, err
	}
	if !kubeletsFirst {
		if err := c.startNodes(ctx, cfg.Images); err != nil {
			return c, err
		}
	}
	if err := c.podNetwork(); err != nil {
		return c, err
	}
	for i, spec := range cfg.Nodes {
		n := c.Nodes[spec.Name]
		if err := c.waitNodeReady(ctx, n, 3*time.Minute); err != nil {
			return c, err
		}
		if len(cfg.Nodes[i].Labels) > 0 {
			if err := c.LabelNode(ctx, n.Name, spec.Labels); err != nil {
				return c, err
			}
		}
	}
	c.logf("cluster %s up: %d nodes", c.ID, len(cfg.Nodes))
	return c, nil
}

func (c *Cluster) startHub() error {
	if existingNetns()[c.HubNetns] {
		return fmt.Errorf("network namespace %s exists", c.HubNetns)
	}
	if err := run("ip", "netns", "add", c.HubNetns); err != nil {
		return err
	}
	c.netns = append(c.netns, c.HubNetns)
	for _, argv := range [][]string{
		{"ip", "-n", c.HubNetns, "link", "set", "lo", "up"},
		{"ip", "-n", c.HubNetns, "link", "add", hubBridge, "type", "bridge"},
		{"ip", "-n", c.HubNetns, "addr", "add", HubIP + "/24", "dev", hubBridge},
		{"ip", "-n", c.HubNetns, "link", "set", hubBridge, "up"},
	} {
		if err := run(argv...); err != nil {
			return err
		}
	}
	return nil
}

// Dial dials an address from inside the cluster: a field address from the
// field network's namespace (a device), any other from the hub's.
func (c *Cluster) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ns := c.HubNetns
	if inField(addr) {
		ns = c.FieldNetns
	}
	return DialContextIn(netnsPath(ns))(ctx, network, addr)
}

// ListenInHub listens on addr inside the hub (HubIP is reachable from every
// node): a server of this process, an MQTT broker for one, serves the nodes.
func (c *Cluster) ListenInHub(network, addr string) (net.Listener, error) {
	return ListenIn(netnsPath(c.HubNetns), network, addr)
}

// HTTPClient is a plain HTTP client whose connections start in the hub.
func (c *Cluster) HTTPClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: c.Dial, DisableKeepAlives: true}}
}

// UserKubeconfig writes a kubeconfig for a user in groups and returns its
// path; holdfast's components run as their service-account user names.
func (c *Cluster) UserKubeconfig(file, user string, groups ...string) (string, error) {
	p, err := c.pki.issue(file, user, groups)
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.Dir, file+".kubeconfig")
	return path, writeKubeconfig(path, fmt.Sprintf("https://%s:%d", HubIP, APIServerPort), c.pki.CAFile, p)
}

// ServingCert issues a serving certificate for hosts; CAFile checks it.
func (c *Cluster) ServingCert(name string, hosts ...string) (cert, key string, err error) {
	p, err := c.pki.issue(name, name, nil, hosts...)
	return p.Cert, p.Key, err
}

// CAFile is the cluster CA certificate.
func (c *Cluster) CAFile() string { return c.pki.CAFile }

func (c *Cluster) nodeCredentials(n *Node) error {
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		return err
	}
	client, err := c.pki.issue("kubelet-"+n.Name, "system:node:"+n.Name, []string{"system:nodes"})
	if err != nil {
		return err
	}
	if _, err := c.pki.issue("kubelet-"+n.Name+"-serving", "system:node:"+n.Name, []string{"system:nodes"}, n.IP, n.Name); err != nil {
		return err
	}
	path := n.kubeletKubeconfig()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return writeKubeconfig(path, fmt.Sprintf("https://%s:%d", HubIP, APIServerPort), c.pki.CAFile, client)
}

// kubeletKubeconfig is the kubelet's kubeconfig as this process reaches
// it: on a kubeadm host kubeadm's kubelet.conf (Kubeadm.KubeletKubeconfig),
// which holdfast-node's StaticPod actuator reads. Its server is the hub's
// apiserver, as a kubelet's is the control-plane endpoint once it may
// outlive its own node's kube-apiserver (docs/operations.md).
func (n *Node) kubeletKubeconfig() string {
	if n.staticPods {
		k := n.KubeadmLayout()
		return k.Local(k.KubeletKubeconfig)
	}
	return filepath.Join(n.Dir, "kubeconfig")
}

func (c *Cluster) restConfig(kubeconfig string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.Dial = c.Dial
	cfg.QPS, cfg.Burst = 100, 200
	return cfg, nil
}

// RESTConfigFor is a rest.Config for a kubeconfig this cluster wrote, dialing
// through the hub.
func (c *Cluster) RESTConfigFor(kubeconfig string) (*rest.Config, error) {
	return c.restConfig(kubeconfig)
}

func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, holdfastv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (c *Cluster) installCRDs() error {
	_, err := envtest.InstallCRDs(c.Config, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join(c.Root, "charts", "holdfast", "files", "crds")}, ErrorIfPathMissing: true,
		MaxTime: 60 * time.Second,
	})
	return err
}

// LabelNode merges labels into a node's labels.
func (c *Cluster) LabelNode(ctx context.Context, name string, labels map[string]string) error {
	var n corev1.Node
	if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
		return err
	}
	patch := client.MergeFrom(n.DeepCopy())
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	maps.Copy(n.Labels, labels)
	return c.Client.Patch(ctx, &n, patch)
}

// AnnotateNode merges annotations into a node's annotations.
func (c *Cluster) AnnotateNode(ctx context.Context, name string, annotations map[string]string) error {
	var n corev1.Node
	if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
		return err
	}
	patch := client.MergeFrom(n.DeepCopy())
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	maps.Copy(n.Annotations, annotations)
	return c.Client.Patch(ctx, &n, patch)
}

// WaitNodeReady waits until the node named name is Ready and untainted
// again (waitNodeReady).
func (c *Cluster) WaitNodeReady(ctx context.Context, name string, timeout time.Duration) error {
	n, ok := c.Nodes[name]
	if !ok {
		return fmt.Errorf("no node %s", name)
	}
	return c.waitNodeReady(ctx, n, timeout)
}

// waitNodeReady waits until the node is Ready and the node lifecycle
// controller has taken off the not-ready taint the kubelet registers it
// with, and any unreachable taint (a scheduler honouring taints places
// nothing there before).
func (c *Cluster) waitNodeReady(ctx context.Context, n *Node, timeout time.Duration) error {
	var last string
	err := Poll(ctx, timeout, func() (bool, error) {
		if n.kubelet.Exited() {
			return false, fmt.Errorf("the kubelet of %s exited: %s", n.Name, n.kubelet.tail(15))
		}
		var node corev1.Node
		if err := c.Client.Get(ctx, client.ObjectKey{Name: n.Name}, &node); err != nil {
			last = err.Error()
			return false, nil
		}
		ready := false
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				last = string(cond.Status) + ": " + cond.Message
				ready = cond.Status == corev1.ConditionTrue
			}
		}
		for _, t := range node.Spec.Taints {
			if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
				last += "; still tainted " + t.ToString()
				return false, nil
			}
		}
		return ready, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not Ready (%s): %w; kubelet log:\n%s", n.Name, last, err, n.kubelet.tail(15))
	}
	return nil
}

// Stop stops everything and removes what the cluster made. It returns an
// error naming anything that could not be removed or restored.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	c.mu.Unlock()
	// Holdfast's components and the controller-manager first, then the
	// nodes, then the apiserver before etcd (an apiserver whose etcd is
	// gone may ignore SIGTERM).
	c.mu.Lock()
	procs := slices.Clone(c.procs)
	c.mu.Unlock()
	var core []*proc
	for _, p := range slices.Backward(procs) {
		if p.Name == "kube-apiserver" || strings.HasPrefix(p.Name, "etcd") {
			core = append(core, p)
			continue
		}
		p.Stop(20 * time.Second)
	}
	var errs []error
	for _, name := range slices.Backward(c.NodeNames) {
		errs = append(errs, c.Nodes[name].stop()...)
	}
	for _, p := range core {
		p.Stop(20 * time.Second)
	}
	// Members on the nodes go after the apiserver, as the hub's do.
	for _, name := range slices.Backward(c.NodeNames) {
		if h := c.Nodes[name].Host; h != nil {
			errs = append(errs, h.close())
		}
	}
	return errors.Join(append(errs, c.cleanup())...)
}

func (c *Cluster) cleanup() error {
	var errs []error
	for _, ns := range slices.Backward(c.netns) {
		if err := run("ip", "netns", "delete", ns); err != nil {
			errs = append(errs, err)
		}
	}
	for s, v := range c.sysctls {
		p := filepath.Join("/proc/sys", s)
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) != v {
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("restoring %s to %s: %w", s, v, err))
			}
		}
	}
	if len(errs) == 0 && os.Getenv("HOLDFAST_E2E_KEEP") == "" {
		_ = os.RemoveAll(c.Dir)
	}
	return errors.Join(errs...)
}

// Poll calls f until it returns true or an error, or timeout passes (every
// 200ms). test/e2e/scenario uses it too.
func Poll(ctx context.Context, timeout time.Duration, f func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, err := f()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *Cluster) restClient() (*rest.RESTClient, error) {
	cfg := rest.CopyConfig(c.Config)
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.APIPath = "/api"
	cfg.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	return rest.RESTClientFor(cfg)
}

// LeftoversAfterExit is what is still left (Leftovers) once the stopped
// processes have had up to bound to exit: a container's shim and the
// processes of a node's mount namespace go on exiting after their kubelet
// and containerd are stopped, and only what outlasts that is left behind.
func (c *Cluster) LeftoversAfterExit(bound time.Duration) []string {
	deadline := time.Now().Add(bound)
	for {
		left := c.Leftovers()
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Leftovers lists what a stopped cluster left on the machine: running
// processes it started, network namespaces, mounts, cgroups, and kernel
// settings that differ from what it found, and its directory. Empty after a
// clean Stop.
func (c *Cluster) Leftovers() []string {
	var out []string
	all := slices.Clone(c.procs)
	for _, n := range c.Nodes {
		for _, p := range []*proc{n.holder, n.containerd, n.kubelet} {
			if p != nil {
				all = append(all, p)
			}
		}
	}
	for _, p := range all {
		if !p.Exited() {
			out = append(out, fmt.Sprintf("process %s (pid %d) still running", p.Name, p.PID()))
		}
	}
	for ns := range existingNetns() {
		if strings.HasPrefix(ns, "hfe-"+c.ID+"-") {
			out = append(out, "network namespace "+ns)
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, c.Dir) || strings.Contains(l, "hfe-"+c.ID) {
				out = append(out, "mount "+l)
			}
		}
	}
	mounts, _ := cgroupMounts()
	for _, m := range mounts {
		left, _ := filepath.Glob(filepath.Join(m, "hfe-"+c.ID+"-*"))
		for _, d := range left {
			out = append(out, "cgroup "+d)
		}
	}
	for s, v := range c.sysctls {
		if b, err := os.ReadFile(filepath.Join("/proc/sys", s)); err == nil && strings.TrimSpace(string(b)) != v {
			out = append(out, fmt.Sprintf("sysctl %s is %s, was %s", s, strings.TrimSpace(string(b)), v))
		}
	}
	for _, n := range c.Nodes {
		if n.mountNS != 0 {
			if pids := pidsInMountNS(n.mountNS); len(pids) > 0 {
				out = append(out, fmt.Sprintf("processes %v in the mount namespace of %s", pids, n.Name))
			}
		}
	}
	if _, err := os.Stat(c.Dir); err == nil {
		out = append(out, "directory "+c.Dir)
	}
	for _, pid := range PIDsNaming(c.Dir) {
		out = append(out, fmt.Sprintf("process %d names %s on its command line", pid, c.Dir))
	}
	return out
}
