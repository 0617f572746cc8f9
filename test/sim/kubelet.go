package sim

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/units"
	"github.com/holdfast-io/holdfast/node-plugin/fence"
)

// node is one worker machine: its kubelet (simulated at its contract), its
// node plugin's real fence agent, and the runtime containers it runs.
type node struct {
	s       *Sim
	name    string
	host    *host
	kubelet *proc
	plugin  *proc
	kcache  *cache
	pcache  *cache
	agent   *fence.Agent
	loop    *fence.Loop
	// containers by pod UID.
	containers map[string]*container
	ids        int
}

// container is one runtime pod's sandbox and container on a node.
type container struct {
	podNS, podName, podUID string
	unit                   string
	epoch                  int64
	env                    []corev1.EnvVar
	sandbox                string
	id                     string
	sandboxGone            bool
	restarts               int32
	rp                     *runtimeProc
	starting               bool
	startedAt, finishedAt  time.Time
	backoff                time.Duration
	liveFailures           int
	ready                  bool
	posted                 *corev1.PodStatus
}

// boot powers the machine on: the kubelet and the node plugin start with
// nothing (a kubelet runs only the pods it reads from the apiserver).
func (n *node) boot() {
	s := n.s
	n.host.powered = true
	n.containers = map[string]*container{}
	s.revive(n.kubelet)
	s.revive(n.plugin)
	n.kcache = s.watch(n.kubelet, func(kind, _, _ string) {
		if kind == "" || kind == "Pod" {
			s.soon(n.kubelet, n.sync)
		}
	})
	n.agent = &fence.Agent{CRI: nodeCRI{n}, Units: nil, Lease: nodeLease{n}, Clock: n.host.clock}
	n.pcache = s.watch(n.plugin, func(kind, ns, name string) {
		if kind == "Unit" {
			s.soon(n.plugin, func() { n.fenceStale(ns, name) })
		}
	})
	n.agent.Units = fence.CacheUnits{Client: n.pcache.reader()}
	n.loop = &fence.Loop{Agent: n.agent, Probe: n.probe}
	s.soon(n.kubelet, n.syncLoop)
	s.soon(n.kubelet, n.heartbeat)
	s.soon(n.plugin, n.pass)
	s.log(n.host, "", kState, "%s booted", n.name)
}

// powerOff kills everything on the machine at once.
func (n *node) powerOff() {
	s := n.s
	for _, p := range n.host.procs {
		if p.alive {
			s.kill(p)
		}
	}
	n.host.powered = false
	n.containers = map[string]*container{}
	// The kernel goes with the power: nothing it held is sent.
	kept := s.fieldQueue[:0]
	for _, q := range s.fieldQueue {
		if q.f.rp.n != n {
			kept = append(kept, q)
		}
	}
	s.fieldQueue = kept
	s.log(n.host, "", kFault, "%s lost power", n.name)
}

func (n *node) ctx() context.Context { return klog.NewContext(context.Background(), klog.Background()) }

// probe is the fence loop's apiserver probe.
func (n *node) probe(context.Context) error {
	s := n.s
	api := s.api.p.host
	if s.api.p.running() && s.net.up(n.host, api, controlNet) && s.net.up(api, n.host, controlNet) {
		return nil
	}
	return fmt.Errorf("readyz: no answer from the apiserver")
}

// pass is the fence agent's periodic pass (fence.Loop.Pass), every second.
func (n *node) pass() {
	n.loop.Pass(n.ctx())
	n.s.after(n.plugin, time.Second, n.pass)
}

// fenceStale is the fence agent's reconcile of one unit that changed.
func (n *node) fenceStale(ns, name string) {
	if _, err := n.agent.FenceStale(n.ctx(), ns, name); err == nil {
		n.agent.Flush(n.ctx())
	}
}

func (n *node) heartbeat() {
	name := n.name
	n.s.call(n.kubelet, func(a *apiserver) (client.Object, error) { a.heartbeat(name); return nil, nil }, func(apiResult) {})
	n.s.after(n.kubelet, heartbeatEvery, n.heartbeat)
}

func (n *node) syncLoop() {
	n.sync()
	n.probeAll()
	n.s.after(n.kubelet, 2*time.Second, n.syncLoop)
}

