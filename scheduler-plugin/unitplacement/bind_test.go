package unitplacement

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/plugintest"
)

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
