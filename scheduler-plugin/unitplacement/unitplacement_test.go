package unitplacement

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/scheduler-plugin/apis/config"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/nodeindex"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/plugintest"
)

const ns = plugintest.Namespace

var now = time.Date(2026, 9, 3, 10, 0, 0, 0, time.UTC)

// The plant: boiler-1's primaries carry holdfast.io/device=boiler-1; its
// standbys are three named nodes and every node labelled pool=spare;
// mixer-2 shares the spares.
func plant() []*corev1.Node {
	return []*corev1.Node{
		plugintest.ReadyNode("primary-1").Label("holdfast.io/device", "boiler-1").Obj(),
		plugintest.ReadyNode("primary-2").Label("holdfast.io/device", "boiler-1").
			Condition(corev1.NodeReady, corev1.ConditionFalse, "KubeletNotReady", "").Obj(),
		plugintest.ReadyNode("standby-1").Obj(),
		plugintest.ReadyNode("standby-2").Unschedulable(true).Obj(),
		plugintest.ReadyNode("standby-3").Taints([]corev1.Taint{{Key: "maintenance", Effect: corev1.TaintEffectNoSchedule}}).Obj(),
		plugintest.ReadyNode("standby-4").Taints([]corev1.Taint{{Key: "holdfast.io/standby", Effect: corev1.TaintEffectNoSchedule}}).Obj(),
		plugintest.ReadyNode("spare-1").Label("pool", "spare").Obj(),
		plugintest.ReadyNode("other").Obj(),
	}
}

func boiler() *plugintest.UnitWrapper {
	return plugintest.MakeUnit(ns, "boiler-1").
		Targets("standby-1", "standby-2", "standby-3", "standby-4").
		TargetSelector(&metav1.LabelSelector{MatchLabels: map[string]string{"pool": "spare"}})
}

func mixer() *plugintest.UnitWrapper {
	return plugintest.MakeUnit(ns, "mixer-2").
		TargetSelector(&metav1.LabelSelector{MatchLabels: map[string]string{"pool": "spare"}})
}

func defaultArgs(t *testing.T) *config.UnitPlacementArgs {
	t.Helper()
	args, err := getArgs(nil)
	if err != nil {
		t.Fatal(err)
	}
	return args
}

// build is the plugin over the plant and the given API objects.
func build(t *testing.T, c client.Client, pods ...*corev1.Pod) (*UnitPlacement, fwk.Handle) {
	t.Helper()
	fh, _ := plugintest.Handle(t, plant(), pods)
	return newTestPlugin(t, fh, c, c), fh
}

func newTestPlugin(t *testing.T, fh fwk.Handle, units client.Reader, live client.Client) *UnitPlacement {
	t.Helper()
	pl, err := newPlugin(context.Background(), fh, defaultArgs(t), units, live, indexOf(t, fh), testingclock.NewFakePassiveClock(now))
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

// indexOf is a node index holding the handle's nodes, as the Node
// informer's handler fills it.
func indexOf(t testing.TB, fh fwk.Handle) *nodeindex.Index {
	t.Helper()
	nodes, err := fh.SharedInformerFactory().Core().V1().Nodes().Lister().List(labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	index := nodeindex.New()
	for _, n := range nodes {
		index.Add(n)
	}
	return index
}

// bindings records the pods/binding creates that reach the framework's
// clientset, as "pod on node"; when fail is not nil the apiserver answers
// each with it instead.
func bindings(fh fwk.Handle, fail error) *[]string {
	var got []string
	fh.ClientSet().(*clientsetfake.Clientset).PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		if fail != nil {
			return true, nil, fail
		}
		b := a.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
		got = append(got, b.Name+" on "+b.Target.Name)
		return true, b, nil
	})
	return &got
}

func statusString(s *fwk.Status) string {
	if s.IsSuccess() {
		return "Success"
	}
	return fmt.Sprintf("%s: %s", s.Code(), s.Message())
}

