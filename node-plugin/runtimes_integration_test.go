//go:build integration

package nodeplugin_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/fence"
)

// TestTheNodeReportsItsRuntimesAfterAPodWasSeenGone (docs/design.md §3
// L11/L13): the node plugin lists, from the real containerd, the runtime
// pods running on its host in holdfast.io/runtimes on its own Node, with
// their unit, epoch and pod UID, whether or not their Pod object exists.
// Once the controller records that it saw a handed-over runtime's pod gone
// (handOver.podGoneAt), the next listing answers that time, and lists the
// runtime for as long as its process runs: a pod gone is not a process
// gone. Once the runtime is stopped, a listing answering the same time
// lists none of it.
func TestTheNodeReportsItsRuntimesAfterAPodWasSeenGone(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	const node = "rt-1"
	createNode(t, node)
	ps := freePorts(t, 2)
	u := r.unit("mixer", holdfastv1.Autonomy, ps[0], 1)
	other := r.unit("dryer", holdfastv1.Autonomy, ps[1], 1)
	for _, x := range []*holdfastv1.Unit{u, other} {
		x.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{Node: node, Epoch: 1, Pod: x.Name + "-runtime-e1"}
		if err := env.Client.Status().Update(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	sb, c := r.runtime("mixer", 1, ps[0], holdfastv1.Autonomy)
	_, otherC := r.runtime("dryer", 1, ps[1], holdfastv1.Autonomy)

	agent := &fence.Agent{CRI: r.rt, Lease: fence.HTTPLease{}, Clock: clock.RealClock{}}
	startManager(t, func(mgr ctrl.Manager) error {
		agent.Units = fence.CacheUnits{Client: mgr.GetClient()}
		rep := &fence.RuntimesReporter{Agent: agent, Client: mgr.GetClient(), Units: mgr.GetClient(), NodeName: node, Clock: clock.RealClock{}}
		return mgr.Add(&fence.Loop{Agent: agent, Runtimes: rep, Probe: func(context.Context) error { return nil }, Every: 100 * time.Millisecond, Clock: clock.RealClock{}})
	})

	report := func() *holdfastv1.RuntimesReport {
		n := &corev1.Node{}
		if err := env.Client.Get(ctx, types.NamespacedName{Name: node}, n); err != nil {
			t.Fatal(err)
		}
		return holdfastv1.RuntimesReportOf(n.Annotations)
	}
	lists := func(rep *holdfastv1.RuntimesReport, unit string) bool {
		for _, rt := range rep.Runtimes {
			if rt.Namespace == r.ns && rt.Unit == unit && rt.Epoch == 1 && rt.Pod == unit+"-runtime-e1" && rt.PodUID == unit+"-runtime-e1-uid" {
				return true
			}
		}
		return false
	}
	answers := func(rep *holdfastv1.RuntimesReport, at metav1.Time) bool {
		for _, a := range rep.Answers {
			if a.Namespace == r.ns && a.Unit == "mixer" && a.PodGoneAt.Equal(&at) {
				return true
			}
		}
		return false
	}
	waitFor(t, "both runtimes listed", func() bool { rep := report(); return rep != nil && lists(rep, "mixer") && lists(rep, "dryer") })
	if rep := report(); len(rep.Answers) != 0 {
		t.Fatalf("answers %+v before any hand-over", rep.Answers)
	}

	// The controller saw mixer's pod gone (no Pod object ever existed
	// here: the process runs on all the same).
	gone := metav1.NewTime(time.Now().Truncate(time.Second))
	u.Status.RuntimeBinding.HandOver = &holdfastv1.HandOver{Reason: "the Unit is deleted", Since: gone, PodGoneAt: &gone}
	if err := env.Client.Status().Update(ctx, u); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a listing answering podGoneAt", func() bool { rep := report(); return rep != nil && answers(rep, gone) })
	if rep := report(); !lists(rep, "mixer") || !r.running(c) {
		t.Fatalf("the answering listing %+v leaves out mixer's runtime, which still runs", rep)
	}

	// The kubelet (here the test, through CRI) stops it.
	if err := r.rt.StopContainer(ctx, c, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.rt.StopPodSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "mixer's runtime gone from an answering listing", func() bool {
		rep := report()
		return rep != nil && answers(rep, gone) && !lists(rep, "mixer")
	})
	if rep := report(); !lists(rep, "dryer") || !r.running(otherC) {
		t.Fatalf("listing %+v: dryer's runtime, still running, is left out", rep)
	}
}
