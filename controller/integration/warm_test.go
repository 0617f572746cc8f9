//go:build integration

package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/units"
	"github.com/holdfast-io/holdfast/test/poll"
)

// warmPods are the unit's warm pods not yet promoted, by standby.
func warmPods(t testing.TB, ns, unit string) map[string]corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{holdfastv1.LabelUnit: unit}); err != nil {
		t.Fatal(err)
	}
	out := map[string]corev1.Pod{}
	for _, p := range list.Items {
		if units.IsWarmPod(&p) && p.DeletionTimestamp.IsZero() {
			out[p.Labels[holdfastv1.LabelWarmStandby]] = p
		}
	}
	return out
}

// waitWarm waits for a warm pod on exactly the standbys want, each other
// than the UIDs in gone, and returns them.
func waitWarm(t testing.TB, ns, unit string, want []string, gone ...types.UID) map[string]corev1.Pod {
	t.Helper()
	var got map[string]corev1.Pod
	poll.Until(t, 20*time.Second, "warm pods on "+strings.Join(want, ","), func() (bool, string) {
		got = warmPods(t, ns, unit)
		var on []string
		for n, p := range got {
			if slices.Contains(gone, p.UID) {
				return false, "pod " + p.Name + " is still the old one"
			}
			on = append(on, n)
		}
		slices.Sort(on)
		return slices.Equal(on, want), strings.Join(on, ",")
	})
	return got
}

// warmUp plays holdfast-scheduler and the kubelet for a warm pod: bound to
// the standby its label names (its Bind touches no binding: a warm pod holds
// no epoch), running at ip and ready (its devices answer).
func warmUp(t testing.TB, p corev1.Pod, ip string) {
	t.Helper()
	node := p.Labels[holdfastv1.LabelWarmStandby]
	if p.Spec.NodeName == "" {
		if err := env.Client.SubResource("binding").Create(context.Background(), &p, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name},
			Target:     corev1.ObjectReference{Kind: "Node", Name: node},
		}); err != nil {
			t.Fatalf("binding warm pod %s to %s: %v", p.Name, node, err)
		}
	}
	kubeletReports(t, p.Namespace, p.Name, ip, true, 0)
}

// kubeletConfirmsDeletion plays a kubelet that stopped a deleted pod. A
// pod of that name and another UID is a replacement: the one asked for is
// gone.
func kubeletConfirmsDeletion(t testing.TB, ns, name string) {
	t.Helper()
	var uid types.UID
	poll.Until(t, 20*time.Second, "pod "+name+" deleted", func() (bool, string) {
		var p corev1.Pod
		err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &p)
		if apierrors.IsNotFound(err) || (err == nil && uid != "" && p.UID != uid) {
			return true, ""
		}
		if err == nil && uid == "" {
			uid = p.UID
		}
		if err != nil || p.DeletionTimestamp.IsZero() {
			return false, fmt.Sprint(err)
		}
		_ = env.Client.Delete(context.Background(), &p, client.GracePeriodSeconds(0), client.Preconditions{UID: &p.UID})
		return false, "terminating"
	})
}

// epochAbove waits for a binding above epoch after, through an expiry, the
// hold bound and the margin (a lease of 10s: about 20s), and returns it.
func epochAbove(t testing.TB, key types.NamespacedName, after int64) int64 {
	t.Helper()
	var e int64
	poll.Until(t, 60*time.Second, fmt.Sprintf("a binding above epoch %d", after), func() (bool, string) {
		b := getUnit(t, key).Status.RuntimeBinding
		if b != nil && b.Epoch > after {
			e = b.Epoch
			return true, ""
		}
		return false, fmt.Sprintf("%+v", b)
	})
	return e
}

func waitWarmCondition(t testing.TB, key types.NamespacedName, status metav1.ConditionStatus, msg string) {
	t.Helper()
	poll.Until(t, 20*time.Second, fmt.Sprintf("WarmStandby %s %q", status, msg), func() (bool, string) {
		c := meta.FindStatusCondition(getUnit(t, key).Status.Conditions, holdfastv1.ConditionWarmStandby)
		return c != nil && c.Status == status && strings.Contains(c.Message, msg), fmt.Sprintf("%+v", c)
	})
}

