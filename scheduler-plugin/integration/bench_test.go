//go:build integration

package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/legacyregistry"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/units"
	hfscheme "github.com/holdfast-io/holdfast/scheduler-plugin/apis/config/scheme"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/plugintest"
)

// The benchmark cluster: 5000 nodes in 100 racks of 50. Unit u of 100 has
// rack u as its primaries; units 50..99 are being re-bound away from the
// first node of their rack to a spare group of 50 nodes (racks 90..99, one
// group per last digit) that five units share, two of its nodes already
// tried.
const (
	benchNodes        = 5000
	benchRackSize     = 50
	benchUnits        = 100
	benchOrdinaryPods = 900 // plus one runtime pod per unit: 10% runtime pods
	benchWorkers      = 16
	benchQPS          = 5000
)

func benchNodeName(i int) string { return fmt.Sprintf("bench-%04d", i) }

func benchSpareGroup(i int) (string, bool) {
	if i/benchRackSize < 90 {
		return "", false
	}
	return fmt.Sprintf("spares-%d", i%10), true
}

// parallel runs fn for 0..n-1 on benchWorkers goroutines and returns the
// first error.
func parallel(n int, fn func(i int) error) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range benchWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// createBenchNodes creates the 5000 nodes once per test binary. A node may
// carry its status on create; admission still taints it not-ready, which
// the benchmark's pods tolerate (no node lifecycle controller runs here).
var createBenchNodes = sync.OnceValue(func() error {
	cs := kubernetes.NewForConfigOrDie(restConfig(benchQPS))
	capacity := corev1.ResourceList{corev1.ResourceCPU: mustQuantity("32"), corev1.ResourceMemory: mustQuantity("128Gi"), corev1.ResourcePods: mustQuantity("110")}
	return parallel(benchNodes, func(i int) error {
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: benchNodeName(i), Labels: map[string]string{
				"kubernetes.io/hostname": benchNodeName(i),
				"bench-rack":             fmt.Sprintf("rack-%d", i/benchRackSize),
			}},
			Status: corev1.NodeStatus{
				Capacity: capacity, Allocatable: capacity,
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
			},
		}
		if g, ok := benchSpareGroup(i); ok {
			n.Labels["bench-spares"] = g
		}
		_, err := cs.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{})
		return err
	})
})

// benchUnit is unit u of a batch, authorised for its epoch-1 runtime.
func benchUnit(ns string, u int) (*holdfastv1.Unit, holdfastv1.RuntimeBinding) {
	name := fmt.Sprintf("unit-%d", u)
	w := plugintest.MakeUnit(ns, name)
	w.UID = ""
	w.Spec.NodeSelector = map[string]string{"bench-rack": fmt.Sprintf("rack-%d", u)}
	binding := holdfastv1.RuntimeBinding{Epoch: 1, Origin: holdfastv1.OriginInitial}
	group := fmt.Sprintf("spares-%d", u%10)
	w.TargetSelector(&metav1.LabelSelector{MatchLabels: map[string]string{"bench-spares": group}})
	if u >= benchUnits/2 {
		// Re-bound away from the first node of its rack; two spares of its
		// group (racks 90 and 91, last digit u%10) already tried.
		binding.Origin = holdfastv1.OriginAutomatic
		binding.PreviousNode = benchNodeName(u * benchRackSize)
		binding.UnsettledRebinds = []string{benchNodeName(90*benchRackSize + u%10), benchNodeName(91*benchRackSize + u%10)}
	}
	return w.Obj(), binding
}

var tolerateNotReady = []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}

func benchPod(ns, name, schedulerName string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			SchedulerName:                 schedulerName,
			Tolerations:                   tolerateNotReady,
			AutomountServiceAccountToken:  ptrTo(false),
			TerminationGracePeriodSeconds: ptrTo[int64](0),
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: mustQuantity("100m"), corev1.ResourceMemory: mustQuantity("128Mi")},
			}}},
		},
	}
}

