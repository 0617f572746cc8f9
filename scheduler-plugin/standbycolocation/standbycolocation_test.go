package standbycolocation

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/scheduler-plugin/apis/config"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/plugintest"
)

const ns = plugintest.Namespace

func nodes() []*corev1.Node {
	var out []*corev1.Node
	for _, name := range []string{"standby-1", "standby-2", "standby-3", "standby-4", "standby-5"} {
		out = append(out, plugintest.ReadyNode(name).Obj())
	}
	return out
}

// pods already placed: mixer-2's runtime on standby-1; boiler-1's own
// previous runtime on standby-2; two other units' runtimes on standby-4; a
// same-named unit of another namespace on standby-5; standby-3 is empty
// but for an ordinary pod.
func pods() []*corev1.Pod {
	return []*corev1.Pod{
		plugintest.RuntimePod(ns, "mixer-2", 3).Node("standby-1").Obj(),
		plugintest.RuntimePod(ns, "boiler-1", 2).Node("standby-2").Obj(),
		st.MakePod().Namespace(ns).Name("web").UID("web").Node("standby-3").Obj(),
		plugintest.RuntimePod(ns, "mixer-2", 1).Name("mixer-2-old").UID("mixer-2-old").Node("standby-4").Obj(),
		plugintest.RuntimePod(ns, "kiln-4", 9).Node("standby-4").Obj(),
		plugintest.RuntimePod("site-b", "boiler-1", 1).Node("standby-5").Obj(),
	}
}

func build(t *testing.T, args *config.StandbyColocationArgs, objs ...client.Object) (*StandbyColocation, fwk.Handle, *events.FakeRecorder) {
	t.Helper()
	if args == nil {
		var err error
		if args, err = getArgs(nil); err != nil {
			t.Fatal(err)
		}
	}
	fh, recorder := plugintest.Handle(t, nodes(), pods())
	return newPlugin(fh, args, plugintest.Client(interceptor.Funcs{}, objs...)), fh, recorder
}

func statusString(s *fwk.Status) string {
	if s.IsSuccess() {
		return "Success"
	}
	return fmt.Sprintf("%s: %s", s.Code(), s.Message())
}

func unit(policy holdfastv1.ColocationPolicy) *holdfastv1.Unit {
	return plugintest.MakeUnit(ns, "boiler-1").Colocation(policy).
		Authorised(holdfastv1.RuntimeBinding{Epoch: 3, PreviousNode: "primary-1"}).Obj()
}

