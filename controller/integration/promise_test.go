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

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/units"
	"github.com/holdfast-io/holdfast/test/devicesim"
	"github.com/holdfast-io/holdfast/test/poll"
)

// edit changes the plant's Unit spec through the apiserver.
func (p *plant) edit(f func(*holdfastv1.UnitSpec)) {
	p.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u := p.unit()
		f(&u.Spec)
		return env.Client.Update(context.Background(), u)
	})
	if err != nil {
		p.t.Fatalf("editing the Unit: %v", err)
	}
}

func (p *plant) promise(what string, ok func(*holdfastv1.RuntimePromise) bool) *holdfastv1.RuntimePromise {
	p.t.Helper()
	var pr *holdfastv1.RuntimePromise
	poll.Until(p.t, 30*time.Second, what, func() (bool, string) {
		b := p.unit().Status.RuntimeBinding
		if b == nil || b.Promise == nil {
			return false, "no promise"
		}
		pr = b.Promise
		return ok(pr), fmt.Sprintf("%+v %+v", pr, pr.ShorterLease)
	})
	return pr
}

// L11 against the real apiserver, real runtime processes and a controller
// restart: a lease lengthened to 40s is recorded, then shortened back to
// 10s; the record keeps 40s with the shorter lease pending. A new leader
// (its leadership hold-off of 90s + 40s + 20s puts the shorter lease's
// instant far off) reads the record, not the spec: the runtime killed and
// cut off is declared Expired 40s after its last acknowledged renewal.
func TestTheRecordedPromiseSurvivesAControllerRestart(t *testing.T) {
	p := newPlant(t, "standby-1")
	p.place(1)
	p.waitLease(1, holdfastv1.LeaseHeld, plantStartupWait)
	p.waitWrites(1)

	p.edit(func(s *holdfastv1.UnitSpec) {
		s.Availability.LeaseDurationSeconds, s.Availability.RuntimeStartupGraceSeconds, s.Availability.RebindMarginSeconds = 40, 40, ptr.To(int32(20))
	})
	p.promise("the longer lease recorded", func(pr *holdfastv1.RuntimePromise) bool {
		return pr.LeaseDurationSeconds == 40 && pr.HoldBoundMillis == 20000 && pr.RebindMarginMillis == 20000
	})
	p.edit(func(s *holdfastv1.UnitSpec) {
		s.Availability.LeaseDurationSeconds, s.Availability.RuntimeStartupGraceSeconds, s.Availability.RebindMarginSeconds = 10, 10, ptr.To(int32(5))
	})
	before := p.promise("the shorter lease pending", func(pr *holdfastv1.RuntimePromise) bool {
		return pr.LeaseDurationSeconds == 40 && pr.ShorterLease != nil && pr.ShorterLease.LeaseDurationSeconds == 10
	})
	if want := before.ShorterLease.Since.Add(60 * time.Second); !before.ShorterLease.EffectiveAt.Time.Equal(want) {
		t.Fatalf("shorter lease %+v: effective at since + 40s + its hold bound 20s", before.ShorterLease)
	}

	rt := p.k.proc(units.PodName("kiln", p.epoch(1)))
	// The grants are 10s since the edit: one extends the runtime only once
	// it would end later than the last 40s grant, which may have been taken
	// just before the edit. The new leader's first extension is due within
	// what is left of that grant, observed here.
	held, err := rt.leaseStatus()
	if err != nil || held.RemainingMillis == nil {
		t.Fatalf("the runtime's lease before the restart: %+v %v", held, err)
	}
	extendsWithin := time.Duration(*held.RemainingMillis)*time.Millisecond + 30*time.Second
	p.c.stop()
	p.c = startController(t, controllerOptions{namespace: p.ns, identity: "ctl-second", standDown: 90 * time.Second})
	poll.Until(t, extendsWithin, "the new leader granting", func() (bool, string) {
		st, err := rt.leaseStatus()
		return err == nil && st.LastGrantor == "ctl-second" && st.State == leaseapi.Held, fmt.Sprintf("%+v %v", st, err)
	})
	// The new leader keeps 40s and the instant its predecessor stopped
	// sending it, and waits out its own hold-off.
	after := p.promise("the record kept by the new leader", func(pr *holdfastv1.RuntimePromise) bool {
		return pr.ShorterLease == nil || pr.ShorterLease.EffectiveAt.After(before.ShorterLease.EffectiveAt.Time)
	})
	if after.LeaseDurationSeconds != 40 || after.ShorterLease == nil || !after.ShorterLease.Since.Equal(&before.ShorterLease.Since) ||
		after.ShorterLease.EffectiveAt.Time.Before(time.Now().Add(2*time.Minute)) {
		t.Fatalf("after the restart the promise is %+v %+v, was %+v %+v", after, after.ShorterLease, before, before.ShorterLease)
	}

	p.k.setNode(p.primary, func(n *simNode) { n.cut = true })
	if err := rt.signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.waitLease(1, holdfastv1.LeaseExpired, 90*time.Second)
	b := p.unit().Status.RuntimeBinding
	if got := b.Expiry.At.Sub(b.LastAcknowledgedRenewal.Time); got < 40*time.Second || got > 41*time.Second {
		t.Fatalf("expired %v after the last acknowledged renewal (%v), want the recorded 40s, not the spec's 10s", got, b.LastAcknowledgedRenewal)
	}
}

