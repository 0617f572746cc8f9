//go:build integration

// Package integration runs holdfast-scheduler against the real kube-apiserver
// and etcd (test/testenv): in process, built from the configuration the chart
// ships, and once as the built binary. There is no kubelet: nodes are Node
// objects with a Ready condition, and a bound pod stays Pending with its
// spec.nodeName set.
package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/scheduler"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/profile"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/units"
	"github.com/holdfast-io/holdfast/policy"
	hfscheme "github.com/holdfast-io/holdfast/scheduler-plugin/apis/config/scheme"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/holdfastclient"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/plugintest"
	"github.com/holdfast-io/holdfast/scheduler-plugin/standbycolocation"
	"github.com/holdfast-io/holdfast/scheduler-plugin/unitplacement"
	"github.com/holdfast-io/holdfast/scheduler-plugin/votereligibility"
	"github.com/holdfast-io/holdfast/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	ctrllog.SetLogger(klog.NewKlogr())
	testenv.Main(m, &env, testenv.Options{})
}

// registry is what cmd/holdfast-scheduler registers.
func registry() frameworkruntime.Registry {
	return frameworkruntime.Registry{
		unitplacement.Name:     unitplacement.New,
		standbycolocation.Name: standbycolocation.New,
		votereligibility.Name:  votereligibility.New,
	}
}

// shippedConfig loads the configuration the chart ships.
func shippedConfig(t testing.TB) *schedconfig.KubeSchedulerConfiguration {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := hfscheme.LoadConfigFile(filepath.Join(root, "scheduler-plugin", "config", "scheduler-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// restConfig is the administrator's config with room for a scheduler's
// traffic (client-go's default of 5 QPS would throttle it).
func restConfig(qps float32) *rest.Config {
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = qps, int(2*qps)
	return cfg
}

// inProcess is one scheduler built in process as kube-scheduler's own
// setup builds it.
type inProcess struct {
	sched *scheduler.Scheduler
	// kubeConfig is the config the scheduler's handle carries: the plugins'
	// holdfast cache is keyed on it (holdfastclient.For).
	kubeConfig  *rest.Config
	ctx         context.Context
	cancel      context.CancelFunc
	broadcaster events.EventBroadcaster
	done        sync.WaitGroup
}

// buildScheduler builds a scheduler with the given profiles and waits until
// its informers and handlers have synced; it does not schedule until run.
func buildScheduler(profiles []schedconfig.KubeSchedulerProfile, qps float32) (*inProcess, error) {
	ctx, cancel := context.WithCancel(context.Background())
	cfg := restConfig(qps)
	cs := kubernetes.NewForConfigOrDie(cfg)
	informerFactory := scheduler.NewInformerFactory(cs, 0, nil)
	dynInformerFactory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dynamic.NewForConfigOrDie(cfg), 0, corev1.NamespaceAll, nil)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	sched, err := scheduler.New(ctx, cs, informerFactory, dynInformerFactory, profile.NewRecorderFactory(broadcaster),
		scheduler.WithKubeConfig(cfg),
		scheduler.WithProfiles(profiles...),
		scheduler.WithFrameworkOutOfTreeRegistry(registry()),
		scheduler.WithPodInitialBackoffSeconds(1),
		scheduler.WithPodMaxBackoffSeconds(2),
	)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("building the scheduler: %w", err)
	}
	broadcaster.StartRecordingToSink(ctx.Done())
	informerFactory.Start(ctx.Done())
	dynInformerFactory.Start(ctx.Done())
	informerFactory.WaitForCacheSync(ctx.Done())
	dynInformerFactory.WaitForCacheSync(ctx.Done())
	if err := sched.WaitForHandlersSync(ctx); err != nil {
		cancel()
		return nil, fmt.Errorf("waiting for the scheduler's handlers: %w", err)
	}
	return &inProcess{sched: sched, kubeConfig: cfg, ctx: ctx, cancel: cancel, broadcaster: broadcaster}, nil
}

// run starts scheduling.
func (s *inProcess) run() {
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		s.sched.Run(s.ctx)
	}()
}

// stop stops scheduling and waits for the scheduler to finish.
func (s *inProcess) stop() {
	s.cancel()
	s.done.Wait()
	s.broadcaster.Shutdown()
}