// warmPlant is a Failover unit with warmStandby whose first binding is
// placed on its primary, and standbys the test plays the kubelet of.
type warmPlant struct {
	ns, primary string
	standbys    []string
	key         types.NamespacedName
	epoch       int64
	c           *controller
}

func newWarmPlant(t *testing.T, standbys ...string) *warmPlant {
	t.Helper()
	ns := env.Namespace(t)
	w := &warmPlant{ns: ns, primary: ns + "-edge", key: types.NamespacedName{Namespace: ns, Name: "kiln"}}
	node(t, w.primary, map[string]string{"holdfast.io/device": ns})
	for _, s := range standbys {
		w.standbys = append(w.standbys, ns+"-"+s)
		node(t, ns+"-"+s, nil)
	}
	w.c = startController(t, controllerOptions{namespace: ns})
	u := &holdfastv1.Unit{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kiln"},
		Spec: holdfastv1.UnitSpec{
			Runtime:      holdfastv1.UnitRuntime{Image: "holdfast.local/unit-runtime:dev", Args: runtimeArgs("127.0.0.1:1"), HealthPort: 9440, LeasePort: 9443},
			NodeSelector: map[string]string{"holdfast.io/device": ns},
			Availability: holdfastv1.Availability{
				Mode: holdfastv1.Failover, LeaseDurationSeconds: 10, RuntimeStartupGraceSeconds: 10, RebindMarginSeconds: ptr.To(int32(5)),
				Targets: &holdfastv1.FailoverTargets{Nodes: w.standbys}, Colocation: holdfastv1.ColocationWarn, WarmStandby: true,
			},
		},
	}
	if err := env.Client.Create(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	w.epoch = waitNewEpoch(t, w.key, 0)
	if len(warmPods(t, ns, "kiln")) != 0 {
		t.Fatal("a warm pod before the first binding is placed: the scheduler must be free to place it")
	}
	schedule(t, w.key, w.epoch, w.primary)
	return w
}

func (w *warmPlant) editUnit(t testing.TB, f func(*holdfastv1.Unit)) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u := getUnit(t, w.key)
		f(u)
		return env.Client.Update(context.Background(), u)
	}); err != nil {
		t.Fatal(err)
	}
}

func TestWarmPodsAreKeptOnEachStandbyReplacedWhenLostAndDeletedWhenNoLongerDue(t *testing.T) {
	w := newWarmPlant(t, "standby-a", "standby-b", "standby-c")
	a, b, c := w.standbys[0], w.standbys[1], w.standbys[2]
	pods := waitWarm(t, w.ns, "kiln", w.standbys)
	u := getUnit(t, w.key)
	for n, p := range pods {
		if p.Name != holdfastv1.WarmPodName("kiln", n) || p.Spec.SchedulerName != holdfastv1.SchedulerName || p.Spec.NodeName != "" ||
			len(p.OwnerReferences) != 1 || p.OwnerReferences[0].UID != u.UID || !slices.ContainsFunc(p.Spec.Containers[0].Env, func(e corev1.EnvVar) bool {
			return e.Name == holdfastv1.RuntimeEnvWarmStandby && e.Value == "true"
		}) {
			t.Fatalf("warm pod on %s: %s %+v", n, p.Name, p.Spec)
		}
	}
	waitWarmCondition(t, w.key, metav1.ConditionFalse, "0 of 3")
	for i, n := range w.standbys {
		warmUp(t, pods[n], fmt.Sprintf("127.0.99.%d", i+1))
	}
	waitWarmCondition(t, w.key, metav1.ConditionTrue, "3 of 3")

	// Lost: evicted. Replaced by a new pod of the same name.
	evicted := pods[a]
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var p corev1.Pod
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(&evicted), &p); err != nil {
			return err
		}
		p.Status.Phase, p.Status.Reason = corev1.PodFailed, "Evicted"
		return env.Client.Status().Update(context.Background(), &p)
	}); err != nil {
		t.Fatal(err)
	}
	pods = waitWarm(t, w.ns, "kiln", w.standbys, evicted.UID)
	poll.Until(t, 10*time.Second, "a WarmPodLost event", func() (bool, string) {
		got := eventReasons(events(t, u))
		return contains(got, units.EventWarmPodLost), strings.Join(got, ",")
	})
	waitWarmCondition(t, w.key, metav1.ConditionFalse, "2 of 3")
	warmUp(t, pods[a], "127.0.99.1")
	waitWarmCondition(t, w.key, metav1.ConditionTrue, "3 of 3")

	// Its node gone: deleted and not made again.
	var cn corev1.Node
	cn.Name = c
	if err := env.Client.Delete(context.Background(), &cn); err != nil {
		t.Fatal(err)
	}
	kubeletConfirmsDeletion(t, w.ns, pods[c].Name)
	waitWarm(t, w.ns, "kiln", []string{a, b})
	waitWarmCondition(t, w.key, metav1.ConditionTrue, "2 of 2")

	// A standby that leaves the targets: its warm pod is deleted.
	w.editUnit(t, func(u *holdfastv1.Unit) { u.Spec.Availability.Targets.Nodes = []string{a, c} })
	kubeletConfirmsDeletion(t, w.ns, pods[b].Name)
	waitWarm(t, w.ns, "kiln", []string{a})

	// warmStandby off: every warm pod is deleted, the runtime pod stays,
	// and the condition goes.
	w.editUnit(t, func(u *holdfastv1.Unit) { u.Spec.Availability.WarmStandby = false })
	kubeletConfirmsDeletion(t, w.ns, pods[a].Name)
	poll.Until(t, 10*time.Second, "no WarmStandby condition", func() (bool, string) {
		c := meta.FindStatusCondition(getUnit(t, w.key).Status.Conditions, holdfastv1.ConditionWarmStandby)
		return c == nil, fmt.Sprintf("%+v", c)
	})
	if len(warmPods(t, w.ns, "kiln")) != 0 || runtimePod(t, u, w.epoch) == nil {
		t.Fatal("warmStandby off: no warm pod, and the runtime pod stays")
	}
}

