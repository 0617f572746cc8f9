package grantor

import (
	"testing"
	"time"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// L1/L2: each grant carries the age and the anchor of one reply, the last
// acknowledged; once a grant carrying them is acknowledged, the runtime's
// anchor is dated at that reply's arrival (one renewal older than the
// grantor's own last success), and the cadence runs against it.
func TestTheRuntimesAnchorIsDatedAtTheReplyItsGrantEchoed(t *testing.T) {
	const d = 30 * time.Second
	t0 := time.Unix(1000, 0)
	inc := holdfastv1.RuntimeIncarnation{PodUID: "uid-1"}
	var b Book
	g := lease.Grant{}
	s := b.Stamp(&g, t0)
	if g.AckAgeMillis != nil || g.Anchor != "" || !s.AckAt.IsZero() {
		t.Fatalf("the first grant carries %v %q", g.AckAgeMillis, g.Anchor)
	}
	if first := b.Acknowledged(s, lease.Reply{Incarnation: inc, Anchor: "a1"}, t0.Add(40*time.Millisecond)); !first {
		t.Fatal("the first acknowledgement was not reported as first")
	}
	if w := b.NextWait(d, t0.Add(40*time.Millisecond)); w != 0 || !b.Anchor.IsZero() {
		t.Fatalf("after the first acknowledgement: wait %v, anchor %v; want at once, none held", w, b.Anchor)
	}

	s = b.Stamp(&g, t0.Add(41*time.Millisecond))
	if g.AckAgeMillis == nil || *g.AckAgeMillis != 1 || g.Anchor != "a1" {
		t.Fatalf("the second grant carries %v %q, want 1ms and a1", g.AckAgeMillis, g.Anchor)
	}
	b.Acknowledged(s, lease.Reply{Incarnation: inc, Anchor: "a2"}, t0.Add(90*time.Millisecond))
	if want := t0.Add(40 * time.Millisecond); !b.Anchor.Equal(want) || !b.LastAck.Equal(t0.Add(90*time.Millisecond)) {
		t.Fatalf("anchor %v lastAck %v, want the anchor at the first reply's arrival %v", b.Anchor, b.LastAck, want)
	}
	now := t0.Add(3 * time.Second)
	if w, want := b.NextWait(d, now), lease.RenewInterval(d, now.Sub(t0.Add(40*time.Millisecond))); w != want {
		t.Fatalf("wait %v, want the cadence against the anchor's age %v", w, want)
	}
	// An age is rounded up: an older anchor only fences the runtime earlier.
	b.Stamp(&g, t0.Add(90*time.Millisecond+1))
	if *g.AckAgeMillis != 1 || g.Anchor != "a2" {
		t.Fatalf("grant carries %v %q, want 1ms (rounded up) and a2", *g.AckAgeMillis, g.Anchor)
	}
}