// startScheduler runs one scheduler in process with the given profiles until
// the test ends.
func startScheduler(t testing.TB, profiles []schedconfig.KubeSchedulerProfile, qps float32) *inProcess {
	t.Helper()
	s, err := buildScheduler(profiles, qps)
	if err != nil {
		t.Fatal(err)
	}
	s.run()
	t.Cleanup(s.stop)
	return s
}

// startHoldfastScheduler runs the shipped holdfast-scheduler profile in
// process.
func startHoldfastScheduler(t testing.TB) *inProcess {
	t.Helper()
	return startScheduler(t, shippedConfig(t).Profiles, 200)
}

// pluginClients are the running scheduler's own holdfast clients: the
// cache its plugins read (holdfastclient keeps one per kubeconfig).
func (s *inProcess) pluginClients(t testing.TB, objs ...client.Object) *holdfastclient.Clients {
	t.Helper()
	fh, err := tf.NewFramework(s.ctx, []tf.RegisterPluginFunc{
		tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
		tf.RegisterBindPlugin(defaultbinder.Name, defaultbinder.New),
	}, holdfastv1.SchedulerName, frameworkruntime.WithKubeConfig(s.kubeConfig))
	if err != nil {
		t.Fatal(err)
	}
	clients, err := holdfastclient.For(s.ctx, fh, objs...)
	if err != nil {
		t.Fatal(err)
	}
	return clients
}

// waitPluginsSee waits until the running scheduler's own holdfast cache
// holds obj at the resourceVersion the test wrote (or a later one): a test
// that wrote a VoterPolicy or a Unit and then creates a pod must not assume
// the plugins' informers have caught up.
func (s *inProcess) waitPluginsSee(t testing.TB, obj client.Object) {
	t.Helper()
	clients := s.pluginClients(t, obj.DeepCopyObject().(client.Object))
	want, err := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion of %s: %v", obj.GetName(), err)
	}
	cached := obj.DeepCopyObject().(client.Object)
	plugintest.Poll(t, fmt.Sprintf("the plugins' cache to hold %s at resourceVersion %d", obj.GetName(), want), func() bool {
		if err := clients.Cached.Get(s.ctx, client.ObjectKeyFromObject(obj), cached); err != nil {
			return false
		}
		got, err := strconv.ParseUint(cached.GetResourceVersion(), 10, 64)
		return err == nil && got >= want
	})
}

// plant creates nodes for one test and deletes them after it: nodes are
// cluster-wide, so every test names its own.
type plant struct {
	t  testing.TB
	cs kubernetes.Interface
	ns string
}

func newPlant(t testing.TB) *plant {
	t.Helper()
	return &plant{t: t, cs: kubernetes.NewForConfigOrDie(restConfig(200)), ns: env.Namespace(t)}
}

// node creates a Ready node (conditions are status, written after create).
func (p *plant) node(name string, mutate ...func(*corev1.Node)) *corev1.Node {
	p.t.Helper()
	ctx := context.Background()
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{corev1.ResourceCPU: mustQuantity("4"), corev1.ResourceMemory: mustQuantity("8Gi"), corev1.ResourcePods: mustQuantity("110")},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: mustQuantity("4"), corev1.ResourceMemory: mustQuantity("8Gi"), corev1.ResourcePods: mustQuantity("110")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
		},
	}
	for _, m := range mutate {
		m(n)
	}
	status := n.Status
	created, err := p.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		p.t.Fatalf("creating node %s: %v", name, err)
	}
	p.t.Cleanup(func() {
		if err := p.cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			p.t.Errorf("deleting node %s: %v", name, err)
		}
	})
	created.Status = status
	if created, err = p.cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		p.t.Fatalf("writing the status of node %s: %v", name, err)
	}
	// Admission taints every new node not-ready; the node lifecycle
	// controller, which does not run here, lifts it once Ready.
	if !policy.NodeReady(created) {
		return created
	}
	created.Spec.Taints = slices.DeleteFunc(created.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
	if created, err = p.cs.CoreV1().Nodes().Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		p.t.Fatalf("lifting the not-ready taint of node %s: %v", name, err)
	}
	return created
}