// A crash between the promotion's steps: the binding that names the warm
// pod is recorded (step 1) and the controller stops before it labels the
// pod (step 2). The next controller labels it from the record, creates no
// runtime pod, and grants to no pod but the one the binding names.
func TestAPromotionRecordedBeforeACrashIsCarriedOnFromTheBinding(t *testing.T) {
	w := newWarmPlant(t, "standby-a", "standby-b")
	a := w.standbys[0]
	pods := waitWarm(t, w.ns, "kiln", w.standbys)
	for i, n := range w.standbys {
		warmUp(t, pods[n], fmt.Sprintf("127.0.98.%d", i+1))
	}
	waitWarmCondition(t, w.key, metav1.ConditionTrue, "2 of 2")
	// The controller stops right after step 1: the test writes the
	// binding the way that controller's promotion does, in one write.
	w.c.stop()
	next := w.epoch + 1
	promoted := pods[a]
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u := getUnit(t, w.key)
		old := u.Status.RuntimeBinding
		now := metav1.Now()
		u.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{
			Epoch: next, Node: a, Pod: promoted.Name, PodUID: string(promoted.UID), BoundAt: &now, FirstAddressAt: &now,
			Origin: holdfastv1.OriginAutomatic, PreviousNode: old.Node, Promise: old.Promise,
			LeaseState: holdfastv1.LeaseExpired, LeaseStateEpoch: old.Epoch,
			Expiry: &holdfastv1.LeaseExpiryRecord{Verdict: holdfastv1.VerdictSelfFenced, LastAttempt: holdfastv1.RenewalUnreachable, At: now, Epoch: old.Epoch},
		}
		return env.Client.Status().Update(context.Background(), u)
	})
	if err != nil {
		t.Fatal(err)
	}
	startController(t, controllerOptions{namespace: w.ns, identity: "ctl-next-" + w.ns})
	poll.Until(t, 30*time.Second, fmt.Sprintf("warm pod %s labelled with epoch %d", promoted.Name, next), func() (bool, string) {
		var p corev1.Pod
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(&promoted), &p); err != nil {
			return false, err.Error()
		}
		return p.Labels[holdfastv1.LabelEpoch] == fmt.Sprint(next) && p.UID == promoted.UID, fmt.Sprint(p.Labels)
	})
	u := getUnit(t, w.key)
	if runtimePod(t, u, next) != nil {
		t.Fatalf("a runtime pod was created for a binding that promoted warm pod %s", promoted.Name)
	}
	if b := u.Status.RuntimeBinding; b.Epoch != next || b.Pod != promoted.Name || b.PodUID != string(promoted.UID) {
		t.Fatalf("the binding moved: %+v", b)
	}
	// The old primary's pod is an earlier epoch's, deleted; the other
	// standby keeps its warm pod; none is due on the promoted one's node.
	kubeletConfirmsDeletion(t, w.ns, units.PodName("kiln", w.epoch))
	waitWarm(t, w.ns, "kiln", w.standbys[1:])
}

