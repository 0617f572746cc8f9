//go:build integration

package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/units"
	"github.com/holdfast-io/holdfast/test/poll"
)

// TestL5UnplacedRebindCountsAgainstTheBudget: with no scheduler running, no
// runtime pod is ever placed. Each automatic re-bind whose pod stays Pending
// past its start-up grace counts as one attempt against the budget (kept in
// status.runtimeBinding.unplacedRebinds), so the unit ends Suspended after
// as many re-binds as it has free standbys, and its epoch stops there. The
// count survives a restart of the controller. The clock is injected: the
// deadlines are reached by stepping it.
func TestL5UnplacedRebindCountsAgainstTheBudget(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	clk := clocktesting.NewFakeClock(time.Now())
	primary, standbys := ns+"-edge", []string{ns + "-standby-1", ns + "-standby-2"}
	node(t, primary, map[string]string{"holdfast.io/device": ns})
	for _, s := range standbys {
		node(t, s, nil)
	}
	c := startController(t, controllerOptions{namespace: ns, clock: clk})
	u := &holdfastv1.Unit{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kiln"},
		Spec: holdfastv1.UnitSpec{
			Runtime:      holdfastv1.UnitRuntime{Image: "holdfast.local/unit-runtime:dev", HealthPort: 9440, LeasePort: 9443},
			NodeSelector: map[string]string{"holdfast.io/device": ns},
			Availability: holdfastv1.Availability{
				Mode: holdfastv1.Failover, LeaseDurationSeconds: 10, RuntimeStartupGraceSeconds: 10, RebindMarginSeconds: ptr.To(int32(5)),
				Targets: &holdfastv1.FailoverTargets{Nodes: standbys}, Colocation: holdfastv1.ColocationWarn,
			},
		},
	}
	if err := env.Client.Create(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: ns, Name: "kiln"}

	e1 := waitNewEpoch(t, key, 0)
	poll.Until(t, 30*time.Second, "the first runtime pod", func() (bool, string) { return runtimePod(t, u, e1) != nil, "" })

	// The first binding's start-up grace, margin and hold-off all pass. No
	// pod is ever placed: only the budget stops the re-binds. Each later
	// binding's grace runs from its pod's creation, which the apiserver
	// stamps on the real clock, so the injected clock moves on while the
	// test waits, however slowly the machine runs.
	clk.Step(30 * time.Second)
	var got *holdfastv1.Unit
	poll.Until(t, 60*time.Second, "the suspension", func() (bool, string) {
		got = getUnit(t, key)
		b := got.Status.RuntimeBinding
		done := len(b.UnplacedRebinds) > 2 || meta.IsStatusConditionTrue(got.Status.Conditions, holdfastv1.ConditionFailoverSuspended)
		if !done {
			clk.Step(time.Second)
		}
		return done, fmt.Sprintf("%+v", b)
	})
	b := got.Status.RuntimeBinding
	if len(b.UnplacedRebinds) != 2 || len(b.UnsettledRebinds) != 0 {
		t.Fatalf("with two standbys and no scheduler the unit must suspend at its third binding with two unplaced re-binds: epoch %d, unplaced %+v, ledger %v",
			b.Epoch, b.UnplacedRebinds, b.UnsettledRebinds)
	}
	e2, e3 := b.UnplacedRebinds[0].Epoch, b.UnplacedRebinds[1].Epoch
	if !(e1 < e2 && e2 < e3 && b.Epoch == e3) {
		t.Fatalf("the bindings' epochs %d, %d, %d (current %d) do not go up in order", e1, e2, e3, b.Epoch)
	}
	cond := meta.FindStatusCondition(got.Status.Conditions, holdfastv1.ConditionFailoverSuspended)
	for _, want := range []string{"2 re-bind(s) were never placed on a node",
		fmt.Sprintf("epoch %d: pod kiln-runtime-e%d stayed Pending and no scheduler reported on it: is holdfast-scheduler running?", e2, e2),
		fmt.Sprintf("epoch %d: pod kiln-runtime-e%d stayed Pending", e3, e3)} {
		if cond.Reason != holdfastv1.ReasonRebindsNotPlaced || !strings.Contains(cond.Message, want) {
			t.Fatalf("FailoverSuspended does not say %q: %s: %s", want, cond.Reason, cond.Message)
		}
	}
	// Its 10s lease is below the shipped grantor's floor: reported, run as
	// it is (L14).
	want := []string{units.EventLeaseBelowFloor, units.EventLeaseExpired, units.EventRebound, units.EventLeaseExpired, units.EventRebound,
		units.EventLeaseExpired, units.EventBudgetExhausted}
	poll.Until(t, 15*time.Second, "the events", func() (bool, string) {
		got := eventReasons(events(t, u))
		return slices.Equal(got, want), strings.Join(got, ",")
	})

	// The count lives in status: a new controller process honours it. Its
	// first pass inside its own hold-off shows the wait; its first pass
	// after it, with the clock well past every deadline, removes the wait
	// and re-binds nothing.
	c.stop()
	startController(t, controllerOptions{namespace: ns, clock: clk, identity: "ctl-budget-restarted", standDown: 30 * time.Second})
	holdOff := func(u *holdfastv1.Unit) bool {
		c := meta.FindStatusCondition(u.Status.Conditions, holdfastv1.ConditionFailoverRequest)
		return c != nil && c.Reason == holdfastv1.ReasonLeadershipHoldOff
	}
	poll.Until(t, 60*time.Second, "the new leader's pass inside its hold-off", func() (bool, string) {
		u := getUnit(t, key)
		return holdOff(u), fmt.Sprintf("%+v", u.Status.Conditions)
	})
	clk.Step(10 * time.Minute)
	poll.Until(t, 30*time.Second, "the new leader's pass after its hold-off", func() (bool, string) {
		u := getUnit(t, key)
		return !holdOff(u), fmt.Sprintf("%+v", u.Status.Conditions)
	})
	got = getUnit(t, key)
	if b := got.Status.RuntimeBinding; b.Epoch != e3 || len(b.UnplacedRebinds) != 2 {
		t.Fatalf("after a controller restart the suspended unit was re-bound or lost its count: %+v", b)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, holdfastv1.ConditionFailoverSuspended) {
		t.Fatalf("the suspension did not survive the restart: %+v", got.Status.Conditions)
	}
	if pod := runtimePod(t, u, e3); pod == nil || pod.DeletionTimestamp != nil {
		t.Fatal("suspension must leave the current pod in place")
	}
	// The new leader's wait is an Event of its own; nothing else is new.
	want = append(want, units.EventLeadershipHoldOff)
	if got := eventReasons(events(t, u)); !slices.Equal(got, want) {
		t.Fatalf("events after the restart %v, want %v", got, want)
	}
}
