//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/leasetls/leasetlstest"
	"github.com/holdfast-io/holdfast/node-plugin/fence"
)

// nextIP hands each simulated node its own loopback address, so two
// runtimes of one unit on two nodes listen on the same ports, as on hosts.
// The addresses start from a block of 127.0.0.0/8 drawn once per process:
// another test process (a second CI run, another package) hands out its own
// block, and a runtime of its own never answers on one of ours.
var (
	nextIP  atomic.Int32
	ipBlock = (20+rand.IntN(230))<<8 | rand.IntN(256)
)

func loopbackIP() string {
	n := nextIP.Add(1)
	b := ipBlock + int(n/250)
	return fmt.Sprintf("127.%d.%d.%d", b>>8&255, b&255, 1+n%250)
}

// kubelet plays the kubelets of a test's nodes: it runs the real
// unit-runtime for each pod bound to one of its nodes, with the pod's
// environment and arguments resolved as a kubelet does (downward API,
// $(VAR) expansion), reports the pod's IP (the node's, as for any
// hostNetwork pod), probes the readiness service over gRPC as the
// readiness probe does, and kills the process when the pod is deleted. A
// cut node's kubelet hears and does nothing; a broken node reports the pod's
// IP but never starts the container (an image that cannot be pulled).
type kubelet struct {
	t      testing.TB
	ns     string
	binary string
	dir    string

	mu    sync.Mutex
	nodes map[string]*simNode
	procs map[string]*runtimeProc
	// creds are the pods' projected lease credentials, by pod UID, being
	// fetched or written.
	creds map[types.UID]*projection
	stop  chan struct{}
	done  chan struct{}
	// plugins are the nodes' node plugins publishing their runtimes.
	plugins map[string]*fence.RuntimesReporter
}

// projection is one pod's projected volumes: written (ready) or failed.
type projection struct {
	ready bool
	err   error
}

type simNode struct {
	ip     string
	cut    bool
	broken bool
}

type runtimeProc struct {
	pod     string
	uid     types.UID
	node    string
	ip      string
	health  int32
	lease   int32
	cmd     *exec.Cmd
	exited  chan struct{}
	ready   bool
	logPath string
	// namespace and labels are the pod's, as the kubelet copies them onto
	// its sandbox.
	namespace string
	labels    map[string]string
}

func newKubelet(t testing.TB, ns string) *kubelet {
	k := &kubelet{t: t, ns: ns, binary: unitRuntimeBinary, dir: t.TempDir(),
		nodes: map[string]*simNode{}, procs: map[string]*runtimeProc{}, creds: map[types.UID]*projection{}, plugins: map[string]*fence.RuntimesReporter{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go k.run()
	t.Cleanup(k.shutdown)
	return k
}

// node registers a node with its own loopback address and creates it Ready.
func (k *kubelet) node(name string, labels map[string]string) string {
	ip := loopbackIP()
	k.mu.Lock()
	k.nodes[name] = &simNode{ip: ip}
	k.mu.Unlock()
	node(k.t, name, labels)
	return ip
}

func (k *kubelet) setNode(name string, f func(*simNode)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	f(k.nodes[name])
}

func (k *kubelet) proc(pod string) *runtimeProc {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.procs[pod]
}

func (p *runtimeProc) signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// leaseStatus reads the runtime's own view of its lease (GET /v1/lease, in
// plain HTTP as the node plugin's watchdog reads it).
func (p *runtimeProc) leaseStatus() (leaseapi.Status, error) {
	var st leaseapi.Status
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get(fmt.Sprintf("http://%s:%d%s", p.ip, p.lease, leaseapi.Path))
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func (p *runtimeProc) log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

func (k *kubelet) shutdown() {
	close(k.stop)
	<-k.done
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range k.procs {
		p.kill()
	}
}

func (p *runtimeProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Kill()
	<-p.exited
}

func (k *kubelet) run() {
	defer close(k.done)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-tick.C:
		}
		var pods corev1.PodList
		if err := env.Client.List(context.Background(), &pods, client.InNamespace(k.ns)); err != nil {
			continue
		}
		for i := range pods.Items {
			k.sync(&pods.Items[i])
		}
		k.reportRuntimes()
	}
}

func (k *kubelet) sync(pod *corev1.Pod) {
	k.mu.Lock()
	n := k.nodes[pod.Spec.NodeName]
	if n == nil || n.cut {
		k.mu.Unlock()
		return
	}
	nodeCopy := *n
	p := k.procs[pod.Name]
	k.mu.Unlock()

	if !pod.DeletionTimestamp.IsZero() {
		if p != nil {
			p.kill()
		}
		_ = env.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(0))
		return
	}
	if p == nil || p.uid != pod.UID {
		if nodeCopy.broken {
			if pod.Status.PodIP == "" {
				k.report(pod, nodeCopy.ip, false, &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "the image cannot be pulled"})
			}
			return
		}
		// As the kubelet, the container starts only once its projected
		// volumes are written: the lease signer has issued the pod's
		// certificate and the lease CA bundle is published.
		if !k.projected(pod) {
			return
		}
		k.start(pod, nodeCopy.ip)
		return
	}
	ready := false
	select {
	case <-p.exited:
	default:
		ready = probeReady(fmt.Sprintf("%s:%d", p.ip, p.health))
	}
	if ready != p.ready {
		p.ready = ready
		k.report(pod, nodeCopy.ip, ready, nil)
	}
}

