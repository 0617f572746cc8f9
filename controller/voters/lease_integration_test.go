//go:build integration

package voters_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/voters"
	"github.com/holdfast-io/holdfast/test/poll"
)

// TestTheSwapLeaseIsRenewedEveryPass drives the voter controller's passes
// one by one on an injected clock that moves five sixths of the Lease's
// duration between two passes, while a swap waits (a workload pod on its
// candidate): after every pass the Lease names this swap and holder, its
// renewTime is that pass's time, its acquireTime and transitions are the
// first acquisition's, and the swap's history never records it lapsing.
// Without a renewal on every pass it would lapse between two passes. A pass
// that comes only after the Lease expired takes it again and records the
// lapse in the swap's history, never renewing it silently.
func TestTheSwapLeaseIsRenewedEveryPass(t *testing.T) {
	c := newCluster(t, []string{"l1", "l2", "l3"}, []string{"l4"})
	c.policy(t, func(p *holdfastv1.VoterPolicy) {
		// The injected clock runs minutes ahead within the test: no step
		// may time out meanwhile.
		p.Spec.OperationTimeoutSeconds, p.Spec.WorkloadDrainWaitSeconds, p.Spec.LearnerStallSeconds = 36000, new(int32(36000)), 36000
	})
	ctx := context.Background()
	job := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNS, Name: "lease-job"},
		Spec: corev1.PodSpec{NodeName: "l4", RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "build", Image: "example.invalid/build:1"}}}}
	if err := env.Client.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), job, client.GracePeriodSeconds(0)) })

	const duration = 30 * time.Second
	// Whole seconds: a Lease keeps its times to the microsecond.
	clk := clocktesting.NewFakeClock(shifted.Now().Truncate(time.Second))
	cl := env.ClientAs(t, controllerUser, nil)
	r := &voters.Reconciler{Client: cl, Reader: cl, Clock: clk, CandidateNamespace: releaseNS, SnapshotDir: t.TempDir(),
		Settings: voters.Settings{Identity: "holdfast-controller-lease-test", LeaseDuration: duration, PeerPort: 2380, PeerScheme: "http"},
		EtcdFor: func(context.Context, *holdfastv1.VoterPolicy) (voters.Etcd, error) {
			return &voters.ClientEtcd{StatusTimeout: time.Second, RequestTimeout: 3 * time.Second}, nil
		}}
	pass := func() {
		t.Helper()
		if _, err := r.Pass(ctx); err != nil {
			t.Logf("pass at %s: %v", clk.Now().UTC().Format(time.RFC3339), err)
		}
	}
	waitHealthyStatusOn(t, pass, "l1", "l2", "l3")

	name := createSwap(t, "l1", "l4")
	// Until the swap waits for the job, with the Lease taken.
	var acquired *coordinationv1.Lease
	for i := 0; ; i++ {
		pass()
		s := getSwap(t, name)
		if s.Status.Phase.Finished() {
			t.Fatalf("swap finished %s: %s\n%s", s.Status.Phase, describe(s), history(s))
		}
		if l := getLease(t); l != nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == r.Settings.Identity && acquired == nil {
			acquired = l
		}
		if c := progressing(s); c == holdfastv1.SwapReasonWorkloadPodsRunning && acquired != nil {
			break
		}
		if i > 50 {
			t.Fatalf("the swap does not wait for the job: %s\n%s", describe(s), history(s))
		}
	}
	swapID := getSwap(t, name).Status.SwapID
	for i := 0; i < 8; i++ {
		clk.Step(duration * 5 / 6)
		pass()
		l := getLease(t)
		if l == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != r.Settings.Identity || l.Annotations[holdfastv1.AnnotationSwapID] != swapID {
			t.Fatalf("pass %d: the Lease is %+v, want held by %s for %s", i, l, r.Settings.Identity, swapID)
		}
		if l.Spec.RenewTime == nil || !l.Spec.RenewTime.Time.Equal(clk.Now()) {
			t.Fatalf("pass %d at %s: the Lease was renewed at %v, want at this pass", i, clk.Now().UTC().Format(time.RFC3339Nano), l.Spec.RenewTime)
		}
		if !l.Spec.AcquireTime.Time.Equal(acquired.Spec.AcquireTime.Time) || fmt.Sprint(l.Spec.LeaseTransitions) != fmt.Sprint(acquired.Spec.LeaseTransitions) {
			t.Fatalf("pass %d: the Lease was taken again (acquired %v, transitions %v; first %v, %v)", i, l.Spec.AcquireTime, l.Spec.LeaseTransitions,
				acquired.Spec.AcquireTime, acquired.Spec.LeaseTransitions)
		}
		if l.Annotations[holdfastv1.AnnotationSwapNodes] != "l1,l4" {
			t.Fatalf("pass %d: the renewal lost the swap's nodes: %v", i, l.Annotations)
		}
	}
	s := getSwap(t, name)
	for _, h := range s.Status.History {
		if h.Reason == holdfastv1.SwapReasonLeaseLapsed {
			t.Fatalf("the swap records its Lease lapsing:\n%s", history(s))
		}
	}
	if progressing(s) != holdfastv1.SwapReasonWorkloadPodsRunning {
		t.Fatalf("the swap moved on: %s", describe(s))
	}

	// A pass that comes after the Lease expired (passes slower than the
	// Lease) does not renew it silently: the Lease is taken again, and the
	// swap's history says it lapsed.
	clk.Step(duration + time.Second)
	for i := 0; ; i++ {
		pass()
		if s = getSwap(t, name); slices.ContainsFunc(s.Status.History, func(h holdfastv1.SwapStepRecord) bool { return h.Reason == holdfastv1.SwapReasonLeaseLapsed }) {
			break
		}
		if i > 5 {
			t.Fatalf("a lapsed Lease left no record in the swap's history:\n%s", history(s))
		}
	}
	if l := getLease(t); l == nil || l.Spec.AcquireTime == nil || !l.Spec.AcquireTime.Time.Equal(clk.Now()) || l.Annotations[holdfastv1.AnnotationSwapID] != swapID {
		t.Fatalf("after the lapse the Lease is %+v, want taken again at %s for %s", l, clk.Now(), swapID)
	}
}

