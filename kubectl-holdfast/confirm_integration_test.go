//go:build integration

package plugin_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	plugin "github.com/holdfast-io/holdfast/kubectl-holdfast"
)

// mkRuntimePod creates the runtime pod of unit's binding at epoch, its
// runtime container restarted restarts times, as the controller and the
// kubelet would.
func mkRuntimePod(t *testing.T, ns, unit string, epoch int64, restarts int32) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: holdfastv1.RuntimePodName(unit, epoch),
			Labels: map[string]string{holdfastv1.LabelUnit: unit, holdfastv1.LabelEpoch: strconv.FormatInt(epoch, 10)}},
		Spec: corev1.PodSpec{SchedulerName: "holdfast-scheduler", Containers: []corev1.Container{{Name: holdfastv1.RuntimeContainer, Image: "unit-runtime:dev"}}},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: holdfastv1.RuntimeContainer, Image: "unit-runtime:dev", RestartCount: restarts}}
	if err := env.Client.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// kubectl holdfast confirm-fenced certifies the runtime of the unit's
// binding as the apiserver has it: its epoch and its process (the pod's UID
// and restart count, "none" when its pod is gone), so a certification that
// lands after the kubelet restarted the runtime certifies nothing.
func TestConfirmFencedNamesTheRuntimeProcess(t *testing.T) {
	ns := env.Namespace(t)
	mkNode(t, "cf-edge-1", nil)
	kiln := mkUnit(t, ns, "kiln-1", holdfastv1.Autonomy, &holdfastv1.RuntimeBinding{Node: "cf-edge-1", Epoch: 4, Pod: holdfastv1.RuntimePodName("kiln-1", 4)})
	gone := mkUnit(t, ns, "oven-2", holdfastv1.Autonomy, &holdfastv1.RuntimeBinding{Node: "cf-edge-1", Epoch: 7, Pod: holdfastv1.RuntimePodName("oven-2", 7)})
	unbound := mkUnit(t, ns, "press-3", holdfastv1.Autonomy, nil)
	pod := mkRuntimePod(t, ns, "kiln-1", 4, 2)

	wantExit(t, admin(t, "confirm-fenced", "-n", ns, "kiln-1"), plugin.ExitUsage, "--how REASON is required")
	wantExit(t, admin(t, "confirm-fenced", "-n", ns, "press-3", "--how", "powered off"), plugin.ExitUsage, "has no runtime binding")
	if a := getUnit(t, unbound).Annotations; a[holdfastv1.AnnotationFailoverConfirmFenced] != "" {
		t.Fatalf("a usage error changed the unit: %v", a)
	}

	for _, tc := range []struct {
		u           *holdfastv1.Unit
		epoch, says string
		incarnation string
	}{
		{kiln, "4", "pod UID " + string(pod.UID) + ", restart 2", string(pod.UID) + "/2"},
		{gone, "7", "its pod is gone", holdfastv1.IncarnationNone},
	} {
		r := admin(t, "confirm-fenced", "-n", ns, tc.u.Name, "--how", "edge-1 powered off at the breaker")
		wantExit(t, r, plugin.ExitOK)
		if want := "fence certified: the runtime of epoch " + tc.epoch + " (" + tc.says + ")"; !strings.Contains(r.stdout, want) {
			t.Fatalf("confirm-fenced %s printed %q, want %q", tc.u.Name, r.stdout, want)
		}
		a := getUnit(t, tc.u).Annotations
		if a[holdfastv1.AnnotationFailoverConfirmFenced] != "edge-1 powered off at the breaker" ||
			a[holdfastv1.AnnotationFailoverConfirmEpoch] != tc.epoch || a[holdfastv1.AnnotationFailoverConfirmIncarnation] != tc.incarnation {
			t.Fatalf("%s's certification: %v, want epoch %s and process %s", tc.u.Name, a, tc.epoch, tc.incarnation)
		}
	}
}