// sync makes the containers follow the pods bound here, as the kubelet
// does: start what is missing, restart what exited (backing off), stop what
// was deleted and confirm the deletion, and report each pod's status.
func (n *node) sync() {
	s := n.s
	if !n.kcache.synced {
		return
	}
	bound := map[string]*corev1.Pod{}
	for _, o := range n.kcache.st.sorted("Pod", "", nil) {
		pod := o.(*corev1.Pod)
		if pod.Spec.NodeName == n.name {
			bound[string(pod.UID)] = pod
		}
	}
	for _, uid := range sortedKeys(n.containers) {
		c := n.containers[uid]
		pod := bound[uid]
		if pod == nil || pod.DeletionTimestamp != nil {
			n.stopContainer(c, "its pod was deleted")
			delete(n.containers, uid)
			if pod != nil {
				sent := pod.DeepCopy()
				s.call(n.kubelet, func(a *apiserver) (client.Object, error) { return nil, a.remove(sent, true) }, func(apiResult) {})
			}
		}
	}
	for _, uid := range sortedKeys(bound) {
		pod := bound[uid]
		if pod.DeletionTimestamp != nil {
			if _, ok := n.containers[uid]; !ok {
				sent := pod.DeepCopy()
				s.call(n.kubelet, func(a *apiserver) (client.Object, error) { return nil, a.remove(sent, true) }, func(apiResult) {})
			}
			continue
		}
		c := n.containers[uid]
		if c == nil {
			epoch, _ := units.PodEpoch(pod)
			c = &container{podNS: pod.Namespace, podName: pod.Name, podUID: uid, unit: pod.Namespace + "/" + pod.Labels[holdfastv1.LabelUnit],
				epoch: epoch, env: pod.Spec.Containers[0].Env, restarts: restartsOf(pod)}
			n.containers[uid] = c
			n.newSandbox(c)
			n.launch(c, s.startDelay())
			continue
		}
		if c.rp == nil && !c.starting {
			if c.sandboxGone {
				n.newSandbox(c)
			}
			c.restarts++
			c.backoff = min(max(2*c.backoff, 10*time.Second), 300*time.Second)
			n.launch(c, c.backoff)
		}
		n.postStatus(c, pod)
	}
}

// sortedKeys are m's keys in order: nothing the simulation does may follow
// Go's map order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func restartsOf(pod *corev1.Pod) int32 {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == holdfastv1.RuntimeContainer {
			return cs.RestartCount + 1
		}
	}
	return 0
}

func (n *node) newSandbox(c *container) {
	n.ids++
	c.sandbox = fmt.Sprintf("sb-%s-%d", n.name, n.ids)
	c.sandboxGone = false
}

// launch starts c's runtime after delay.
func (n *node) launch(c *container, delay time.Duration) {
	s := n.s
	c.starting = true
	s.after(n.kubelet, delay, func() {
		c.starting = false
		if n.containers[c.podUID] != c || c.rp != nil {
			return
		}
		n.ids++
		c.id = fmt.Sprintf("ct-%s-%d", n.name, n.ids)
		rp, err := n.startRuntime(c)
		if err != nil {
			s.log(n.host, c.unit, kState, "kubelet: runtime of %s failed to start: %v", c.podName, err)
			c.finishedAt = n.host.clock.Now()
			return
		}
		c.rp, c.startedAt, c.liveFailures, c.ready = rp, n.host.clock.Now(), 0, false
		n.postStatusNow(c)
	})
}

// stopContainer kills c's runtime (SIGKILL: a stale writer gets no grace).
func (n *node) stopContainer(c *container, why string) {
	if c.rp == nil {
		return
	}
	n.s.kill(c.rp.p)
	n.s.log(n.host, c.unit, kState, "runtime %s stopped: %s", c.rp.id, why)
	c.rp = nil
	c.finishedAt = n.host.clock.Now()
	c.ready = false
}

// probeAll runs the readiness and liveness probes through the runtime's own
// Checker, every 2s: readiness as the pod's probe does; liveness, probed
// every 10s with 3 failures allowed, fails the container after 30s.
func (n *node) probeAll() {
	for _, uid := range sortedKeys(n.containers) {
		c := n.containers[uid]
		rp := c.rp
		if rp == nil {
			continue
		}
		answering := rp.p.running()
		ready := answering
		if answering {
			ready, _ = rp.rt.Checker().Readiness()
		}
		live := answering
		if answering {
			live, _ = rp.rt.Checker().Liveness()
		}
		if live {
			c.liveFailures = 0
		} else if c.liveFailures++; c.liveFailures >= 15 {
			n.stopContainer(c, "liveness probe failed 3 times")
			continue
		}
		if ready != c.ready {
			c.ready = ready
			n.postStatusNow(c)
		}
	}
}

func (n *node) postStatusNow(c *container) {
	if o, ok := n.kcache.st.get("Pod", c.podNS, c.podName); ok {
		n.postStatus(c, o.(*corev1.Pod))
	}
}

// postStatus reports c's status on its pod when it changed.
func (n *node) postStatus(c *container, pod *corev1.Pod) {
	s := n.s
	st := corev1.PodStatus{Phase: corev1.PodRunning, PodIP: n.host.ip, HostIP: n.host.ip}
	cs := corev1.ContainerStatus{Name: holdfastv1.RuntimeContainer, RestartCount: c.restarts, Ready: c.ready}
	if c.rp != nil {
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.startedAt.Truncate(time.Second))}
	} else {
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
	}
	if c.restarts > 0 && !c.finishedAt.IsZero() {
		cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{FinishedAt: metav1.NewTime(c.finishedAt.Truncate(time.Second))}
	}
	st.ContainerStatuses = []corev1.ContainerStatus{cs}
	ready := corev1.ConditionFalse
	if c.ready {
		ready = corev1.ConditionTrue
	}
	st.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}
	if c.posted != nil && equality.Semantic.DeepEqual(*c.posted, st) && equality.Semantic.DeepEqual(pod.Status, st) {
		return
	}
	c.posted = st.DeepCopy()
	sent := pod.DeepCopy()
	sent.Status = st
	sent.ResourceVersion = ""
	s.call(n.kubelet, func(a *apiserver) (client.Object, error) {
		return a.update(user{name: "system:node:" + n.name}, sent, "status")
	}, func(r apiResult) {
		if r.err != nil {
			c.posted = nil
		}
	})
}
