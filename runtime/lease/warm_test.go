package lease

import (
	"errors"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

func newWarmKeeper(t *testing.T) (*Keeper, *testingclock.FakeClock) {
	t.Helper()
	clk := testingclock.NewFakeClock(t0)
	k, err := NewKeeper(Config{Unit: "plant/kiln-1", Warm: true, Mode: holdfastv1.Failover, LeaseDuration: 30 * time.Second,
		Incarnation: holdfastv1.RuntimeIncarnation{PodUID: "uid-warm"}, Clock: clk}, ktesting.NewLogger(t, ktesting.NewConfig()))
	if err != nil {
		t.Fatal(err)
	}
	return k, clk
}

// A warm Keeper permits no write of any kind, reports Warm at no epoch,
// and refuses to be bound by another unit's grant or by epoch 0; the first
// grant for its unit binds it for good, and that grant (no anchor of its
// own) extends nothing; the next one does, at the bound epoch, and the
// permits carry that epoch. Another epoch is refused from then on.
func TestAWarmKeeperIsBoundForGoodByTheFirstGrantForItsUnit(t *testing.T) {
	k, clk := newWarmKeeper(t)
	var seen []Transition
	k.OnTransition(func(tr Transition) { seen = append(seen, tr) })
	refusesEverything := func(when string) {
		t.Helper()
		for _, kind := range []WriteKind{WriteControl, WriteHold} {
			if _, err := k.Acquire(kind); !errors.Is(err, ErrFenced) {
				t.Fatalf("%s: a %s write was permitted: %v", when, kind, err)
			}
		}
	}
	if s := k.Status(); s.State != leaseapi.Warm || s.Epoch != 0 || !s.Fenced || s.RemainingMillis != nil || !k.Warm() {
		t.Fatalf("a warm Keeper reports %+v", s)
	}
	refusesEverything("warm")
	if wait := k.Step(); wait >= 0 {
		t.Fatalf("a warm Keeper has a transition due in %v", wait)
	}
	for _, tc := range []struct {
		unit  string
		epoch int64
	}{{"plant/kiln-2", 3}, {"plant/kiln-1", 0}, {"plant/kiln-1", -1}} {
		if e, ok := k.Bind(tc.unit, tc.epoch); ok || e != 0 || !k.Warm() {
			t.Fatalf("Bind(%s, %d) = %d, %v; warm %v: want refused, still warm", tc.unit, tc.epoch, e, ok, k.Warm())
		}
	}

	if e, ok := k.Bind("plant/kiln-1", 3); !ok || e != 3 || k.Warm() || k.Epoch() != 3 {
		t.Fatalf("Bind(plant/kiln-1, 3) = %d, %v; warm %v, epoch %d: want bound to 3", e, ok, k.Warm(), k.Epoch())
	}
	if len(seen) != 1 || seen[0].From != leaseapi.Warm || seen[0].To != leaseapi.Ungranted || seen[0].Epoch != 3 {
		t.Fatalf("transitions %+v, want one, Warm to Ungranted at epoch 3", seen)
	}
	first := &leaseapi.Grant{Unit: "plant/kiln-1", Epoch: 3, DurationMillis: 30000, Grantor: "g", Seq: 1}
	out, reply := k.Grant(first, clk.Now())
	if out != NoAcknowledgedAge || reply.Epoch != 3 || reply.State != leaseapi.Ungranted || reply.Anchor == "" {
		t.Fatalf("the binding grant: %v %+v, want NoAcknowledgedAge, Ungranted at epoch 3 with an anchor", out, reply)
	}
	refusesEverything("bound, not granted")
	for _, e := range []int64{2, 4} {
		if got, ok := k.Bind("plant/kiln-1", e); ok || got != 3 {
			t.Fatalf("Bind(plant/kiln-1, %d) at epoch 3 = %d, %v: want refused", e, got, ok)
		}
	}
	clk.Step(time.Second)
	out, reply = k.Grant(grant(k, 3, 2, 30*time.Second, age(0)), clk.Now())
	if out != Extended || reply.State != leaseapi.Held {
		t.Fatalf("the next grant: %v %+v, want Extended and Held", out, reply)
	}
	p, err := k.Acquire(WriteControl)
	if err != nil || p.Epoch() != 3 {
		t.Fatalf("a control write at the held lease: %v, permit epoch %v", err, p)
	}
	p.Release()
	if e, ok := k.Bind("plant/kiln-1", 3); !ok || e != 3 {
		t.Fatalf("Bind of the bound epoch = %d, %v, want accepted", e, ok)
	}
}

func TestAWarmKeeperIsFailoverOnlyAndHasNoEpoch(t *testing.T) {
	for _, cfg := range []Config{
		{Unit: "plant/kiln-1", Warm: true, Epoch: 2, Mode: holdfastv1.Failover, LeaseDuration: 30 * time.Second},
		{Unit: "plant/kiln-1", Warm: true, Mode: holdfastv1.Autonomy, LeaseDuration: 30 * time.Second},
	} {
		if err := cfg.Validate(); err == nil {
			t.Fatalf("%+v was accepted", cfg)
		}
	}
}
