//go:build integration

package integration

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/units"
	"github.com/holdfast-io/holdfast/policy"
	"github.com/holdfast-io/holdfast/test/poll"
)

// fenceConfirmed is the fence confirmation a person writes for the runtime
// of epoch as the apiserver has it now (its epoch and its process), with
// the other annotations kv names.
func fenceConfirmed(t *testing.T, key types.NamespacedName, how string, epoch int64, kv ...string) map[string]string {
	t.Helper()
	var running *holdfastv1.RuntimeIncarnation
	var pod corev1.Pod
	switch err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: key.Namespace, Name: holdfastv1.RuntimePodName(key.Name, epoch)}, &pod); {
	case err == nil:
		running = policy.IncarnationOf(&pod)
	case !apierrors.IsNotFound(err):
		t.Fatalf("reading the runtime pod of epoch %d: %v", epoch, err)
	}
	a := policy.ConfirmFenced(how, epoch, running)
	for i := 0; i+1 < len(kv); i += 2 {
		a[kv[i]] = kv[i+1]
	}
	return a
}

func annotate(t *testing.T, key types.NamespacedName, kv map[string]string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var u holdfastv1.Unit
		if err := env.Client.Get(context.Background(), key, &u); err != nil {
			return err
		}
		if u.Annotations == nil {
			u.Annotations = map[string]string{}
		}
		for k, v := range kv {
			u.Annotations[k] = v
		}
		return env.Client.Update(context.Background(), &u)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// An Autonomy unit on the real apiserver: the runtime pod as the contract
// says, readiness and first address recorded, a manual failover refused
// without a confirmed fence, then carried out with one (Hold, re-bind to the
// node asked for, the old pod deleted, the request consumed), each step an
// Event and an audit line in order, and a restart clearing the Hold once the
// new runtime is ready.
func TestAnAutonomyUnitFailsOverOnlyByHandWithAConfirmedFence(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	node(t, "press-edge-1", map[string]string{"holdfast.io/device": "press-2"})
	node(t, "press-standby-1", nil)
	c := startController(t, controllerOptions{namespace: ns})

	u := &holdfastv1.Unit{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "press-2"},
		Spec: holdfastv1.UnitSpec{
			Runtime:      holdfastv1.UnitRuntime{Image: "holdfast.local/unit-runtime:dev", Args: []string{"--program=press"}},
			NodeSelector: map[string]string{"holdfast.io/device": "press-2"},
			Availability: holdfastv1.Availability{Targets: &holdfastv1.FailoverTargets{Nodes: []string{"press-standby-1"}}},
		},
	}
	if err := env.Client.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: ns, Name: "press-2"}
	unitName := ns + "/press-2"

	var pod *corev1.Pod
	e1 := waitNewEpoch(t, key, 0)
	poll.Until(t, 20*time.Second, "the first binding's pod", func() (bool, string) {
		pod = runtimePod(t, u, e1)
		return pod != nil, fmt.Sprintf("no pod of epoch %d", e1)
	})
	if pod.Spec.NodeName != "" || pod.Spec.SchedulerName != holdfastv1.SchedulerName || !pod.Spec.HostNetwork ||
		pod.Labels[holdfastv1.LabelUnit] != "press-2" || pod.Labels[holdfastv1.LabelEpoch] != strconv.FormatInt(e1, 10) ||
		pod.Spec.NodeSelector["holdfast.io/device"] != "press-2" || pod.OwnerReferences[0].Kind != "Unit" {
		t.Fatalf("runtime pod does not carry the contract: %+v", pod)
	}

	schedule(t, key, e1, "press-edge-1")
	kubeletReports(t, ns, pod.Name, "127.0.0.1", true, 0)
	poll.Until(t, 20*time.Second, "RuntimeReady and the first address", func() (bool, string) {
		got := getUnit(t, key)
		b := got.Status.RuntimeBinding
		return meta.IsStatusConditionTrue(got.Status.Conditions, holdfastv1.ConditionRuntimeReady) && b.FirstAddressAt != nil && b.Node == "press-edge-1",
			fmt.Sprintf("%+v", got.Status)
	})

	// Without a confirmed fence: refused, consumed, nothing moved.
	annotate(t, key, map[string]string{holdfastv1.AnnotationFailoverTo: "press-standby-1"})
	poll.Until(t, 20*time.Second, "the refusal", func() (bool, string) {
		got := getUnit(t, key)
		c := meta.FindStatusCondition(got.Status.Conditions, holdfastv1.ConditionFailoverRequest)
		_, pending := got.Annotations[holdfastv1.AnnotationFailoverTo]
		return c != nil && c.Reason == holdfastv1.ReasonRefused && !pending, fmt.Sprintf("%+v", got.Status)
	})
	if got := getUnit(t, key); got.Status.RuntimeBinding.Epoch != e1 || meta.FindStatusCondition(got.Status.Conditions, holdfastv1.ConditionHeld) != nil {
		t.Fatalf("a refused failover moved something: %+v", got.Status)
	}

	// With one: Hold, then the re-bind to the node asked for.
	annotate(t, key, fenceConfirmed(t, key, "press-edge-1 powered off at its breaker", e1,
		holdfastv1.AnnotationFailoverTo, "press-standby-1", holdfastv1.AnnotationRequestID, "req-9"))
	var pod2 *corev1.Pod
	e2 := waitNewEpoch(t, key, e1)
	poll.Until(t, 20*time.Second, "the manual re-bind", func() (bool, string) {
		pod2 = runtimePod(t, u, e2)
		return pod2 != nil, fmt.Sprintf("no pod of epoch %d", e2)
	})
	got := getUnit(t, key)
	b := got.Status.RuntimeBinding
	if b.Epoch != e2 || b.Node != "" || b.Origin != holdfastv1.OriginManual || b.PreviousNode != "press-edge-1" || b.RequestID != "req-9" {
		t.Fatalf("binding after the manual failover: %+v", b)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, holdfastv1.ConditionHeld) {
		t.Fatal("a re-bind is a Hold")
	}
	terms := pod2.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if pod2.Spec.NodeName != "" || terms[0].MatchFields[0].Values[0] != "press-standby-1" || pod2.Spec.NodeSelector != nil {
		t.Fatalf("the new pod must ask the scheduler for the node asked for, never name it: %+v", pod2.Spec)
	}
	poll.Until(t, 20*time.Second, "the request consumed and the old pod deleted", func() (bool, string) {
		got := getUnit(t, key)
		old := runtimePod(t, u, e1)
		_, pending := got.Annotations[holdfastv1.AnnotationFailoverTo]
		return !pending && (old == nil || old.DeletionTimestamp != nil), "pending or old pod alive"
	})

	schedule(t, key, e2, "press-standby-1")
	kubeletReports(t, ns, pod2.Name, "127.0.0.1", true, 0)
	annotate(t, key, map[string]string{holdfastv1.AnnotationRestart: time.Now().UTC().Add(time.Second).Format(time.RFC3339), holdfastv1.AnnotationRequestID: "req-10"})
	poll.Until(t, 20*time.Second, "the restart clearing the Hold", func() (bool, string) {
		got := getUnit(t, key)
		c := meta.FindStatusCondition(got.Status.Conditions, holdfastv1.ConditionHeld)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == holdfastv1.ReasonRestarted, fmt.Sprintf("%+v", got.Status)
	})

	want := []string{units.EventManualFailoverRefused, units.EventHold, units.EventManualRebind, units.EventRestarted}
	poll.Until(t, 10*time.Second, "the events", func() (bool, string) {
		got := eventReasons(events(t, u))
		return slices.Equal(got, want), strings.Join(got, ",")
	})
	lines := c.auditLines(t)
	if got := auditReasons(lines, unitName); !slices.Equal(got, want) {
		t.Fatalf("audit reasons %v, want %v", got, want)
	}
	for _, l := range lines {
		if l.Object.Key() != unitName {
			continue
		}
		if l.Reason == units.EventManualRebind && (l.Actor != "person (request req-9, requester in the webhook's audit record)" || l.Epoch != e2 || l.Node != "press-standby-1") {
			t.Errorf("the re-bind's audit line must name the request, the epoch and the node: %+v", l)
		}
	}
	// Each audit line comes after its Event.
	evs := events(t, u)
	for i, e := range evs {
		if lines := auditReasons(lines, unitName); i < len(lines) {
			var at time.Time
			for _, l := range c.auditLines(t) {
				if l.Object.Key() == unitName && l.Reason == e.Reason {
					at = l.Time
					break
				}
			}
			if at.Before(e.EventTime.Time.Truncate(time.Microsecond)) {
				t.Errorf("audit line %s at %v precedes its Event at %v", e.Reason, at, e.EventTime.Time)
			}
		}
	}
}