// benchBatch creates, in a fresh namespace with no scheduler running, the
// units and the same 1000 pods for schedulerName, then starts a scheduler
// with both profiles and times it from its start until every pod is bound.
func benchBatch(b *testing.B, profiles []schedconfig.KubeSchedulerProfile, schedulerName string) batchResult {
	b.Helper()
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(restConfig(benchQPS))
	nsObj, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ns := nsObj.Name
	defer func() {
		// No kubelet, no namespace controller: remove pods and units now.
		zero := int64(0)
		if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
			b.Errorf("deleting the batch's pods: %v", err)
		}
		if err := env.Client.DeleteAllOf(ctx, &holdfastv1.Unit{}, client.InNamespace(ns)); err != nil {
			b.Errorf("deleting the batch's units: %v", err)
		}
	}()

	err = parallel(benchUnits, func(u int) error {
		unit, binding := benchUnit(ns, u)
		if err := env.Client.Create(ctx, unit); err != nil {
			return err
		}
		unit.Status.RuntimeBinding = &binding
		return env.Client.Status().Update(ctx, unit)
	})
	if err != nil {
		b.Fatalf("creating units: %v", err)
	}
	// Every tenth pod is a runtime, so they are spread through the queue.
	// HOLDFAST_BENCH_PODS=ordinary or =runtime creates one kind only, to
	// tell which kind of pod a profile's cost comes from.
	mix := os.Getenv("HOLDFAST_BENCH_PODS")
	total := benchOrdinaryPods + benchUnits
	every := total / benchUnits
	isRuntime := func(i int) bool { return i%every == every-1 }
	var indices []int
	for i := range total {
		if mix == "" || (mix == "runtime") == isRuntime(i) {
			indices = append(indices, i)
		}
	}
	total = len(indices)
	err = parallel(total, func(j int) error {
		i := indices[j]
		pod := benchPod(ns, fmt.Sprintf("pod-%d", i), schedulerName, map[string]string{"app": fmt.Sprintf("app-%d", i%20)})
		if isRuntime(i) {
			u := i / every
			unit := fmt.Sprintf("unit-%d", u)
			pod = benchPod(ns, units.PodName(unit, 1), schedulerName, map[string]string{holdfastv1.LabelUnit: unit, holdfastv1.LabelEpoch: "1"})
		}
		_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		b.Fatalf("creating pods: %v", err)
	}

	// Count bound pods from a watch of the batch's namespace.
	var bound sync.Map
	var boundCount atomic.Int64
	allBound := make(chan struct{})
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	// When each pod was seen bound, by kind, from the scheduler's start: the
	// tail tells whether a profile is slower throughout or only at the end.
	var startNanos atomic.Int64
	var boundAtMu sync.Mutex
	boundAt := map[bool][]time.Duration{}
	note := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok && pod.Spec.NodeName != "" {
			if _, seen := bound.LoadOrStore(pod.Name, true); seen {
				return
			}
			_, runtime := pod.Labels[holdfastv1.LabelUnit]
			boundAtMu.Lock()
			boundAt[runtime] = append(boundAt[runtime], time.Duration(time.Now().UnixNano()-startNanos.Load()))
			boundAtMu.Unlock()
			if boundCount.Add(1) == int64(total) {
				close(allBound)
			}
		}
	}
	if _, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: note, UpdateFunc: func(_, obj any) { note(obj) },
	}); err != nil {
		b.Fatal(err)
	}
	factory.Start(watchCtx.Done())
	factory.WaitForCacheSync(watchCtx.Done())

	s, err := buildScheduler(profiles, benchQPS)
	if err != nil {
		b.Fatal(err)
	}
	defer s.stop()
	runtime.GC()
	quiet, err := settle()
	if err != nil {
		b.Fatal(err)
	}
	benchLog(b, "%s batch starts after %v of settling", schedulerName, quiet.Round(100*time.Millisecond))
	before := schedulerSeconds(b)
	cpuBefore, err := cpuTimes()
	if err != nil {
		b.Fatal(err)
	}
	writesBefore, err := apiserverWrites(ctx, cs)
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	start := time.Now()
	startNanos.Store(start.UnixNano())
	s.run()
	select {
	case <-allBound:
	case <-time.After(10 * time.Minute):
		b.Fatalf("%s: only %d of %d pods bound after 10 minutes", schedulerName, boundCount.Load(), total)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	after := schedulerSeconds(b)
	cpuAfter, err := cpuTimes()
	if err != nil {
		b.Fatal(err)
	}
	var cpu []string
	cpuSpent := map[string]float64{}
	for _, k := range slices.Sorted(maps.Keys(cpuAfter)) {
		cpuSpent[k] = cpuAfter[k] - cpuBefore[k]
		cpu = append(cpu, fmt.Sprintf("%s %.2fs", k, cpuSpent[k]))
	}
	benchLog(b, "%s CPU time while scheduling: %s", schedulerName, strings.Join(cpu, ", "))
	writesAfter, err := apiserverWrites(ctx, cs)
	if err != nil {
		b.Fatal(err)
	}
	var writes []string
	var writeCount float64
	for _, k := range slices.Sorted(maps.Keys(writesAfter)) {
		if n := writesAfter[k] - writesBefore[k]; n > 0 {
			writes = append(writes, fmt.Sprintf("%s %.0f", k, n))
			writeCount += n
		}
	}
	benchLog(b, "%s kube-apiserver writes while scheduling: %s", schedulerName, strings.Join(writes, ", "))
	boundAtMu.Lock()
	for _, runtime := range []bool{false, true} {
		if at := boundAt[runtime]; len(at) > 0 {
			slices.Sort(at)
			kind := map[bool]string{false: "ordinary", true: "runtime"}[runtime]
			benchLog(b, "%s %s pods bound at: 50%% %v, 90%% %v, last %v", schedulerName, kind,
				at[len(at)/2].Round(time.Millisecond), at[len(at)*9/10].Round(time.Millisecond), at[len(at)-1].Round(time.Millisecond))
		}
	}
	boundAtMu.Unlock()
	var spent []string
	for _, k := range slices.Sorted(maps.Keys(after)) {
		if d := after[k] - before[k]; d > 0.001 && strings.HasSuffix(k, "/"+schedulerName) {
			spent = append(spent, fmt.Sprintf("%s %.2fs", strings.TrimSuffix(k, "/"+schedulerName), d))
		}
	}
	benchLog(b, "%s scheduler time: %s", schedulerName, strings.Join(spent, ", "))

	if schedulerName == holdfastv1.SchedulerName && mix != "ordinary" {
		checkBenchPlacements(b, cs, ns)
	}
	return batchResult{elapsed: elapsed, pods: total, cpu: cpuSpent, writes: writeCount}
}

