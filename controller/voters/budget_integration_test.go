//go:build integration

package voters_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/voters"
)

// TestADrainRefusedByADisruptionBudgetWaitsWithTheLeaseHeld: the candidate
// runs a pod whose disruption budget allows no eviction now (the real
// apiserver refuses it with 429, as for a replica whose sibling is not
// ready). Every pass that meets the refusal returns no error, so it is not
// backed off (a backoff outlasted the swap Lease on real kubelets, and the
// Lease lapsed mid-swap), and comes back within RunningEvery; the swap
// records the refusal once as a retry of its drain, its Lease stays held and
// renewed at each pass's time, and once the budget allows it the pod is
// evicted and the drain goes on.
func TestADrainRefusedByADisruptionBudgetWaitsWithTheLeaseHeld(t *testing.T) {
	c := newCluster(t, []string{"pdb1", "pdb2", "pdb3"}, []string{"pdb4"})
	c.policy(t, func(p *holdfastv1.VoterPolicy) {
		p.Spec.OperationTimeoutSeconds, p.Spec.WorkloadDrainWaitSeconds, p.Spec.LearnerStallSeconds = 36000, new(int32(36000)), 36000
	})
	ctx := context.Background()
	labels := map[string]string{"app": "budgeted"}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNS, Name: "budgeted", Labels: labels},
		Spec: corev1.PodSpec{NodeName: "pdb4", Containers: []corev1.Container{{Name: "serve", Image: "example.invalid/serve:1"}}}}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(0)) })
	// The eviction API skips the budget for a pending pod, and lets a pod
	// that is not ready go while the budget is met: this one runs, ready.
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNS, Name: "budgeted"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: new(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if err := env.Client.Create(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	// The disruption controller's verdict (no kube-controller-manager
	// here): the budget is processed and allows no disruption now.
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DisruptionsAllowed: 0, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	if err := env.Client.Status().Update(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pdb) })

	clk := clocktesting.NewFakeClock(shifted.Now().Truncate(time.Second))
	cl := env.ClientAs(t, controllerUser, nil)
	r := &voters.Reconciler{Client: cl, Reader: cl, Clock: clk, CandidateNamespace: releaseNS, SnapshotDir: t.TempDir(),
		Settings: voters.Settings{Identity: "holdfast-controller-budget-test", LeaseDuration: 30 * time.Second, PeerPort: 2380, PeerScheme: "http"},
		EtcdFor: func(context.Context, *holdfastv1.VoterPolicy) (voters.Etcd, error) {
			return &voters.ClientEtcd{StatusTimeout: time.Second, RequestTimeout: 3 * time.Second}, nil
		}}
	const runningEvery = 2 * time.Second // the Reconciler's default
	waitHealthyStatusOn(t, func() { _, _ = r.Pass(ctx) }, "pdb1", "pdb2", "pdb3")

	name := createSwap(t, "pdb1", "pdb4")
	refusals := func(s *holdfastv1.VoterSwap) int {
		n := 0
		for _, h := range s.Status.History {
			if h.Outcome == holdfastv1.SwapOutcomeRetried && strings.Contains(h.Message, voters.ErrBudgetRefused.Error()) {
				n++
			}
		}
		return n
	}
	refusedPasses := 0
	for i := 0; refusedPasses < 6; i++ {
		next, err := r.Pass(ctx)
		s := getSwap(t, name)
		if s.Status.Phase.Finished() {
			t.Fatalf("swap finished %s: %s\n%s", s.Status.Phase, describe(s), history(s))
		}
		if refusals(s) > 0 {
			refusedPasses++
			if err != nil {
				t.Fatalf("a pass meeting the budget's refusal failed (a failed pass is backed off): %v", err)
			}
			if next > runningEvery {
				t.Fatalf("a pass meeting the budget's refusal comes back after %v, want at most RunningEvery %v", next, runningEvery)
			}
			l := getLease(t)
			if l == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != r.Settings.Identity || l.Spec.RenewTime == nil || !l.Spec.RenewTime.Time.Equal(clk.Now()) {
				t.Fatalf("the swap Lease is %+v, want held by %s and renewed at this pass (%s)", l, r.Settings.Identity, clk.Now().UTC().Format(time.RFC3339))
			}
		}
		if i > 60 {
			got := &corev1.Pod{}
			perr := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), got)
			t.Fatalf("the drain never met the budget's refusal (the pod: %s, deleting %v, %v; last pass: %v): %s\n%s", got.Status.Phase, got.DeletionTimestamp, perr, err, describe(s), history(s))
		}
		clk.Step(next)
	}
	s := getSwap(t, name)
	if n := refusals(s); n != 1 {
		t.Errorf("the refusal is recorded %d times, want once while it stands:\n%s", n, history(s))
	}
	if slices.ContainsFunc(s.Status.History, func(h holdfastv1.SwapStepRecord) bool { return h.Reason == holdfastv1.SwapReasonLeaseLapsed }) {
		t.Fatalf("the swap records its Lease lapsing:\n%s", history(s))
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil || !pod.DeletionTimestamp.IsZero() {
		t.Fatalf("the budgeted pod is %v (%v), want running while its budget refuses", pod.DeletionTimestamp, err)
	}

	// The budget gone, the next passes evict the pod and wait for it.
	if err := env.Client.Delete(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		next, err := r.Pass(ctx)
		if err != nil {
			t.Logf("pass: %v", err)
		}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil || !pod.DeletionTimestamp.IsZero() {
			break
		}
		if i > 20 {
			t.Fatalf("the pod was not evicted once its budget was gone:\n%s", history(getSwap(t, name)))
		}
		clk.Step(next)
	}
}
