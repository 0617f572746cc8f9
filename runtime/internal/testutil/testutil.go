// Package testutil holds helpers the runtime's tests share.
package testutil

import (
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/runtime/lease"
	"github.com/holdfast-io/holdfast/test/poll"
)

// Permit returns a permit at epoch from an Autonomy keeper (which permits
// every write), for driver tests that are not about the lease.
func Permit(t testing.TB, epoch int64) *lease.Permit {
	t.Helper()
	k, err := lease.NewKeeper(lease.Config{Unit: "plant/test", Epoch: epoch, Mode: holdfastv1.Autonomy,
		LeaseDuration: 30 * time.Second}, ktesting.NewLogger(t, ktesting.NewConfig()))
	if err != nil {
		t.Fatal(err)
	}
	p, err := k.Acquire(lease.WriteControl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Release)
	return p
}

// Eventually polls cond every 10ms until it holds or timeout passes.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, timeout, what, poll.True(cond))
}

// GrantedKeeper is a Failover keeper at epoch, granted a lease of duration
// now through the wire protocol's two steps (an anchor, then a grant that
// echoes it with an acknowledged age).
func GrantedKeeper(t testing.TB, clk *testingclock.FakeClock, epoch int64, duration time.Duration) *lease.Keeper {
	t.Helper()
	k, err := lease.NewKeeper(lease.Config{Unit: "plant/kiln-1", Epoch: epoch, Mode: holdfastv1.Failover,
		LeaseDuration: duration, Clock: clk}, ktesting.NewLogger(t, ktesting.NewConfig()))
	if err != nil {
		t.Fatal(err)
	}
	g := &leaseapi.Grant{Unit: "plant/kiln-1", Epoch: epoch, DurationMillis: duration.Milliseconds(), Grantor: "g", Seq: 1}
	_, reply := k.Grant(g, clk.Now())
	zero := int64(0)
	g2 := *g
	g2.Seq, g2.AckAgeMillis, g2.Anchor = 2, &zero, reply.Anchor
	if out, _ := k.Grant(&g2, clk.Now()); out != lease.Extended {
		t.Fatalf("grant: %v, want Extended", out)
	}
	return k
}