func TestPreFilter(t *testing.T) {
	for _, tc := range []struct {
		name string
		unit *holdfastv1.Unit
		pod  *corev1.Pod
		want string
	}{
		{
			name: "the authorised pod",
			unit: boiler().Authorised(holdfastv1.RuntimeBinding{Epoch: 1}).Obj(),
			pod:  plugintest.RuntimePod(ns, "boiler-1", 1).Obj(),
			want: "Success",
		},
		{
			name: "a pod without the unit label is not ours",
			pod:  st.MakePod().Namespace(ns).Name("web").Label("app", "web").Obj(),
			want: "Skip: ",
		},
		{
			name: "unit missing",
			pod:  plugintest.RuntimePod(ns, "boiler-1", 1).Obj(),
			want: "UnschedulableAndUnresolvable: unit boiler-1 not found",
		},
		{
			name: "no epoch label",
			unit: boiler().Authorised(holdfastv1.RuntimeBinding{Epoch: 1}).Obj(),
			pod:  plugintest.RuntimePod(ns, "boiler-1", 1).Label(holdfastv1.LabelEpoch, "one").Obj(),
			want: "UnschedulableAndUnresolvable: no valid holdfast.io/epoch label",
		},
		{
			name: "no binding authorised yet",
			unit: boiler().Obj(),
			pod:  plugintest.RuntimePod(ns, "boiler-1", 1).Obj(),
			want: "UnschedulableAndUnresolvable: unit boiler-1 has no authorised binding",
		},
		{
			name: "epoch already bound to another pod",
			unit: boiler().Authorised(holdfastv1.RuntimeBinding{Epoch: 4, Node: "primary-1", Pod: "boiler-1-runtime-e4"}).Obj(),
			pod:  plugintest.RuntimePod(ns, "boiler-1", 4).Name("boiler-1-runtime-e4-copy").Obj(),
			want: "UnschedulableAndUnresolvable: epoch 4 of unit boiler-1 is already bound to node primary-1 by pod boiler-1-runtime-e4",
		},
		{
			name: "epoch reserved for another pod",
			unit: boiler().Authorised(holdfastv1.RuntimeBinding{Epoch: 4, Pod: "boiler-1-runtime-e4"}).Obj(),
			pod:  plugintest.RuntimePod(ns, "boiler-1", 4).Name("boiler-1-runtime-e4-copy").Obj(),
			want: "UnschedulableAndUnresolvable: epoch 4 of unit boiler-1 belongs to pod boiler-1-runtime-e4",
		},
		{
			name: "node recorded without a pod",
			unit: boiler().Authorised(holdfastv1.RuntimeBinding{Epoch: 4, Node: "primary-1"}).Obj(),
			pod:  plugintest.RuntimePod(ns, "boiler-1", 4).Obj(),
			want: "UnschedulableAndUnresolvable: epoch 4 of unit boiler-1 is already bound to node primary-1",
		},
		{
			name: "automatic re-bind of an Autonomy unit",
			unit: boiler().Mode(holdfastv1.Autonomy).Authorised(holdfastv1.RuntimeBinding{Epoch: 2, Origin: holdfastv1.OriginAutomatic, PreviousNode: "primary-1"}).Obj(),
			pod:  plugintest.RuntimePod(ns, "boiler-1", 2).Obj(),
			want: "UnschedulableAndUnresolvable: unit boiler-1 is in Autonomy mode: only a person's failover re-binds it",
		},
		{
			name: "a binding without origin that leaves a node is automatic",
			unit: boiler().Mode(holdfastv1.Autonomy).Authorised(holdfastv1.RuntimeBinding{Epoch: 2, PreviousNode: "primary-1"}).Obj(),
			pod:  plugintest.RuntimePod(ns, "boiler-1", 2).Obj(),
			want: "UnschedulableAndUnresolvable: unit boiler-1 is in Autonomy mode: only a person's failover re-binds it",
		},
		{
			name: "manual re-bind of an Autonomy unit",
			unit: boiler().Mode(holdfastv1.Autonomy).Authorised(holdfastv1.RuntimeBinding{Epoch: 2, Origin: holdfastv1.OriginManual, PreviousNode: "primary-1"}).Obj(),
			pod:  plugintest.RuntimePod(ns, "boiler-1", 2).Obj(),
			want: "Success",
		},
		{
			name: "invalid target selector",
			unit: boiler().TargetSelector(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: "Near"}}}).
				Authorised(holdfastv1.RuntimeBinding{Epoch: 2, PreviousNode: "primary-1"}).Obj(),
			pod:  plugintest.RuntimePod(ns, "boiler-1", 2).Obj(),
			want: `UnschedulableAndUnresolvable: unit boiler-1 has an invalid spec.availability.targets.selector: "Near" is not a valid label selector operator`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []client.Object
			if tc.unit != nil {
				objs = append(objs, tc.unit)
			}
			pl, _ := build(t, plugintest.Client(interceptor.Funcs{}, objs...))
			_, status := pl.PreFilter(context.Background(), framework.NewCycleState(), tc.pod, nil)
			if got := statusString(status); got != tc.want {
				t.Errorf("PreFilter = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestL7PodOfAnotherEpochIsUnschedulable: a runtime pod whose epoch is not
// the unit's authorised one is refused before any node is looked at, and
// unresolvably, so preemption is never tried on its behalf (docs/design.md §3 L7,
// §4).
func TestL7PodOfAnotherEpochIsUnschedulable(t *testing.T) {
	for _, podEpoch := range []int64{4, 6} {
		unit := boiler().Authorised(holdfastv1.RuntimeBinding{Epoch: 5, PreviousNode: "primary-1"}).Obj()
		pl, _ := build(t, plugintest.Client(interceptor.Funcs{}, unit))
		_, status := pl.PreFilter(context.Background(), framework.NewCycleState(), plugintest.RuntimePod(ns, "boiler-1", podEpoch).Obj(), nil)
		want := fmt.Sprintf("UnschedulableAndUnresolvable: epoch %d is not the authorised epoch 5 of unit boiler-1", podEpoch)
		if got := statusString(status); got != want {
			t.Errorf("epoch %d: PreFilter = %q, want %q", podEpoch, got, want)
		}
	}
}

// filterAll runs PreFilter then Filter on every node of the plant.
func filterAll(t *testing.T, unit *holdfastv1.Unit, pod *corev1.Pod) map[string]string {
	t.Helper()
	pl, fh := build(t, plugintest.Client(interceptor.Funcs{}, unit))
	state := framework.NewCycleState()
	if _, status := pl.PreFilter(context.Background(), state, pod, nil); !status.IsSuccess() {
		t.Fatalf("PreFilter: %v", status)
	}
	got := map[string]string{}
	for _, n := range plant() {
		got[n.Name] = statusString(pl.Filter(context.Background(), state, pod, plugintest.NodeInfo(t, fh, n.Name)))
	}
	return got
}

const refused = "UnschedulableAndUnresolvable: "

func TestFilter(t *testing.T) {
	for _, tc := range []struct {
		name    string
		binding holdfastv1.RuntimeBinding
		pod     *corev1.Pod
		want    map[string]string
	}{
		{
			name:    "first binding goes to a Ready primary",
			binding: holdfastv1.RuntimeBinding{Epoch: 1, Origin: holdfastv1.OriginInitial},
			want: map[string]string{
				"primary-1": "Success",
				"primary-2": refused + "not ready",
				"standby-1": refused + "not a primary node of unit boiler-1",
				"standby-2": refused + "not a primary node of unit boiler-1",
				"standby-3": refused + "not a primary node of unit boiler-1",
				"standby-4": refused + "not a primary node of unit boiler-1",
				"spare-1":   refused + "not a primary node of unit boiler-1",
				"other":     refused + "not a primary node of unit boiler-1",
			},
		},
		{
			name:    "automatic re-bind goes to a free target, never back",
			binding: holdfastv1.RuntimeBinding{Epoch: 3, Origin: holdfastv1.OriginAutomatic, PreviousNode: "primary-1"},
			pod:     plugintest.RuntimePod(ns, "boiler-1", 3).Tolerations([]corev1.Toleration{{Key: "holdfast.io/standby", Operator: corev1.TolerationOpExists}}).Obj(),
			want: map[string]string{
				"primary-1": refused + "the node being left",
				"primary-2": refused + "not a failover target of unit boiler-1",
				"standby-1": "Success",
				"standby-2": refused + "cordoned",
				"standby-3": refused + "untolerated taint maintenance",
				"standby-4": "Success",
				"spare-1":   "Success",
				"other":     refused + "not a failover target of unit boiler-1",
			},
		},
		{
			name:    "manual re-bind goes to an eligible target, never back, whatever the ledger",
			binding: holdfastv1.RuntimeBinding{Epoch: 3, Origin: holdfastv1.OriginManual, PreviousNode: "primary-1", UnsettledRebinds: []string{"spare-1"}},
			want: map[string]string{
				"primary-1": refused + "the node being left",
				"primary-2": refused + "not a failover target of unit boiler-1",
				"standby-1": "Success",
				"standby-2": refused + "cordoned",
				"standby-3": refused + "untolerated taint maintenance",
				"standby-4": refused + "untolerated taint holdfast.io/standby",
				"spare-1":   "Success",
				"other":     refused + "not a failover target of unit boiler-1",
			},
		},
		{
			name:    "a pod whose binding is recorded goes to that node only",
			binding: holdfastv1.RuntimeBinding{Epoch: 3, PreviousNode: "primary-1", Node: "spare-1", Pod: "boiler-1-runtime-e3", UnsettledRebinds: []string{"spare-1"}},
			want: map[string]string{
				"primary-1": refused + "epoch 3 is bound to node spare-1",
				"primary-2": refused + "epoch 3 is bound to node spare-1",
				"standby-1": refused + "epoch 3 is bound to node spare-1",
				"standby-2": refused + "epoch 3 is bound to node spare-1",
				"standby-3": refused + "epoch 3 is bound to node spare-1",
				"standby-4": refused + "epoch 3 is bound to node spare-1",
				"spare-1":   "Success",
				"other":     refused + "epoch 3 is bound to node spare-1",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := tc.pod
			if pod == nil {
				pod = plugintest.RuntimePod(ns, "boiler-1", tc.binding.Epoch).Obj()
			}
			got := filterAll(t, boiler().Authorised(tc.binding).Obj(), pod)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Filter per node (-want +got):\n%s", diff)
			}
		})
	}
}

// TestL5BudgetAutomaticRebindNeverReturnsToATriedStandby: the automatic path
// tries each free eligible standby at most once between confirmed runtimes;
// a standby named in unsettledRebinds is refused, and with every standby
// tried nothing is admitted at all (docs/design.md §3 L5).
func TestL5BudgetAutomaticRebindNeverReturnsToATriedStandby(t *testing.T) {
	binding := holdfastv1.RuntimeBinding{Epoch: 7, PreviousNode: "standby-1", UnsettledRebinds: []string{"standby-1", "spare-1"}}
	unit := boiler().Targets("standby-1").Authorised(binding).Obj()
	_, status := preFilterAll(t, unit, plugintest.RuntimePod(ns, "boiler-1", 7).Obj())
	wantStatus := refused + "1 already tried in this failover, 1 the node being left, 6 not a failover target of unit boiler-1"
	if got := statusString(status); got != wantStatus {
		t.Errorf("PreFilter = %q, want %q", got, wantStatus)
	}
	got := filterAll(t, unit, plugintest.RuntimePod(ns, "boiler-1", 7).Obj())
	want := map[string]string{
		"primary-1": refused + "not a failover target of unit boiler-1",
		"primary-2": refused + "not a failover target of unit boiler-1",
		"standby-1": refused + "the node being left",
		"standby-2": refused + "not a failover target of unit boiler-1",
		"standby-3": refused + "not a failover target of unit boiler-1",
		"standby-4": refused + "not a failover target of unit boiler-1",
		"spare-1":   refused + "already tried in this failover",
		"other":     refused + "not a failover target of unit boiler-1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Filter per node (-want +got):\n%s", diff)
	}
}