// L11 with real runtime processes: a mode switch is a planned hand-over,
// both ways, on the same node. Failover to Autonomy: no grant from the
// switch, the Failover runtime fences by its own lease, then epoch 2 runs
// in Autonomy, held. Autonomy to Failover: the Autonomy runtime is never
// granted; its pod is deleted, and epoch 3 starts only once it is gone. The
// device's log shows one writer at a time.
func TestAModeSwitchIsAPlannedHandOverBothWays(t *testing.T) {
	p := newPlant(t, "standby-1")
	p.place(1)
	p.waitLease(1, holdfastv1.LeaseHeld, plantStartupWait)
	p.waitWrites(1)
	rt1 := p.k.proc(units.PodName("kiln", p.epoch(1)))

	p.edit(func(s *holdfastv1.UnitSpec) { s.Availability.Mode = holdfastv1.Autonomy })
	poll.Until(t, 30*time.Second, "the hand-over held and announced", func() (bool, string) {
		u := p.unit()
		c := meta.FindStatusCondition(u.Status.Conditions, holdfastv1.ConditionRuntimeHandOver)
		return meta.IsStatusConditionTrue(u.Status.Conditions, holdfastv1.ConditionHeld) && c != nil && c.Status == metav1.ConditionTrue,
			fmt.Sprintf("%+v", u.Status.Conditions)
	})
	poll.Until(t, 30*time.Second, "the Failover runtime fenced by its own lease", func() (bool, string) {
		st, err := rt1.leaseStatus()
		return err == nil && st.Fenced && st.State == leaseapi.Fenced, fmt.Sprintf("%+v %v", st, err)
	})
	fencedAt := time.Now()
	p.waitPod(2)
	b := p.unit().Status.RuntimeBinding
	if b.Origin != holdfastv1.OriginHandOver || b.Node != p.primary || b.Promise.Mode != holdfastv1.Autonomy {
		t.Fatalf("binding after the hand-over: %+v %+v", b, b.Promise)
	}
	schedule(t, p.key, p.epoch(2), p.primary)
	p.waitWrites(2)
	for _, w := range devicesim.ByEpoch(p.dev.Writes())[p.epoch(1)] {
		if w.Time.After(fencedAt) {
			t.Fatalf("epoch 1 wrote at %v, after it reported Fenced at %v", w.Time, fencedAt)
		}
	}
	rt2 := p.k.proc(units.PodName("kiln", p.epoch(2)))
	if st, err := rt2.leaseStatus(); err != nil || st.Mode != holdfastv1.Autonomy || st.LastGrantor != "" {
		t.Fatalf("epoch 2 reports %+v (%v), want an Autonomy runtime no grant ever extended", st, err)
	}

	p.edit(func(s *holdfastv1.UnitSpec) { s.Availability.Mode = holdfastv1.Failover })
	p.waitPod(3)
	select {
	case <-rt2.exited:
	default:
		t.Fatal("epoch 3 was created while the Autonomy runtime of epoch 2 still ran")
	}
	schedule(t, p.key, p.epoch(3), p.primary)
	p.waitLease(3, holdfastv1.LeaseHeld, plantStartupWait)
	p.waitWrites(3)
	if err := devicesim.CheckOneWriter(p.dev.Writes()); err != nil {
		t.Fatalf("two writers on the device: %v", err)
	}
	by := devicesim.ByEpoch(p.dev.Writes())
	if last, first := by[p.epoch(2)][len(by[p.epoch(2)])-1].Time, by[p.epoch(3)][0].Time; !first.After(last) {
		t.Fatalf("epoch 3 first wrote at %v, before epoch 2's last write at %v", first, last)
	}
	// The lease of 10s is below the shipped floor (L14): reported at the
	// start, and again when the unit is Failover once more.
	want := []string{units.EventLeaseBelowFloor, units.EventLeaseEstablished, units.EventHandOver, units.EventHandedOver,
		units.EventHandOver, units.EventLeaseBelowFloor, units.EventHandedOver, units.EventLeaseEstablished}
	poll.Until(t, 15*time.Second, "the events", func() (bool, string) {
		got := p.eventReasons()
		return slices.Equal(got, want), strings.Join(got, ",")
	})
}