// batchResult is what one batch took: wall time, pods, CPU seconds by
// process, kube-apiserver writes.
type batchResult struct {
	elapsed time.Duration
	pods    int
	cpu     map[string]float64
	writes  float64
}

// schedulerSeconds sums, per extension point and profile, the time the
// in-process scheduler reports in its own metrics.
func schedulerSeconds(b *testing.B) map[string]float64 {
	b.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch f.GetName() {
			case "scheduler_framework_extension_point_duration_seconds":
				out[labels["extension_point"]+"/"+labels["profile"]] += m.GetHistogram().GetSampleSum()
			case "scheduler_scheduling_attempt_duration_seconds":
				out["attempt/"+labels["profile"]] += m.GetHistogram().GetSampleSum()
				out["attempts-"+labels["result"]+"/"+labels["profile"]] += float64(m.GetHistogram().GetSampleCount())
			case "scheduler_plugin_execution_duration_seconds":
				// Sampled (one cycle in ten); no profile label: attributed
				// to both, read for holdfast's own plugins.
				for _, profile := range []string{corev1.DefaultSchedulerName, holdfastv1.SchedulerName} {
					out["plugin "+labels["plugin"]+"."+labels["extension_point"]+"/"+profile] += m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return out
}

// checkBenchPlacements makes sure the holdfast batch placed every runtime
// by the rules: a throughput bought by placing runtimes anywhere is worth
// nothing.
func checkBenchPlacements(b *testing.B, cs kubernetes.Interface, ns string) {
	b.Helper()
	nodeIndex := map[string]int{}
	for i := range benchNodes {
		nodeIndex[benchNodeName(i)] = i
	}
	for u := range benchUnits {
		unit, binding := benchUnit(ns, u)
		pod, err := cs.CoreV1().Pods(ns).Get(context.Background(), units.PodName(unit.Name, 1), metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		i := nodeIndex[pod.Spec.NodeName]
		group, spare := benchSpareGroup(i)
		switch {
		case binding.Origin == holdfastv1.OriginInitial && i/benchRackSize != u:
			b.Fatalf("unit %d's first binding landed on %s, outside its rack", u, pod.Spec.NodeName)
		case binding.Origin == holdfastv1.OriginAutomatic && (!spare || group != fmt.Sprintf("spares-%d", u%10) ||
			slices.Contains(binding.UnsettledRebinds, pod.Spec.NodeName) || pod.Spec.NodeName == binding.PreviousNode):
			b.Fatalf("unit %d's re-bind landed on %s, not an untried spare of its group", u, pod.Spec.NodeName)
		}
	}
}

// defaultProfile is kube-scheduler's own default profile.
func defaultProfile(b *testing.B) schedconfig.KubeSchedulerProfile {
	b.Helper()
	cfg, err := hfscheme.LoadConfig([]byte("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"))
	if err != nil {
		b.Fatal(err)
	}
	return cfg.Profiles[0]
}

// BenchmarkSchedulingThroughput schedules the same 1000 pods (900 ordinary,
// 100 unit runtimes) on 5000 nodes with kube-scheduler's default profile and
// with the holdfast-scheduler profile the chart ships, in one scheduler,
// alternating which goes first, and reports both throughputs and their
// ratio (goal: holdfast/default >= 0.95). Run it with
//
//	go test -tags integration -run '^$' -bench SchedulingThroughput -benchtime 8x ./scheduler-plugin/integration/
func BenchmarkSchedulingThroughput(b *testing.B) {
	b.StopTimer()
	start := time.Now()
	if err := createBenchNodes(); err != nil {
		b.Fatalf("creating %d nodes: %v", benchNodes, err)
	}
	b.Logf("%d nodes ready after %v", benchNodes, time.Since(start).Round(time.Second))
	profiles := append([]schedconfig.KubeSchedulerProfile{defaultProfile(b)}, shippedConfig(b).Profiles...)

	var took = map[string]time.Duration{}
	pods := 0
	var pairRatios []float64
	cpu := map[string]map[string]float64{}
	writes := map[string]float64{}
	order := []string{corev1.DefaultSchedulerName, holdfastv1.SchedulerName}
	for i := range b.N {
		pair := map[string]time.Duration{}
		for j := range order {
			name := order[(i+j)%2]
			r := benchBatch(b, profiles, name)
			took[name] += r.elapsed
			pair[name] = r.elapsed
			pods += r.pods
			if cpu[name] == nil {
				cpu[name] = map[string]float64{}
			}
			for k, s := range r.cpu {
				cpu[name][k] += s
			}
			writes[name] += r.writes
			benchLog(b, "iteration %d/%d: %s bound %d pods in %v", i+1, b.N, name, r.pods, r.elapsed.Round(time.Millisecond))
		}
		ratio := pair[corev1.DefaultSchedulerName].Seconds() / pair[holdfastv1.SchedulerName].Seconds()
		pairRatios = append(pairRatios, ratio)
		benchLog(b, "pair %d/%d: holdfast/default %.3f", i+1, b.N, ratio)
	}
	perProfile := float64(pods / 2)
	defaultRate := perProfile / took[corev1.DefaultSchedulerName].Seconds()
	holdfastRate := perProfile / took[holdfastv1.SchedulerName].Seconds()
	inOrder := slices.Clone(pairRatios)
	slices.Sort(pairRatios)
	b.ReportMetric(defaultRate, "default-pods/s")
	b.ReportMetric(holdfastRate, "holdfast-pods/s")
	b.ReportMetric(holdfastRate/defaultRate, "holdfast/default")
	b.ReportMetric(median(pairRatios), "median-pair-ratio")
	b.ReportMetric(pairRatios[0], "min-pair-ratio")
	b.ReportMetric(pairRatios[len(pairRatios)-1], "max-pair-ratio")
	// CPU per batch moves less with the machine's load than wall time: the
	// ratio of the CPU the two profiles' batches cost (scheduler, clients,
	// kube-apiserver, etcd together) is the load-robust companion of the
	// wall-clock ratio.
	cpuAll := map[string]float64{}
	for _, name := range order {
		for k, s := range cpu[name] {
			cpuAll[name] += s
			b.ReportMetric(s/float64(b.N), name+"-"+strings.ReplaceAll(k, "+", "-")+"-cpu-s/batch")
		}
		b.ReportMetric(writes[name]/float64(b.N), name+"-writes/batch")
	}
	b.ReportMetric(cpuAll[corev1.DefaultSchedulerName]/cpuAll[holdfastv1.SchedulerName], "cpu-ratio")
	var ratios []string
	for _, r := range inOrder {
		ratios = append(ratios, fmt.Sprintf("%.3f", r))
	}
	benchLog(b, "summary: %d pairs, holdfast/default overall %.3f, median pair %.3f (pairs in order: %s), CPU per batch default %.2fs holdfast %.2fs (ratio %.3f), writes per batch default %.0f holdfast %.0f",
		b.N, holdfastRate/defaultRate, median(pairRatios), strings.Join(ratios, ", "),
		cpuAll[corev1.DefaultSchedulerName]/float64(b.N), cpuAll[holdfastv1.SchedulerName]/float64(b.N),
		cpuAll[corev1.DefaultSchedulerName]/cpuAll[holdfastv1.SchedulerName],
		writes[corev1.DefaultSchedulerName]/float64(b.N), writes[holdfastv1.SchedulerName]/float64(b.N))
}

// median is the middle of sorted values, the mean of the middle two for an
// even count.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// benchLog writes a progress line to stderr as well: go test keeps only
// part of a benchmark's log.
func benchLog(b *testing.B, format string, args ...any) {
	b.Helper()
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	b.Logf(format, args...)
}