// preFilterAll runs PreFilter with every node of the plant, as the
// scheduler does.
func preFilterAll(t *testing.T, unit *holdfastv1.Unit, pod *corev1.Pod) (*fwk.PreFilterResult, *fwk.Status) {
	t.Helper()
	pl, fh := build(t, plugintest.Client(interceptor.Funcs{}, unit))
	nodes, err := fh.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		t.Fatal(err)
	}
	return pl.PreFilter(context.Background(), framework.NewCycleState(), pod, nodes)
}

func TestPreFilterNarrowsToTheNodesTheRulesConsider(t *testing.T) {
	for _, tc := range []struct {
		name    string
		unit    *holdfastv1.Unit
		binding holdfastv1.RuntimeBinding
		want    []string
	}{
		{name: "first binding: the primaries", unit: boiler().Obj(), binding: holdfastv1.RuntimeBinding{Epoch: 1},
			want: []string{"primary-1", "primary-2"}},
		{name: "automatic re-bind: the targets and the node being left", unit: boiler().Obj(),
			binding: holdfastv1.RuntimeBinding{Epoch: 2, PreviousNode: "primary-1", UnsettledRebinds: []string{"standby-1"}},
			want:    []string{"primary-1", "spare-1", "standby-1", "standby-2", "standby-3", "standby-4"}},
		{name: "manual re-bind: the targets and the node being left (NodeAffinity keeps the named one)", unit: boiler().Obj(),
			binding: holdfastv1.RuntimeBinding{Epoch: 2, Origin: holdfastv1.OriginManual, PreviousNode: "primary-1"},
			want:    []string{"primary-1", "spare-1", "standby-1", "standby-2", "standby-3", "standby-4"}},
		{name: "recorded binding: its node", unit: boiler().Obj(),
			binding: holdfastv1.RuntimeBinding{Epoch: 2, PreviousNode: "primary-1", Node: "spare-1", Pod: "boiler-1-runtime-e2"},
			want:    []string{"spare-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			unit := tc.unit.DeepCopy()
			unit.Status.RuntimeBinding = &tc.binding
			result, status := preFilterAll(t, unit, plugintest.RuntimePod(ns, "boiler-1", tc.binding.Epoch).Obj())
			if !status.IsSuccess() {
				t.Fatalf("PreFilter = %v", status)
			}
			if result == nil || result.AllNodes() {
				t.Fatalf("PreFilter result = %+v, want the considered nodes only", result)
			}
			if diff := cmp.Diff(tc.want, sets.List(result.NodeNames)); diff != "" {
				t.Errorf("considered nodes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPreFilterCountsEveryNodesReasonWhenNoneFits(t *testing.T) {
	unit := boiler().Targets("standby-2", "standby-3").
		Authorised(holdfastv1.RuntimeBinding{Epoch: 2, PreviousNode: "primary-1", UnsettledRebinds: []string{"spare-1"}}).Obj()
	_, status := preFilterAll(t, unit, plugintest.RuntimePod(ns, "boiler-1", 2).Obj())
	want := refused + "1 already tried in this failover, 1 cordoned, 1 the node being left, 1 untolerated taint maintenance, 4 not a failover target of unit boiler-1"
	if got := statusString(status); got != want {
		t.Errorf("PreFilter = %q\nwant        %q", got, want)
	}
}

func TestScorePrefersADedicatedStandbyThenTheLeastLoaded(t *testing.T) {
	unit := boiler().Targets("standby-1", "other").Authorised(holdfastv1.RuntimeBinding{Epoch: 2, PreviousNode: "primary-1"}).Obj()
	// standby-1 is dedicated but carries 3 of 4 CPUs and 4 of 8Gi; spare-1
	// is idle but mixer-2 names it too; other is dedicated and idle.
	busy := st.MakePod().Namespace("batch").Name("busy").UID("busy").
		Req(map[corev1.ResourceName]string{corev1.ResourceCPU: "3", corev1.ResourceMemory: "4Gi"}).Node("standby-1").Obj()
	c := plugintest.Client(interceptor.Funcs{}, unit, mixer().Obj())
	pl, fh := build(t, c, busy)
	pod := plugintest.RuntimePod(ns, "boiler-1", 2).Obj()
	state := framework.NewCycleState()
	if _, status := pl.PreFilter(context.Background(), state, pod, nil); !status.IsSuccess() {
		t.Fatal(status)
	}
	feasible := []fwk.NodeInfo{plugintest.NodeInfo(t, fh, "standby-1"), plugintest.NodeInfo(t, fh, "spare-1"), plugintest.NodeInfo(t, fh, "other")}
	if status := pl.PreScore(context.Background(), state, pod, feasible); !status.IsSuccess() {
		t.Fatal(status)
	}
	got := map[string]int64{}
	for _, ni := range feasible {
		score, status := pl.Score(context.Background(), state, pod, ni)
		if !status.IsSuccess() {
			t.Fatal(status)
		}
		got[ni.Node().Name] = score
	}
	// (2*dedicated + 1*free)/3, free the mean of free CPU and memory shares.
	want := map[string]int64{
		"standby-1": (2*100 + (25+50)/2) / 3, // 79
		"spare-1":   (2*0 + 100) / 3,         // 33
		"other":     (2*100 + 100) / 3,       // 100
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("scores (-want +got):\n%s", diff)
	}
}

// PreScore keeps each unit's compiled target rule between cycles: a unit
// whose targets change (a new generation) is judged by its new targets in
// the next cycle, and a deleted unit names nothing.
func TestPreScoreFollowsAnotherUnitsTargetsAcrossCycles(t *testing.T) {
	unit := boiler().Targets("standby-1", "other").Authorised(holdfastv1.RuntimeBinding{Epoch: 2, PreviousNode: "primary-1"}).Obj()
	other := mixer().Obj()
	other.Generation = 1
	c := plugintest.Client(interceptor.Funcs{}, unit, other)
	pl, fh := build(t, c)
	pod := plugintest.RuntimePod(ns, "boiler-1", 2).Obj()
	feasible := []fwk.NodeInfo{plugintest.NodeInfo(t, fh, "standby-1"), plugintest.NodeInfo(t, fh, "spare-1"), plugintest.NodeInfo(t, fh, "other")}
	shared := func() []string {
		t.Helper()
		state := framework.NewCycleState()
		if _, status := pl.PreFilter(context.Background(), state, pod, nil); !status.IsSuccess() {
			t.Fatal(status)
		}
		if status := pl.PreScore(context.Background(), state, pod, feasible); !status.IsSuccess() {
			t.Fatal(status)
		}
		data, err := state.Read(scoreStateKey)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Sorted(maps.Keys(data.(sharedTargets)))
	}
	if got := shared(); !slices.Equal(got, []string{"spare-1"}) {
		t.Fatalf("shared targets = %v, want spare-1 (mixer-2's pool)", got)
	}
	// mixer-2 now names other instead of its pool: a spec change.
	var m holdfastv1.Unit
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(other), &m); err != nil {
		t.Fatal(err)
	}
	m.Spec.Availability.Targets = &holdfastv1.FailoverTargets{Nodes: []string{"other"}}
	m.Generation = 2
	if err := c.Update(context.Background(), &m); err != nil {
		t.Fatal(err)
	}
	if got := shared(); !slices.Equal(got, []string{"other"}) {
		t.Errorf("after mixer-2's targets changed, shared targets = %v, want other", got)
	}
	if err := c.Delete(context.Background(), &m); err != nil {
		t.Fatal(err)
	}
	if got := shared(); len(got) != 0 {
		t.Errorf("after mixer-2 was deleted, shared targets = %v, want none", got)
	}
	if n := len(pl.targets.byUID); n != 1 {
		t.Errorf("%d target rules kept, want 1 (boiler-1's own; mixer-2's forgotten)", n)
	}
}

func TestPreScoreAndBindSkipOtherPods(t *testing.T) {
	pl, _ := build(t, plugintest.Client(interceptor.Funcs{}))
	state := framework.NewCycleState()
	pod := plugintest.VoterCandidatePod("kube-system", "candidate").Obj()
	if _, status := pl.PreFilter(context.Background(), state, pod, nil); !status.IsSkip() {
		t.Fatalf("PreFilter = %v, want Skip", status)
	}
	if status := pl.PreScore(context.Background(), state, pod, nil); !status.IsSkip() {
		t.Fatalf("PreScore = %v, want Skip", status)
	}
	if status := pl.Bind(context.Background(), state, pod, "standby-1"); !status.IsSkip() {
		t.Fatalf("Bind = %v, want Skip: DefaultBinder binds it", status)
	}
}

func getUnit(t *testing.T, c client.Client) *holdfastv1.Unit {
	t.Helper()
	var u holdfastv1.Unit
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "boiler-1"}, &u); err != nil {
		t.Fatal(err)
	}
	return &u
}

func TestBindRecordsTheNodeThenBindsThePod(t *testing.T) {
	for _, tc := range []struct {
		name    string
		binding holdfastv1.RuntimeBinding
		node    string
	}{
		{name: "first binding", binding: holdfastv1.RuntimeBinding{Epoch: 1, Pod: "boiler-1-runtime-e1", Origin: holdfastv1.OriginInitial}, node: "primary-1"},
		{name: "manual re-bind", binding: holdfastv1.RuntimeBinding{Epoch: 3, Origin: holdfastv1.OriginManual, PreviousNode: "primary-1", RequestID: "r-1"}, node: "spare-1"},
		{
			// The controller adds the recorded node of an Automatic
			// binding to the ledger; the scheduler writes only its node.
			name:    "automatic re-bind leaves the ledger to the controller",
			binding: holdfastv1.RuntimeBinding{Epoch: 3, Origin: holdfastv1.OriginAutomatic, PreviousNode: "primary-1", UnsettledRebinds: []string{"standby-3"}},
			node:    "standby-1",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			unit := boiler().Authorised(tc.binding).Obj()
			c := plugintest.Client(interceptor.Funcs{}, unit)
			pl, fh := build(t, c)
			bound := bindings(fh, nil)
			pod := plugintest.RuntimePod(ns, "boiler-1", tc.binding.Epoch).Obj()
			if status := pl.Bind(context.Background(), framework.NewCycleState(), pod, tc.node); !status.IsSuccess() {
				t.Fatalf("Bind = %v", status)
			}
			want := tc.binding
			want.Node, want.Pod, want.BoundAt = tc.node, pod.Name, &metav1.Time{Time: now}
			if diff := cmp.Diff(&want, getUnit(t, c).Status.RuntimeBinding); diff != "" {
				t.Errorf("binding (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{pod.Name + " on " + tc.node}, *bound); diff != "" {
				t.Errorf("pods/binding (-want +got):\n%s", diff)
			}
		})
	}
}

// countingUpdates counts the plugin's status writes and, before the first,
// lets another writer change the Unit through the underlying client (not
// counted), so that the plugin's write carries a stale resourceVersion.
func countingUpdates(writes *int, before func(ctx context.Context, c client.Client)) interceptor.Funcs {
	return interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			*writes++
			if *writes == 1 && before != nil {
				before(ctx, c)
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	}
}

// TestL7OneEpochBindsOnePod: two pods (or two schedulers) racing for one
// epoch: the write of the one that lost carries a stale resourceVersion,
// conflicts, is re-read, finds the epoch bound and fails, and its pod is not
// bound; the winner's binding stands (docs/design.md §3 L7, §4).
func TestL7OneEpochBindsOnePod(t *testing.T) {
	unit := boiler().Authorised(holdfastv1.RuntimeBinding{Epoch: 5, PreviousNode: "primary-1"}).Obj()
	winner := holdfastv1.RuntimeBinding{Epoch: 5, PreviousNode: "primary-1", Node: "spare-1", Pod: "boiler-1-runtime-e5-a",
		BoundAt: &metav1.Time{Time: now.Add(-time.Second)}, UnsettledRebinds: []string{"spare-1"}}
	var writes int
	c := plugintest.Client(countingUpdates(&writes, func(ctx context.Context, c client.Client) {
		u := getUnit(t, c)
		u.Status.RuntimeBinding = winner.DeepCopy()
		if err := c.Status().Update(ctx, u); err != nil {
			t.Fatalf("the racing writer: %v", err)
		}
	}), unit)
	pl, fh := build(t, c)
	bound := bindings(fh, nil)
	loser := plugintest.RuntimePod(ns, "boiler-1", 5).Name("boiler-1-runtime-e5-b").Obj()

	status := pl.Bind(context.Background(), framework.NewCycleState(), loser, "standby-1")

	want := refused + "epoch 5 of unit boiler-1 is already bound to node spare-1 by pod boiler-1-runtime-e5-a"
	if got := statusString(status); got != want {
		t.Errorf("Bind of the losing pod = %q, want %q", got, want)
	}
	if len(*bound) != 0 {
		t.Errorf("pods/binding = %v, want none for the losing pod", *bound)
	}
	if writes != 1 {
		t.Errorf("status writes = %d, want 1 (the loser's conflicting one; the re-read refuses)", writes)
	}
	if diff := cmp.Diff(&winner, getUnit(t, c).Status.RuntimeBinding); diff != "" {
		t.Errorf("the winner's binding changed (-want +got):\n%s", diff)
	}
}

// TestL7OneEpochBindsOnePodWhenTheInformerLags: Bind's first attempt
// starts from the informer's copy; when that copy is behind (the epoch was
// taken meanwhile), the write conflicts and the apiserver's copy decides.
func TestL7OneEpochBindsOnePodWhenTheInformerLags(t *testing.T) {
	authorised := holdfastv1.RuntimeBinding{Epoch: 5, PreviousNode: "primary-1"}
	winner := holdfastv1.RuntimeBinding{Epoch: 5, PreviousNode: "primary-1", Node: "spare-1", Pod: "boiler-1-runtime-e5-a", UnsettledRebinds: []string{"spare-1"}}
	live := plugintest.Client(interceptor.Funcs{}, boiler().Authorised(authorised).Obj())
	stale := getUnit(t, live) // the informer's copy, before the winner's write
	u := getUnit(t, live)
	u.Status.RuntimeBinding = winner.DeepCopy()
	if err := live.Status().Update(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	informer := plugintest.Client(interceptor.Funcs{}, stale)
	fh, _ := plugintest.Handle(t, plant(), nil)
	bound := bindings(fh, nil)
	pl := newTestPlugin(t, fh, informer, live)

	status := pl.Bind(context.Background(), framework.NewCycleState(), plugintest.RuntimePod(ns, "boiler-1", 5).Name("boiler-1-runtime-e5-b").Obj(), "standby-1")

	want := refused + "epoch 5 of unit boiler-1 is already bound to node spare-1 by pod boiler-1-runtime-e5-a"
	if got := statusString(status); got != want {
		t.Errorf("Bind = %q, want %q", got, want)
	}
	if len(*bound) != 0 {
		t.Errorf("pods/binding = %v, want none for the losing pod", *bound)
	}
	if diff := cmp.Diff(&winner, getUnit(t, live).Status.RuntimeBinding); diff != "" {
		t.Errorf("the winner's binding changed (-want +got):\n%s", diff)
	}
}

func TestBindConfirmsARefusalReadFromTheInformer(t *testing.T) {
	// The informer still holds epoch 4; the apiserver has authorised 5.
	live := plugintest.Client(interceptor.Funcs{}, boiler().Authorised(holdfastv1.RuntimeBinding{Epoch: 5, PreviousNode: "primary-1"}).Obj())
	informer := plugintest.Client(interceptor.Funcs{}, boiler().Authorised(holdfastv1.RuntimeBinding{Epoch: 4, Node: "primary-1", Pod: "boiler-1-runtime-e4"}).Obj())
	fh, _ := plugintest.Handle(t, plant(), nil)
	bound := bindings(fh, nil)
	pl := newTestPlugin(t, fh, informer, live)
	if status := pl.Bind(context.Background(), framework.NewCycleState(), plugintest.RuntimePod(ns, "boiler-1", 5).Obj(), "standby-1"); !status.IsSuccess() {
		t.Fatalf("Bind = %v, want the apiserver's copy to decide", status)
	}
	if diff := cmp.Diff([]string{"boiler-1-runtime-e5 on standby-1"}, *bound); diff != "" {
		t.Errorf("pods/binding (-want +got):\n%s", diff)
	}
	if b := getUnit(t, live).Status.RuntimeBinding; b.Node != "standby-1" || b.Epoch != 5 {
		t.Errorf("binding = %+v, want epoch 5 on standby-1", b)
	}
}

func TestBindRetriesAConflictWithAnUnrelatedWrite(t *testing.T) {
	unit := boiler().Authorised(holdfastv1.RuntimeBinding{Epoch: 1}).Obj()
	var writes int
	renewed := metav1.NewMicroTime(now.Add(-2 * time.Second))
	c := plugintest.Client(countingUpdates(&writes, func(ctx context.Context, c client.Client) {
		u := getUnit(t, c)
		u.Status.RuntimeBinding.LastAcknowledgedRenewal = &renewed
		if err := c.Status().Update(ctx, u); err != nil {
			t.Fatalf("the grantor's write: %v", err)
		}
	}), unit)
	pl, fh := build(t, c)
	bound := bindings(fh, nil)
	if status := pl.Bind(context.Background(), framework.NewCycleState(), plugintest.RuntimePod(ns, "boiler-1", 1).Obj(), "primary-1"); !status.IsSuccess() {
		t.Fatalf("Bind = %v", status)
	}
	got := getUnit(t, c).Status.RuntimeBinding
	if got.Node != "primary-1" || got.LastAcknowledgedRenewal == nil || !got.LastAcknowledgedRenewal.Equal(&renewed) {
		t.Errorf("binding = %+v, want the node recorded and the concurrent write kept", got)
	}
	if writes != 2 {
		t.Errorf("status writes = %d, want 2 (the conflicting one and the retry)", writes)
	}
	if diff := cmp.Diff([]string{"boiler-1-runtime-e1 on primary-1"}, *bound); diff != "" {
		t.Errorf("pods/binding (-want +got):\n%s", diff)
	}
}

func TestBindRefusals(t *testing.T) {
	for _, tc := range []struct {
		name    string
		binding *holdfastv1.RuntimeBinding
		pod     *corev1.Pod
		node    string
		want    string
	}{
		{
			name:    "the controller moved on to another epoch",
			binding: &holdfastv1.RuntimeBinding{Epoch: 6, PreviousNode: "spare-1"},
			pod:     plugintest.RuntimePod(ns, "boiler-1", 5).Obj(),
			node:    "standby-1",
			want:    refused + "epoch 5 is not the authorised epoch 6 of unit boiler-1",
		},
		{
			name:    "the standby was tried meanwhile",
			binding: &holdfastv1.RuntimeBinding{Epoch: 5, PreviousNode: "primary-1", UnsettledRebinds: []string{"standby-1"}},
			pod:     plugintest.RuntimePod(ns, "boiler-1", 5).Obj(),
			node:    "standby-1",
			want:    refused + "node standby-1: already tried in this failover",
		},
		{
			name:    "this pod's binding names another node",
			binding: &holdfastv1.RuntimeBinding{Epoch: 5, PreviousNode: "primary-1", Node: "spare-1", Pod: "boiler-1-runtime-e5"},
			pod:     plugintest.RuntimePod(ns, "boiler-1", 5).Obj(),
			node:    "standby-1",
			want:    refused + "node standby-1: epoch 5 is bound to node spare-1",
		},
		{
			name: "the unit is gone",
			pod:  plugintest.RuntimePod(ns, "boiler-1", 5).Obj(),
			node: "standby-1",
			want: refused + "unit boiler-1 not found",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []client.Object
			if tc.binding != nil {
				objs = append(objs, boiler().Authorised(*tc.binding).Obj())
			}
			var writes int
			c := plugintest.Client(countingUpdates(&writes, nil), objs...)
			pl, fh := build(t, c)
			bound := bindings(fh, nil)
			if got := statusString(pl.Bind(context.Background(), framework.NewCycleState(), tc.pod, tc.node)); got != tc.want {
				t.Errorf("Bind = %q, want %q", got, tc.want)
			}
			if writes != 0 {
				t.Errorf("a refused Bind wrote the Unit %d times", writes)
			}
			if len(*bound) != 0 {
				t.Errorf("a refused Bind bound the pod: %v", *bound)
			}
		})
	}
}

// TestBindAfterACrashBindsToTheRecordedNode: the scheduler recorded the
// node and stopped (or the binding failed) before the pod was bound; the pod,
// scheduled again, is bound there without a second write.
func TestBindAfterACrashBindsToTheRecordedNode(t *testing.T) {
	binding := holdfastv1.RuntimeBinding{Epoch: 5, PreviousNode: "primary-1", Node: "spare-1", Pod: "boiler-1-runtime-e5", UnsettledRebinds: []string{"spare-1"}}
	var writes int
	c := plugintest.Client(countingUpdates(&writes, nil), boiler().Authorised(binding).Obj())
	pl, fh := build(t, c)
	bound := bindings(fh, nil)
	if status := pl.Bind(context.Background(), framework.NewCycleState(), plugintest.RuntimePod(ns, "boiler-1", 5).Obj(), "spare-1"); !status.IsSuccess() {
		t.Fatalf("Bind = %v", status)
	}
	if writes != 0 {
		t.Errorf("status writes = %d, want none: the binding already records this pod there", writes)
	}
	if diff := cmp.Diff([]string{"boiler-1-runtime-e5 on spare-1"}, *bound); diff != "" {
		t.Errorf("pods/binding (-want +got):\n%s", diff)
	}
}

// TestBindKeepsTheRecordWhenTheBindingFails: a binding reported as failed
// may have landed, so the record stays and the pod may go nowhere else.
func TestBindKeepsTheRecordWhenTheBindingFails(t *testing.T) {
	c := plugintest.Client(interceptor.Funcs{}, boiler().Authorised(holdfastv1.RuntimeBinding{Epoch: 1, Origin: holdfastv1.OriginInitial}).Obj())
	pl, fh := build(t, c)
	bindings(fh, apierrors.NewServiceUnavailable("etcd leader changed"))
	pod := plugintest.RuntimePod(ns, "boiler-1", 1).Obj()
	if status := pl.Bind(context.Background(), framework.NewCycleState(), pod, "primary-1"); status.Code() != fwk.Error {
		t.Fatalf("Bind = %v, want Error: the pod goes back to the queue", status)
	}
	if b := getUnit(t, c).Status.RuntimeBinding; b.Node != "primary-1" || b.Pod != pod.Name {
		t.Errorf("binding = %+v, want the record kept: primary-1 for %s", b, pod.Name)
	}
	// Scheduled again, the pod is admitted on the recorded node only.
	state := framework.NewCycleState()
	if _, status := pl.PreFilter(context.Background(), state, pod, nil); !status.IsSuccess() {
		t.Fatal(status)
	}
	for node, want := range map[string]string{"primary-1": "Success", "standby-1": refused + "epoch 1 is bound to node primary-1"} {
		if got := statusString(pl.Filter(context.Background(), state, pod, plugintest.NodeInfo(t, fh, node))); got != want {
			t.Errorf("Filter(%s) = %q, want %q", node, got, want)
		}
	}
}

func TestSignPodBatchesOnlyPodsThatAreNotRuntimes(t *testing.T) {
	pl, _ := build(t, plugintest.Client(interceptor.Funcs{}))
	if fragments, status := pl.SignPod(context.Background(), st.MakePod().Namespace(ns).Name("web").Obj()); !status.IsSuccess() || len(fragments) != 0 {
		t.Errorf("SignPod(ordinary pod) = %v, %v; want no fragments and Success: the plugin does nothing to it", fragments, status)
	}
	if _, status := pl.SignPod(context.Background(), plugintest.RuntimePod(ns, "boiler-1", 2).Obj()); status.Code() != fwk.Unschedulable {
		t.Errorf("SignPod(runtime pod) = %v, want Unschedulable: a runtime's placement is never reused", status)
	}
}

// TestPreFilterFromTheIndexEqualsAPassOverEveryNode: PreFilter judges only
// the candidates the node index names, and its result and refusal are the
// very ones a pass over every node gives. The index also holds a node the
// snapshot does not (the index is ahead of the scheduler's cache): it is
// never judged nor counted.
func TestPreFilterFromTheIndexEqualsAPassOverEveryNode(t *testing.T) {
	spareOrHot := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "pool", Operator: metav1.LabelSelectorOpIn, Values: []string{"spare", "hot"}}}}
	hasPool := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "pool", Operator: metav1.LabelSelectorOpExists}}}
	notHot := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "pool", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"hot"}}}}
	automatic := holdfastv1.RuntimeBinding{Epoch: 2, Origin: holdfastv1.OriginAutomatic, PreviousNode: "primary-1", UnsettledRebinds: []string{"standby-1"}}
	for _, tc := range []struct {
		name    string
		unit    *plugintest.UnitWrapper
		binding holdfastv1.RuntimeBinding
		// want is the refusal ("" when a node fits).
		want string
		// everyNode: the index cannot serve the selector.
		everyNode bool
	}{
		{name: "first binding", unit: boiler(), binding: holdfastv1.RuntimeBinding{Epoch: 1, Origin: holdfastv1.OriginInitial}},
		{name: "first binding, no primary fits", unit: boiler().Targets("primary-1"),
			binding: holdfastv1.RuntimeBinding{Epoch: 1, Origin: holdfastv1.OriginInitial, PreviousNode: "primary-1"},
			want:    "1 not ready, 1 the node being left, 6 not a primary node of unit boiler-1"},
		{name: "first binding, no primary at all", unit: unitWithNodeSelector(boiler(), map[string]string{"holdfast.io/device": "none"}),
			binding: holdfastv1.RuntimeBinding{Epoch: 1}, want: "8 not a primary node of unit boiler-1"},
		{name: "first binding, an empty nodeSelector selects nothing", unit: unitWithNodeSelector(boiler(), nil),
			binding: holdfastv1.RuntimeBinding{Epoch: 1}, want: "8 not a primary node of unit boiler-1"},
		{name: "automatic re-bind", unit: boiler(), binding: automatic},
		{name: "automatic re-bind, none fits", unit: boiler().Targets("standby-2", "standby-3"),
			binding: holdfastv1.RuntimeBinding{Epoch: 2, PreviousNode: "primary-1", UnsettledRebinds: []string{"spare-1"}},
			want:    "1 already tried in this failover, 1 cordoned, 1 the node being left, 1 untolerated taint maintenance, 4 not a failover target of unit boiler-1"},
		{name: "automatic re-bind, no targets", unit: plugintest.MakeUnit(ns, "boiler-1"), binding: automatic,
			want: "1 the node being left, 7 not a failover target of unit boiler-1"},
		{name: "automatic re-bind, In", unit: boiler().Targets().TargetSelector(spareOrHot), binding: automatic},
		{name: "automatic re-bind, Exists", unit: boiler().Targets().TargetSelector(hasPool), binding: automatic},
		{name: "automatic re-bind, only NotIn: every node", unit: boiler().Targets().TargetSelector(notHot), binding: automatic,
			// Every node but primary-1 lacks pool=hot: all are targets.
			everyNode: true},
		{name: "automatic re-bind, the node being left is gone", unit: boiler().Targets("standby-2"),
			binding: holdfastv1.RuntimeBinding{Epoch: 2, PreviousNode: "gone", UnsettledRebinds: []string{"spare-1"}},
			want:    "1 already tried in this failover, 1 cordoned, 6 not a failover target of unit boiler-1"},
		{name: "manual re-bind", unit: boiler(), binding: holdfastv1.RuntimeBinding{Epoch: 2, Origin: holdfastv1.OriginManual, PreviousNode: "primary-1"}},
		{name: "manual re-bind, none fits", unit: boiler().Targets("standby-2").TargetSelector(nil),
			binding: holdfastv1.RuntimeBinding{Epoch: 2, Origin: holdfastv1.OriginManual, PreviousNode: "primary-1"},
			want:    "1 cordoned, 1 the node being left, 6 not a failover target of unit boiler-1"},
		{name: "recorded binding", unit: boiler(), binding: holdfastv1.RuntimeBinding{Epoch: 2, PreviousNode: "primary-1", Node: "spare-1", Pod: "boiler-1-runtime-e2"}},
		{name: "recorded binding on a node that does not fit", unit: boiler(),
			binding: holdfastv1.RuntimeBinding{Epoch: 2, PreviousNode: "primary-1", Node: "standby-2", Pod: "boiler-1-runtime-e2"},
			want:    "1 cordoned, 7 epoch 2 is bound to node standby-2"},
		{name: "recorded binding on a node that is gone", unit: boiler(),
			binding: holdfastv1.RuntimeBinding{Epoch: 2, PreviousNode: "primary-1", Node: "gone", Pod: "boiler-1-runtime-e2"},
			want:    "8 epoch 2 is bound to node gone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			unit := tc.unit.Obj().DeepCopy()
			unit.Status.RuntimeBinding = &tc.binding
			pod := plugintest.RuntimePod(ns, "boiler-1", tc.binding.Epoch).Obj()
			pl, fh := build(t, plugintest.Client(interceptor.Funcs{}, unit))
			pl.nodes.Add(plugintest.ReadyNode("ghost").Label("holdfast.io/device", "boiler-1").Label("pool", "spare").Obj())
			snapshot := fh.SnapshotSharedLister().NodeInfos()
			nodes, err := snapshot.List()
			if err != nil {
				t.Fatal(err)
			}

			got, gotStatus := pl.PreFilter(context.Background(), framework.NewCycleState(), pod, nodes)

			p, status := authorise(unit, pod)
			if !status.IsSuccess() {
				t.Fatal(status)
			}
			if _, all := p.candidates(pl.nodes); all != tc.everyNode {
				t.Fatalf("every node judged = %v, want %v", all, tc.everyNode)
			}
			want, wantStatus := p.narrow(klog.Background(), pod, nodes, nil, snapshot)
			if diff := cmp.Diff(statusString(wantStatus), statusString(gotStatus)); diff != "" {
				t.Errorf("PreFilter status, the index's (+) against every node's (-):\n%s", diff)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("PreFilter result, the index's (+) against every node's (-):\n%s", diff)
			}
			wantRefusal := "Success"
			if tc.want != "" {
				wantRefusal = refused + tc.want
			}
			if got := statusString(gotStatus); got != wantRefusal {
				t.Errorf("PreFilter = %q, want %q", got, wantRefusal)
			}
			if got != nil && got.NodeNames.Has("ghost") {
				t.Errorf("PreFilter narrowed to a node the snapshot does not hold: %v", sets.List(got.NodeNames))
			}
		})
	}
}

func unitWithNodeSelector(u *plugintest.UnitWrapper, sel map[string]string) *plugintest.UnitWrapper {
	u.Spec.NodeSelector = sel
	return u
}