// relabel sets label k=v on an existing node.
func (p *plant) relabel(name, k, v string) {
	p.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := p.cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Labels[k] = v
		_, err = p.cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		p.t.Fatalf("labelling node %s %s=%s: %v", name, k, v, err)
	}
}

func label(k, v string) func(*corev1.Node) {
	return func(n *corev1.Node) { n.Labels[k] = v }
}

func annotate(k, v string) func(*corev1.Node) {
	return func(n *corev1.Node) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[k] = v
	}
}

func notReady(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }

func cordoned(n *corev1.Node) { n.Spec.Unschedulable = true }

// unit creates a Unit and writes the binding the controller authorises
// before it creates the runtime pod.
func (p *plant) unit(u *holdfastv1.Unit, binding *holdfastv1.RuntimeBinding) *holdfastv1.Unit {
	p.t.Helper()
	ctx := context.Background()
	u = u.DeepCopy()
	u.Namespace = p.ns
	u.UID, u.ResourceVersion = "", ""
	u.Status = holdfastv1.UnitStatus{}
	if err := env.Client.Create(ctx, u); err != nil {
		p.t.Fatalf("creating unit %s: %v", u.Name, err)
	}
	p.t.Cleanup(func() {
		if err := env.Client.Delete(context.Background(), u); err != nil && !apierrors.IsNotFound(err) {
			p.t.Errorf("deleting unit %s: %v", u.Name, err)
		}
	})
	if binding != nil {
		p.authorise(u.Name, *binding)
	}
	return p.getUnit(u.Name)
}

// authorise writes a new binding as the controller does: epoch, pod name,
// origin, previous node, ledger; no node.
func (p *plant) authorise(unit string, binding holdfastv1.RuntimeBinding) {
	p.t.Helper()
	if binding.Pod == "" {
		binding.Pod = units.PodName(unit, binding.Epoch)
	}
	p.authoriseAnyPod(unit, binding)
}

// authoriseAnyPod writes the binding as given, pod name included or not.
func (p *plant) authoriseAnyPod(unit string, binding holdfastv1.RuntimeBinding) {
	p.t.Helper()
	u := p.getUnit(unit)
	u.Status.RuntimeBinding = &binding
	if err := env.Client.Status().Update(context.Background(), u); err != nil {
		p.t.Fatalf("authorising epoch %d of unit %s: %v", binding.Epoch, unit, err)
	}
}

func (p *plant) getUnit(name string) *holdfastv1.Unit {
	p.t.Helper()
	var u holdfastv1.Unit
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: p.ns, Name: name}, &u); err != nil {
		p.t.Fatalf("reading unit %s: %v", name, err)
	}
	return &u
}

// runtimePod creates the runtime pod of unit's epoch with the controller's
// own builder (controller/units.RuntimePod), placed as the controller places
// a first binding (the unit's nodeSelector) or an automatic re-bind
// (nothing: the scheduler chooses). name overrides the pod's name (two pods
// of one epoch racing).
func (p *plant) runtimePod(unit string, epoch int64, name string) *corev1.Pod {
	p.t.Helper()
	var placement units.Placement
	if b := p.getUnit(unit).Status.RuntimeBinding; b.Origin == holdfastv1.OriginInitial {
		placement.PrimarySelector = true
	}
	return p.runtimePodAt(unit, epoch, name, placement)
}

// manualPod creates the runtime pod of a person's failover to target: the
// controller pins it there with a required node affinity.
func (p *plant) manualPod(unit string, epoch int64, target string) *corev1.Pod {
	p.t.Helper()
	return p.runtimePodAt(unit, epoch, "", units.Placement{Node: target})
}

func (p *plant) runtimePodAt(unit string, epoch int64, name string, placement units.Placement) *corev1.Pod {
	p.t.Helper()
	pod := units.RuntimePod(p.getUnit(unit), epoch, placement)
	if name != "" {
		pod.Name = name
	}
	// No kubelet here: nothing runs it, and a pod deleted at once leaves
	// the next test's scheduler nothing to meet.
	pod.Spec.AutomountServiceAccountToken = ptrTo(false)
	pod.Spec.TerminationGracePeriodSeconds = ptrTo[int64](0)
	return p.pod(pod)
}