// projected reports whether pod's projected volumes are written, and starts
// writing them, off the sync loop, the first time it is asked: for a
// podCertificate source it makes a key and asks the signer for the pod's
// certificate with a PodCertificateRequest, for a clusterTrustBundle source
// it joins the signer's bundles, as the kubelet does.
func (k *kubelet) projected(pod *corev1.Pod) bool {
	k.mu.Lock()
	pr := k.creds[pod.UID]
	if pr == nil {
		pr = &projection{}
		k.creds[pod.UID] = pr
		k.mu.Unlock()
		go k.project(pod.DeepCopy(), pr)
		return false
	}
	defer k.mu.Unlock()
	return pr.ready
}

func (k *kubelet) project(pod *corev1.Pod, pr *projection) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var n corev1.Node
	err := env.Client.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, &n)
	for _, v := range pod.Spec.Volumes {
		if err != nil || v.Projected == nil {
			continue
		}
		files := map[string][]byte{}
		for _, src := range v.Projected.Sources {
			switch {
			case src.PodCertificate != nil:
				var req *certificatesv1.PodCertificateRequest
				var key []byte
				if req, key, err = leasetlstest.RequestPodCertificate(ctx, env.Client, pod, src.PodCertificate, n.UID, "default-sa-uid"); err == nil {
					files[src.PodCertificate.CredentialBundlePath], err = leasetlstest.AwaitPodCertificate(ctx, env.Client, req, key)
				}
			case src.ClusterTrustBundle != nil:
				for {
					var b []byte
					if b, err = leasetlstest.ProjectedTrustBundle(ctx, env.Client, src.ClusterTrustBundle); err == nil || ctx.Err() != nil {
						files[src.ClusterTrustBundle.Path] = b
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		}
		if err == nil {
			err = leasetlstest.WriteFiles(k.volumeDir(pod, v.Name), files)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	pr.ready, pr.err = err == nil, err
	if err != nil {
		k.t.Logf("kubelet: the projected volumes of %s: %v", pod.Name, err)
	}
}

// volumeDir is where a pod's volume lives on the host; the process sees it
// at the host path in place of the mount path.
func (k *kubelet) volumeDir(pod *corev1.Pod, volume string) string {
	return filepath.Join(k.dir, string(pod.UID), volume)
}

func (k *kubelet) start(pod *corev1.Pod, ip string) {
	c := pod.Spec.Containers[0]
	// Every emptyDir lives as long as the pod: a directory of its own,
	// seen by the process at the host path in place of the mount path;
	// projected volumes were written there already.
	mounts := map[string]string{}
	for _, vm := range c.VolumeMounts {
		for _, v := range pod.Spec.Volumes {
			if v.Name == vm.Name && (v.EmptyDir != nil || v.Projected != nil) {
				dir := k.volumeDir(pod, v.Name)
				if err := os.MkdirAll(dir, 0o700); err != nil {
					k.t.Errorf("kubelet: %v", err)
					return
				}
				mounts[vm.MountPath] = dir
			}
		}
	}
	mount := func(v string) string {
		for mp, dir := range mounts {
			if v == mp || strings.HasPrefix(v, mp+"/") {
				return dir + strings.TrimPrefix(v, mp)
			}
		}
		return v
	}
	vars := map[string]string{}
	var envList []string
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			v = fieldValue(pod, e.ValueFrom.FieldRef.FieldPath, ip)
		} else {
			v = mount(expand(v, vars))
		}
		vars[e.Name] = v
		envList = append(envList, e.Name+"="+v)
	}
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = mount(expand(a, vars))
	}
	logPath := filepath.Join(k.dir, pod.Name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		k.t.Errorf("kubelet: %v", err)
		return
	}
	cmd := exec.Command(k.binary, args...)
	cmd.Env = append(envList, "PATH="+os.Getenv("PATH"))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		k.t.Errorf("kubelet: starting the runtime of %s: %v", pod.Name, err)
		return
	}
	p := &runtimeProc{pod: pod.Name, uid: pod.UID, node: pod.Spec.NodeName, ip: ip, cmd: cmd, exited: make(chan struct{}), logPath: logPath,
		namespace: pod.Namespace, labels: pod.Labels}
	for _, port := range c.Ports {
		switch port.Name {
		case "health":
			p.health = port.ContainerPort
		case "lease":
			p.lease = port.ContainerPort
		}
	}
	go func() { _ = cmd.Wait(); logFile.Close(); close(p.exited) }()
	k.mu.Lock()
	k.procs[pod.Name] = p
	k.mu.Unlock()
	k.report(pod, ip, false, nil)
}