func TestPreFilter(t *testing.T) {
	refuseByDefault := &config.StandbyColocationArgs{DefaultPolicy: holdfastv1.ColocationRefuse, PenaltyPerRuntime: 50}
	for _, tc := range []struct {
		name string
		args *config.StandbyColocationArgs
		unit *holdfastv1.Unit
		pod  *corev1.Pod
		want string
	}{
		{name: "not a runtime pod", pod: st.MakePod().Namespace(ns).Name("web").Obj(), want: "Skip: "},
		{name: "unit missing", pod: plugintest.RuntimePod(ns, "boiler-1", 3).Obj(), want: "UnschedulableAndUnresolvable: unit boiler-1 not found"},
		{name: "Refuse filters", unit: unit(holdfastv1.ColocationRefuse), pod: plugintest.RuntimePod(ns, "boiler-1", 3).Obj(), want: "Success"},
		{name: "Warn does not filter", unit: unit(holdfastv1.ColocationWarn), pod: plugintest.RuntimePod(ns, "boiler-1", 3).Obj(), want: "Skip: "},
		{name: "unset policy takes the default Warn", unit: unit(""), pod: plugintest.RuntimePod(ns, "boiler-1", 3).Obj(), want: "Skip: "},
		{name: "unset policy takes a configured Refuse", args: refuseByDefault, unit: unit(""), pod: plugintest.RuntimePod(ns, "boiler-1", 3).Obj(), want: "Success"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []client.Object
			if tc.unit != nil {
				objs = append(objs, tc.unit)
			}
			pl, _, _ := build(t, tc.args, objs...)
			_, status := pl.PreFilter(context.Background(), framework.NewCycleState(), tc.pod, nil)
			if got := statusString(status); got != tc.want {
				t.Errorf("PreFilter = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFilterUnderRefuse(t *testing.T) {
	pl, fh, _ := build(t, nil, unit(holdfastv1.ColocationRefuse))
	pod := plugintest.RuntimePod(ns, "boiler-1", 3).Obj()
	state := framework.NewCycleState()
	if _, status := pl.PreFilter(context.Background(), state, pod, nil); !status.IsSuccess() {
		t.Fatal(status)
	}
	got := map[string]string{}
	for _, n := range nodes() {
		got[n.Name] = statusString(pl.Filter(context.Background(), state, pod, plugintest.NodeInfo(t, fh, n.Name)))
	}
	want := map[string]string{
		"standby-1": "UnschedulableAndUnresolvable: hosts the runtime of unit mixer-2",
		"standby-2": "Success", // its own previous runtime
		"standby-3": "Success",
		"standby-4": "UnschedulableAndUnresolvable: hosts the runtime of unit kiln-4",
		"standby-5": "UnschedulableAndUnresolvable: hosts the runtime of unit site-b/boiler-1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Filter per node (-want +got):\n%s", diff)
	}
}

func TestScoreUnderWarn(t *testing.T) {
	for _, tc := range []struct {
		policy holdfastv1.ColocationPolicy
		want   map[string]int64
	}{
		{holdfastv1.ColocationWarn, map[string]int64{"standby-1": 50, "standby-2": 100, "standby-3": 100, "standby-4": 0, "standby-5": 50}},
		{holdfastv1.ColocationRefuse, nil},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			pl, fh, _ := build(t, nil, unit(tc.policy))
			pod := plugintest.RuntimePod(ns, "boiler-1", 3).Obj()
			state := framework.NewCycleState()
			pl.PreFilter(context.Background(), state, pod, nil)
			status := pl.PreScore(context.Background(), state, pod, nil)
			if tc.want == nil {
				if !status.IsSkip() {
					t.Fatalf("PreScore under Refuse = %v, want Skip", status)
				}
				return
			}
			if !status.IsSuccess() {
				t.Fatalf("PreScore = %v", status)
			}
			got := map[string]int64{}
			for _, n := range nodes() {
				score, status := pl.Score(context.Background(), state, pod, plugintest.NodeInfo(t, fh, n.Name))
				if !status.IsSuccess() {
					t.Fatal(status)
				}
				got[n.Name] = score
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("scores (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWarnRecordsAWarningOnTheUnitWhenColocated(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy holdfastv1.ColocationPolicy
		node   string
		want   []string
	}{
		{name: "beside one runtime", policy: holdfastv1.ColocationWarn, node: "standby-1",
			want: []string{"Warning RuntimeColocated Runtime pod boiler-1-runtime-e3 placed on node standby-1 beside the runtime of unit mixer-2 (colocation: Warn)"}},
		{name: "beside two", policy: holdfastv1.ColocationWarn, node: "standby-4",
			want: []string{"Warning RuntimeColocated Runtime pod boiler-1-runtime-e3 placed on node standby-4 beside the runtimes of units kiln-4, mixer-2 (colocation: Warn)"}},
		{name: "alone", policy: holdfastv1.ColocationWarn, node: "standby-3"},
		{name: "beside its own previous runtime", policy: holdfastv1.ColocationWarn, node: "standby-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl, _, recorder := build(t, nil, unit(tc.policy))
			pod := plugintest.RuntimePod(ns, "boiler-1", 3).Obj()
			state := framework.NewCycleState()
			pl.PreFilter(context.Background(), state, pod, nil)
			if status := pl.Reserve(context.Background(), state, pod, tc.node); !status.IsSuccess() {
				t.Fatal(status)
			}
			pl.PostBind(context.Background(), state, pod, tc.node)
			var got []string
			for len(recorder.Events) > 0 {
				got = append(got, <-recorder.Events)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUnreserveForgetsTheColocation(t *testing.T) {
	pl, _, recorder := build(t, nil, unit(holdfastv1.ColocationWarn))
	pod := plugintest.RuntimePod(ns, "boiler-1", 3).Obj()
	state := framework.NewCycleState()
	pl.PreFilter(context.Background(), state, pod, nil)
	pl.Reserve(context.Background(), state, pod, "standby-1")
	pl.Unreserve(context.Background(), state, pod, "standby-1")
	pl.PostBind(context.Background(), state, pod, "standby-3")
	if len(recorder.Events) != 0 {
		t.Errorf("event recorded after Unreserve: %s", <-recorder.Events)
	}
}

func TestBadArgsRefuseToStart(t *testing.T) {
	_, err := getArgs(&config.StandbyColocationArgs{DefaultPolicy: "Share", PenaltyPerRuntime: 101})
	want := `[pluginConfig[StandbyColocation].args.defaultPolicy: Unsupported value: "Share": supported values: "Refuse", "Warn", pluginConfig[StandbyColocation].args.penaltyPerRuntime: Invalid value: 101: must be between 0 and 100]`
	if err == nil || err.Error() != want {
		t.Errorf("getArgs error = %v, want %s", err, want)
	}
}

func TestQueueingHintOnADeletedRuntime(t *testing.T) {
	pod := plugintest.RuntimePod(ns, "boiler-1", 3).Obj()
	for _, tc := range []struct {
		gone *corev1.Pod
		want fwk.QueueingHint
	}{
		{plugintest.RuntimePod(ns, "mixer-2", 3).Node("standby-1").Obj(), fwk.Queue},
		{plugintest.RuntimePod(ns, "mixer-2", 4).Obj(), fwk.QueueSkip}, // never placed
		{st.MakePod().Namespace(ns).Name("web").Node("standby-1").Obj(), fwk.QueueSkip},
	} {
		got, err := queueOnRuntimeGone(klog.Background(), pod, tc.gone, nil)
		if err != nil || got != tc.want {
			t.Errorf("hint for %s deleted = %v, %v; want %v", tc.gone.Name, got, err, tc.want)
		}
	}
}

func TestSignPodBatchesOnlyPodsThatAreNotRuntimes(t *testing.T) {
	pl, _, _ := build(t, nil)
	if fragments, status := pl.SignPod(context.Background(), st.MakePod().Namespace(ns).Name("web").Obj()); !status.IsSuccess() || len(fragments) != 0 {
		t.Errorf("SignPod(ordinary pod) = %v, %v; want no fragments and Success", fragments, status)
	}
	if _, status := pl.SignPod(context.Background(), plugintest.RuntimePod(ns, "boiler-1", 2).Obj()); status.Code() != fwk.Unschedulable {
		t.Errorf("SignPod(runtime pod) = %v, want Unschedulable", status)
	}
}

// A warm standby pod occupies its node as a runtime of its unit: under
// Refuse, no unit's re-bind lands beside another unit's warm pod, and no
// warm pod lands beside another unit's runtime (warm or not); a unit's own
// warm pod is no obstacle to it.
func TestAWarmPodCountsAsARuntimeOfItsUnit(t *testing.T) {
	placed := []*corev1.Pod{
		plugintest.RuntimePod(ns, "mixer-2", 3).Node("standby-1").Obj(),
		plugintest.WarmPod(ns, "mixer-2", "standby-2").Node("standby-2").Obj(),
		plugintest.WarmPod(ns, "boiler-1", "standby-3").Node("standby-3").Obj(),
	}
	args, err := getArgs(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
	}{
		{name: "boiler-1's re-bind", pod: plugintest.RuntimePod(ns, "boiler-1", 3).Obj()},
		{name: "boiler-1's warm pod", pod: plugintest.WarmPod(ns, "boiler-1", "standby-4").Obj()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fh, _ := plugintest.Handle(t, nodes(), placed)
			pl := newPlugin(fh, args, plugintest.Client(interceptor.Funcs{}, plugintest.MakeUnit(ns, "boiler-1").WarmStandby().
				Colocation(holdfastv1.ColocationRefuse).Authorised(holdfastv1.RuntimeBinding{Epoch: 3, PreviousNode: "primary-1"}).Obj()))
			state := framework.NewCycleState()
			if _, status := pl.PreFilter(context.Background(), state, tc.pod, nil); !status.IsSuccess() {
				t.Fatal(status)
			}
			got := map[string]string{}
			for _, n := range nodes() {
				got[n.Name] = statusString(pl.Filter(context.Background(), state, tc.pod, plugintest.NodeInfo(t, fh, n.Name)))
			}
			want := map[string]string{
				"standby-1": "UnschedulableAndUnresolvable: hosts the runtime of unit mixer-2",
				"standby-2": "UnschedulableAndUnresolvable: hosts the runtime of unit mixer-2", // its warm pod
				"standby-3": "Success",                                                         // boiler-1's own warm pod
				"standby-4": "Success",
				"standby-5": "Success",
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Filter per node (-want +got):\n%s", diff)
			}
		})
	}
}