// A real runtime holds the lease on the primary and is lost with its
// node's kubelet; after the expiry, Hold and margin the controller
// promotes the ready warm pod on the first untried standby: the binding
// names it and its UID, the pod takes the epoch label, and no runtime pod
// is created. That pod never answers a grant here (the test plays a kubelet
// that reports it ready with no process behind), so it is a replacement
// that never came up: StartupFailed at the promotion + start-up grace, then
// the next standby's warm pod is promoted, and the first standby gets a new
// warm pod once its promoted one is gone.
func TestAnExpiredRuntimeIsReplacedByPromotingAReadyWarmPod(t *testing.T) {
	var standbys []string
	p := newPlantWith(t, func(u *holdfastv1.Unit) {
		for _, s := range []string{"standby-a", "standby-b"} {
			standbys = append(standbys, u.Namespace+"-"+s)
			node(t, u.Namespace+"-"+s, nil)
		}
		u.Spec.Availability.Targets.Nodes = standbys
		u.Spec.Availability.WarmStandby = true
		u.Spec.Availability.RuntimeStartupGraceSeconds = failedStartupGrace
	})
	p.place(1)
	p.waitLease(1, holdfastv1.LeaseHeld, plantStartupWait)
	p.waitWrites(1)
	pods := waitWarm(t, p.ns, "kiln", standbys)
	for i, n := range standbys {
		warmUp(t, pods[n], fmt.Sprintf("127.0.97.%d", i+1))
	}
	waitWarmCondition(t, p.key, metav1.ConditionTrue, "2 of 2")

	p.k.setNode(p.primary, func(n *simNode) { n.cut = true })
	if err := p.k.proc(units.PodName("kiln", p.epoch(1))).signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e2 := epochAbove(t, p.key, p.epoch(1))
	first := pods[standbys[0]]
	b := p.unit().Status.RuntimeBinding
	if b.Node != standbys[0] || b.Pod != first.Name || b.PodUID != string(first.UID) || b.Origin != holdfastv1.OriginAutomatic || b.BoundAt == nil {
		t.Fatalf("the re-bind promotes warm pod %s on %s: %+v", first.Name, standbys[0], b)
	}
	poll.Until(t, 10*time.Second, "the promoted pod labelled", func() (bool, string) {
		var pod corev1.Pod
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(&first), &pod)
		return err == nil && pod.Labels[holdfastv1.LabelEpoch] == fmt.Sprint(e2), fmt.Sprint(err, pod.Labels)
	})
	if runtimePod(t, p.u, e2) != nil {
		t.Fatal("a promotion creates no runtime pod")
	}
	var rebound string
	for _, e := range events(t, p.u) {
		if e.Reason == units.EventRebound {
			rebound = e.Note
		}
	}
	if !strings.Contains(rebound, "promoting warm pod "+first.Name) {
		t.Fatalf("the Rebound event names the promotion: %q", rebound)
	}

	// It never answers: StartupFailed, then the other standby's warm pod.
	e3 := epochAbove(t, p.key, e2)
	second := pods[standbys[1]]
	b = p.unit().Status.RuntimeBinding
	if b.Node != standbys[1] || b.PodUID != string(second.UID) || !slices.Contains(b.UnsettledRebinds, standbys[0]) {
		t.Fatalf("epoch %d promotes the second standby's warm pod, the first tried: %+v", e3, b)
	}
	if prev := p.unit().Status.RuntimeBinding; prev.Expiry == nil || prev.Expiry.Epoch != e2 || prev.Expiry.Verdict != holdfastv1.VerdictStartupFailed {
		t.Fatalf("the promoted pod that never answered is a replacement that never came up: %+v", prev.Expiry)
	}
	// The first promoted pod is an earlier epoch's now: deleted, and its
	// standby is due a warm pod again.
	kubeletConfirmsDeletion(t, p.ns, first.Name)
	waitWarm(t, p.ns, "kiln", standbys[:1], first.UID)
}