// report writes the pod status the kubelet would.
func (k *kubelet) report(pod *corev1.Pod, ip string, ready bool, waiting *corev1.ContainerStateWaiting) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var p corev1.Pod
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), &p); err != nil {
			return err
		}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP, p.Status.HostIP = ip, ip
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
		if p.Status.StartTime == nil {
			p.Status.StartTime = &now
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: now}}
		cs := corev1.ContainerStatus{Name: holdfastv1.RuntimeContainer, Image: p.Spec.Containers[0].Image, Ready: ready}
		if waiting != nil {
			cs.State.Waiting = waiting
		} else {
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: now}
		}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
		return env.Client.Status().Update(context.Background(), &p)
	})
	if err != nil && !apierrors.IsNotFound(err) {
		k.t.Logf("kubelet: reporting %s: %v", pod.Name, err)
	}
}

func probeReady(addr string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: holdfastv1.HealthServiceReadiness})
	return err == nil && resp.Status == healthpb.HealthCheckResponse_SERVING
}

var labelPath = regexp.MustCompile(`^metadata\.labels\['([^']+)'\]$`)

func fieldValue(pod *corev1.Pod, path, ip string) string {
	switch path {
	case "metadata.name":
		return pod.Name
	case "metadata.namespace":
		return pod.Namespace
	case "metadata.uid":
		return string(pod.UID)
	case "spec.nodeName":
		return pod.Spec.NodeName
	case "status.podIP", "status.hostIP":
		return ip
	}
	if m := labelPath.FindStringSubmatch(path); m != nil {
		return pod.Labels[m[1]]
	}
	return ""
}