// placedPod creates a pod already on node (another unit's running runtime,
// or a workload), as if an earlier scheduling had bound it.
func (p *plant) placedPod(name, node string, labels map[string]string) *corev1.Pod {
	p.t.Helper()
	return p.pod(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			AutomountServiceAccountToken:  ptrTo(false),
			TerminationGracePeriodSeconds: ptrTo[int64](0),
			Containers:                    []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	})
}

func (p *plant) pod(pod *corev1.Pod) *corev1.Pod {
	p.t.Helper()
	pod.Namespace = p.ns
	created, err := p.cs.CoreV1().Pods(p.ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		p.t.Fatalf("creating pod %s: %v", pod.Name, err)
	}
	// No kubelet and no namespace controller: remove the pod at once, or
	// the next test's scheduler would meet it.
	p.t.Cleanup(func() {
		err := p.cs.CoreV1().Pods(p.ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](0)})
		if err != nil && !apierrors.IsNotFound(err) {
			p.t.Errorf("deleting pod %s: %v", pod.Name, err)
		}
	})
	return created
}

func ptrTo[T any](v T) *T { return &v }

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

const waitTimeout = 60 * time.Second

// boundNode waits until the pod is bound and returns its node.
func (p *plant) boundNode(name string) string {
	p.t.Helper()
	var node string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		pod, err := p.cs.CoreV1().Pods(p.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		node = pod.Spec.NodeName
		return node != "", nil
	})
	if err != nil {
		p.t.Fatalf("pod %s was not bound: %v; its events: %v", name, err, p.eventMessages(name, ""))
	}
	return node
}

// nodeOf is the pod's node now ("" while unbound).
func (p *plant) nodeOf(name string) string {
	p.t.Helper()
	pod, err := p.cs.CoreV1().Pods(p.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		p.t.Fatalf("reading pod %s: %v", name, err)
	}
	return pod.Spec.NodeName
}

// eventMessages lists the messages of the events about object (with reason,
// when given), oldest first.
func (p *plant) eventMessages(object, reason string) []string {
	p.t.Helper()
	sel := fields.Set{"involvedObject.name": object}
	if reason != "" {
		sel["reason"] = reason
	}
	list, err := p.cs.CoreV1().Events(p.ns).List(context.Background(), metav1.ListOptions{FieldSelector: sel.String()})
	if err != nil {
		p.t.Fatalf("listing events of %s: %v", object, err)
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Message)
	}
	return out
}

// waitEvent waits for an event about object with reason whose message holds
// every want, and returns that message.
func (p *plant) waitEvent(object, reason string, want ...string) string {
	p.t.Helper()
	var found string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		for _, msg := range p.eventMessages(object, reason) {
			if containsAll(msg, want) {
				found = msg
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		p.t.Fatalf("no %s event about %s saying %q; events: %q", reason, object, want, p.eventMessages(object, ""))
	}
	return found
}

func containsAll(s string, parts []string) bool {
	for _, part := range parts {
		if !strings.Contains(s, part) {
			return false
		}
	}
	return true
}

// voterCandidate is the voter controller's placement pod.
func voterCandidate(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{holdfastv1.LabelRole: holdfastv1.RoleVoterCandidate}},
		Spec: corev1.PodSpec{
			SchedulerName:                 holdfastv1.SchedulerName,
			AutomountServiceAccountToken:  ptrTo(false),
			TerminationGracePeriodSeconds: ptrTo[int64](0),
			Containers:                    []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
}

func getPolicy(t testing.TB) *holdfastv1.VoterPolicy {
	t.Helper()
	var p holdfastv1.VoterPolicy
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: holdfastv1.VoterPolicyName}, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// fitnessJSON is a node plugin's fitness report (holdfastv1.Fitness) with
// one voter peer.
func fitnessJSON(fsyncMillis, rttMillis float64, at time.Time) string {
	b, err := json.Marshal(holdfastv1.Fitness{FsyncP99Micros: int64(fsyncMillis * 1000), FsyncSamples: 100,
		PeerRTTMicros: map[string]int64{"https://127.0.0.1:2380": int64(rttMillis * 1000)}, At: metav1.NewTime(at)})
	if err != nil {
		panic(err)
	}
	return string(b)
}
