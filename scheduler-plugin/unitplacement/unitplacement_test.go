package unitplacement

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
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