// expand resolves $(VAR) against the variables defined so far, as the
// kubelet does; $$ is a literal $, and an unknown reference stays as it is.
func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		if s[i+1] == '$' {
			b.WriteByte('$')
			i++
			continue
		}
		if s[i+1] == '(' {
			if end := strings.IndexByte(s[i:], ')'); end > 0 {
				name := s[i+2 : i+end]
				if v, ok := vars[name]; ok {
					b.WriteString(v)
					i += end
					continue
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// runtimeArgs are the Unit's spec.runtime.args for the reference runtime.
func runtimeArgs(deviceAddr string) []string {
	return []string{
		// Many nodes share one host here: each runtime listens on its
		// node's own address. Ports, lease and state come from the pod's
		// environment.
		"--bind-address=$(HOLDFAST_POD_IP)",
		"--metrics-port=0",
		"--scan-interval=200ms",
		"--device=coupler=modbus://" + deviceAddr + "?epochRegister=9000&timeout=1s",
		"--output=counter=coupler:100,step=1",
	}
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

// reportRuntimes runs a pass of each reachable node's node plugin: the real
// runtimes reporter (package fence) over the node's container runtime,
// which here is the kubelet's processes (nodeCRI). A cut node's plugin,
// like its kubelet, does not reach the apiserver.
func (k *kubelet) reportRuntimes() {
	k.mu.Lock()
	var reachable []string
	for name, n := range k.nodes {
		if !n.cut {
			reachable = append(reachable, name)
		}
	}
	k.mu.Unlock()
	for _, name := range reachable {
		r := k.plugins[name]
		if r == nil {
			cri := nodeCRI{k: k, node: name}
			r = &fence.RuntimesReporter{Agent: &fence.Agent{CRI: cri}, Client: env.Client, Units: env.Client, NodeName: name, Clock: clock.RealClock{}}
			k.plugins[name] = r
		}
		if err := r.Pass(context.Background()); err != nil && !apierrors.IsNotFound(err) {
			k.t.Logf("node plugin of %s: %v", name, err)
		}
	}
}

// nodeCRI is a node's container runtime as CRI shows it to the node
// plugin: a ready sandbox, with the pod's labels and the kubelet's, for
// each runtime process on the node that has not exited, whether or not its
// Pod object still exists. The simulated kubelet runs processes, not
// containers, so this is where the real containerd would answer; the node
// plugin's reporter runs on real containerd in node-plugin's tests.
type nodeCRI struct {
	k    *kubelet
	node string
}

func (c nodeCRI) ListPodSandbox(_ context.Context, f *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	c.k.mu.Lock()
	defer c.k.mu.Unlock()
	var out []*runtimeapi.PodSandbox
	for _, p := range c.k.procs {
		select {
		case <-p.exited:
			continue
		default:
		}
		if p.node != c.node {
			continue
		}
		labels := map[string]string{"io.kubernetes.pod.name": p.pod, "io.kubernetes.pod.namespace": p.namespace, "io.kubernetes.pod.uid": string(p.uid)}
		for k, v := range p.labels {
			labels[k] = v
		}
		match := true
		for k, v := range f.GetLabelSelector() {
			match = match && labels[k] == v
		}
		if match {
			out = append(out, &runtimeapi.PodSandbox{Id: string(p.uid), State: runtimeapi.PodSandboxState_SANDBOX_READY, Labels: labels,
				Metadata: &runtimeapi.PodSandboxMetadata{Name: p.pod, Namespace: p.namespace, Uid: string(p.uid)}})
		}
	}
	return out, nil
}

func (c nodeCRI) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return nil, nil
}

// The node plugin's reporter only lists; the fence agent's other calls are
// not part of these tests.
func (c nodeCRI) PodSandboxStatus(context.Context, string, bool) (*runtimeapi.PodSandboxStatusResponse, error) {
	return nil, fmt.Errorf("node %s: not simulated", c.node)
}
func (c nodeCRI) StopContainer(context.Context, string, int64) error {
	return fmt.Errorf("node %s: not simulated", c.node)
}
func (c nodeCRI) StopPodSandbox(context.Context, string) error {
	return fmt.Errorf("node %s: not simulated", c.node)
}
func (c nodeCRI) RemovePodSandbox(context.Context, string) error {
	return fmt.Errorf("node %s: not simulated", c.node)
}
