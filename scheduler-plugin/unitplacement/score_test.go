package unitplacement

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/plugintest"
)

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