func progressing(s *holdfastv1.VoterSwap) string {
	for _, c := range s.Status.Conditions {
		if c.Type == holdfastv1.ConditionProgressing {
			return c.Reason
		}
	}
	return ""
}

// waitHealthyStatusOn runs passes until the VoterPolicy status says etcd is
// healthy with these voters.
func waitHealthyStatusOn(t *testing.T, pass func(), voterNames ...string) {
	t.Helper()
	poll.Until(t, 30*time.Second, fmt.Sprintf("VoterPolicy healthy with %v", voterNames), func() (bool, string) {
		pass()
		p := &holdfastv1.VoterPolicy{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: holdfastv1.VoterPolicyName}, p); err != nil {
			return false, err.Error()
		}
		return fmt.Sprint(p.Status.Voters) == fmt.Sprint(voterNames) && healthyCondition(p), fmt.Sprintf("voters %v, conditions %+v", p.Status.Voters, p.Status.Conditions)
	})
}

func healthyCondition(p *holdfastv1.VoterPolicy) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == holdfastv1.ConditionEtcdHealthy {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// TestRenewKeepsTheHoldAndFailsForAnotherHolder is SwapLease.Renew against
// the real apiserver and webhook: a renewal moves renewTime (and the
// duration) and keeps acquireTime, transitions, labels and annotations; it
// fails with ErrLeaseLost when the Lease as read names another holder, and
// with a conflict when the Lease changed since it was read (another holder
// took it after it expired), changing nothing.
func TestRenewKeepsTheHoldAndFailsForAnotherHolder(t *testing.T) {
	t.Cleanup(func() { cleanupSwaps(t) })
	ctx := context.Background()
	cl := env.ClientAs(t, controllerUser, nil)
	now := shifted.Now().Truncate(time.Second)
	mine := &voters.SwapLease{Client: cl, Identity: "holdfast-controller-renew-a", Duration: 20 * time.Second}
	l, err := mine.Acquire(ctx, getLease(t), "20260301T120000Z-x1-x4", []string{"x1", "x4"}, now)
	if err != nil {
		t.Fatal(err)
	}
	first := l.DeepCopy()

	mine.Duration = 40 * time.Second
	renewed, err := mine.Renew(ctx, l, now.Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := getLease(t)
	if !got.Spec.RenewTime.Time.Equal(now.Add(10*time.Second)) || *got.Spec.LeaseDurationSeconds != 40 {
		t.Errorf("renewed Lease: renewTime %v duration %d, want %v and 40", got.Spec.RenewTime, *got.Spec.LeaseDurationSeconds, now.Add(10*time.Second))
	}
	if !got.Spec.AcquireTime.Time.Equal(first.Spec.AcquireTime.Time) || fmt.Sprint(got.Spec.LeaseTransitions) != fmt.Sprint(first.Spec.LeaseTransitions) ||
		*got.Spec.HolderIdentity != mine.Identity {
		t.Errorf("renewal changed the hold: acquired %v transitions %v holder %s; first %v %v", got.Spec.AcquireTime, got.Spec.LeaseTransitions,
			*got.Spec.HolderIdentity, first.Spec.AcquireTime, first.Spec.LeaseTransitions)
	}
	if fmt.Sprint(got.Annotations) != fmt.Sprint(first.Annotations) || got.Labels[holdfastv1.LabelGuarded] != "true" {
		t.Errorf("renewal changed labels %v or annotations %v (first %v)", got.Labels, got.Annotations, first.Annotations)
	}

	// A renewal from a stale read: the Lease changed since (another renewal
	// here; another holder's take-over elsewhere) and optimistic
	// concurrency refuses it.
	if _, err := mine.Renew(ctx, l, now.Add(15*time.Second)); !apierrors.IsConflict(err) {
		t.Errorf("renewal from a stale read: %v, want a conflict", err)
	}
	// Another holder takes it once it has expired (on the webhook's clock
	// too); this holder's renewal of what it read before is refused, and one
	// of what it reads now fails as lost.
	shifted.Advance(2 * time.Minute)
	later := shifted.Now()
	other := &voters.SwapLease{Client: cl, Identity: "holdfast-controller-renew-b", Duration: 20 * time.Second}
	if _, err := other.Acquire(ctx, getLease(t), "20260301T130000Z-x2-x5", []string{"x2", "x5"}, later); err != nil {
		t.Fatal(err)
	}
	if _, err := mine.Renew(ctx, renewed, later); !apierrors.IsConflict(err) {
		t.Errorf("renewal after another holder took the Lease: %v, want a conflict", err)
	}
	if _, err := mine.Renew(ctx, getLease(t), later); !errors.Is(err, voters.ErrLeaseLost) {
		t.Errorf("renewal of a Lease that names another holder: %v, want ErrLeaseLost", err)
	}
	if got := getLease(t); *got.Spec.HolderIdentity != other.Identity || got.Annotations[holdfastv1.AnnotationSwapID] != "20260301T130000Z-x2-x5" {
		t.Errorf("the refused renewals changed the Lease: holder %s swap %s", *got.Spec.HolderIdentity, got.Annotations[holdfastv1.AnnotationSwapID])
	}
	if err := other.Release(ctx, getLease(t)); err != nil {
		t.Fatal(err)
	}
}
