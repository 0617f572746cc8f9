package grantor

import (
	"testing"
	"time"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// L2: the renewal interval is measured against the anchor the runtime
// holds (the reply the last acknowledged grant echoed, one renewal older
// than the last acknowledgement), not against the last acknowledgement.
// After a run of refused renewals the acknowledgement that ends it brings
// an anchor 22s old: the runtime's deadline is 8s away, so the next grant
// goes out within 4s ((30s - 22s) / 2), where the last acknowledgement
// alone would allow the full cadence of 5s.
func TestTheCadenceFollowsTheAnchor(t *testing.T) {
	const d = 30 * time.Second
	t.Run("book", func(t *testing.T) {
		t0 := time.Unix(1000, 0)
		inc := holdfastv1.RuntimeIncarnation{PodUID: "uid-1"}
		var b Book
		var g lease.Grant
		b.Acknowledged(b.Stamp(&g, t0), lease.Reply{Incarnation: inc, Anchor: "a1"}, t0)
		b.Acknowledged(b.Stamp(&g, t0), lease.Reply{Incarnation: inc, Anchor: "a2"}, t0)
		// Refused for 22s: the runtime still holds the anchor of the reply
		// at t0; the grant that gets through carries it.
		s := b.Stamp(&g, t0.Add(22*time.Second))
		b.Acknowledged(s, lease.Reply{Incarnation: inc, Anchor: "a3"}, t0.Add(22*time.Second))
		now := t0.Add(22 * time.Second)
		if w := b.NextWait(d, now); w != 4*time.Second {
			t.Fatalf("next wait %v, want 4s: half of what is left of the runtime's anchor (30s - 22s)", w)
		}
	})
	t.Run("loop", func(t *testing.T) {
		clk, e, g := renewing(t, 1)
		settle(t, g, e, 2)
		step := func(by time.Duration) {
			t.Helper()
			n := len(e.received())
			clk.Step(by)
			if clk.Waiters() == 0 { // the loop's timer fired: a grant goes out
				waitFor(t, "the loop to send and park again", func() bool { return len(e.received()) > n && parked(g, unit) })
			}
		}
		e.setRefuse(true)
		for clk.Now().Before(time.Unix(1022, 0)) {
			step(500 * time.Millisecond)
		}
		e.setRefuse(false)
		for {
			if o, _ := g.Observe(unit); o.LastAttempt.Outcome == Acknowledged && o.LastAck.After(time.Unix(1022, 0)) {
				break
			}
			step(100 * time.Millisecond)
		}
		obs, _ := g.Observe(unit)
		want := lease.RenewInterval(d, obs.LastAck.Sub(obs.Anchor))
		if floor := lease.RenewInterval(d, 0) - lease.RenewInterval(d, 0)/jitterDivisor; want >= floor {
			t.Fatalf("the scenario must leave the anchor so old that its cadence (%v) is below the last acknowledgement's less its jitter (%v): anchor %v, last ack %v",
				want, floor, obs.Anchor, obs.LastAck)
		}
		n := len(e.received())
		step(want)
		if got := len(e.received()); got != n+1 {
			t.Fatalf("%d grants within %v of the acknowledgement at %v (anchor %v), want one: the wait ran from the last acknowledgement, not the runtime's anchor",
				got-n, want, obs.LastAck.Unix(), obs.Anchor.Unix())
		}
	})
}
