//go:build integration

package nodeplugin_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/fence"
	"github.com/holdfast-io/holdfast/test/crihost"
)

// warmRuntime runs unit's warm standby pod on this host as the kubelet
// would: its sandbox made with the pod's labels of that moment (unit and
// standby, no epoch), its lease endpoint on port answering with flags. The
// pod is created in the apiserver first, so the sandbox carries its UID.
func (r *rig) warmRuntime(unit string, port int32, flags ...string) (pod *corev1.Pod, sandbox, container string) {
	r.t.Helper()
	pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: holdfastv1.WarmPodName(unit, "n1"),
		Labels: map[string]string{holdfastv1.LabelUnit: unit, holdfastv1.LabelWarmStandby: "n1"}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "runtime", Image: runtimeImage}}}}
	if err := env.Client.Create(context.Background(), pod); err != nil {
		r.t.Fatal(err)
	}
	args := append([]string{"--listen", fmt.Sprintf("127.0.0.1:%d", port), "--unit", r.ns + "/" + unit}, flags...)
	sb, c, err := crihost.RunPod(context.Background(), r.rt, filepath.Join(r.dir, "logs"), crihost.Pod{
		Namespace: r.ns, Name: pod.Name, UID: string(pod.UID), Image: runtimeImage, Args: args,
		Labels: map[string]string{holdfastv1.LabelUnit: unit, holdfastv1.LabelWarmStandby: "n1"}})
	if err != nil {
		r.t.Fatal(err)
	}
	waitTCP(r.t, port)
	return pod, sb, c
}

// L7 for warm standbys, through the real containerd: a warm sandbox never
// shows an epoch label, so the agent takes its epoch from its pod's label
// and from its runtime's GET /v1/lease. With every unit bound at epoch 5,
// the warm pod promoted at 4 (labelled, its runtime not granted yet) and
// the one a grant bound to 4 (its pod's label not seen) are stopped and
// their sandboxes removed; the one bound to no epoch (Warm) runs on.
func TestAWarmRuntimeBehindItsUnitsBindingIsStopped(t *testing.T) {
	r := newRig(t)
	ps := freePorts(t, 3)
	for i, name := range []string{"warm", "labelled", "granted"} {
		u := r.unit(name, holdfastv1.Failover, ps[i], 3)
		u.Spec.Availability.WarmStandby = true
		if err := env.Client.Update(context.Background(), u); err != nil {
			t.Fatal(err)
		}
	}
	_, _, warmC := r.warmRuntime("warm", ps[0], "--warm")
	labelled, labelledSB, _ := r.warmRuntime("labelled", ps[1], "--warm")
	_, grantedSB, _ := r.warmRuntime("granted", ps[2], "--epoch", "4", "--deadline-in", "1h")
	labelled.Labels[holdfastv1.LabelEpoch] = "4"
	if err := env.Client.Update(context.Background(), labelled); err != nil {
		t.Fatal(err)
	}

	agent := &fence.Agent{CRI: r.rt, Lease: fence.HTTPLease{}, Clock: clocktesting.NewFakeClock(time.Now()), AuditDir: filepath.Join(r.dir, "audit")}
	cl := startManager(t, func(mgr ctrl.Manager) error { return nil })
	agent.Units, agent.Pods = fence.CacheUnits{Client: cl}, fence.CachePods{Client: cl}
	waitFor(t, "the cache to show the labelled pod's epoch", func() bool {
		var p corev1.Pod
		return cl.Get(context.Background(), client.ObjectKeyFromObject(labelled), &p) == nil && p.Labels[holdfastv1.LabelEpoch] == "4"
	})
	for _, name := range []string{"warm", "labelled", "granted"} {
		var u holdfastv1.Unit
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: r.ns, Name: name}, &u); err != nil {
			t.Fatal(err)
		}
		r.bind(&u, 5)
	}
	waitFor(t, "every unit bound at 5 in the cache", func() bool {
		for _, name := range []string{"warm", "labelled", "granted"} {
			if u, ok := agent.Units.Unit(context.Background(), r.ns, name); !ok || u.Status.RuntimeBinding.Epoch != 5 {
				return false
			}
		}
		return true
	})
	if err := agent.Observe(context.Background()); err != nil {
		t.Fatal(err)
	}
	acts, err := agent.FenceStale(context.Background(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(acts) != 2 {
		t.Fatalf("actions %+v, want the two warm runtimes of epoch 4 stopped", acts)
	}
	for _, a := range acts {
		if a.Epoch != 4 || a.BindingEpoch != 5 || a.Reason != fence.ReasonStaleEpoch {
			t.Fatalf("action %+v, want a stale-epoch stop of epoch 4 behind 5", a)
		}
	}
	if !r.sandboxGone(labelledSB) || !r.sandboxGone(grantedSB) {
		t.Fatal("a stale warm runtime's sandbox is still there")
	}
	if !r.running(warmC) {
		t.Fatal("the warm runtime bound to no epoch was stopped")
	}
}
