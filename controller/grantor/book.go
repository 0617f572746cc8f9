package grantor

import (
	"time"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// Book is the grantor's half of the control lease protocol for one binding
// (docs/design.md §3 L1, L2): what the next grant carries, what an acknowledgement
// teaches, and when to send again. It reads no clock and sends nothing; the
// renewal loop drives it with its own clock and HTTP, and runtime/lease's
// property tests and test/leasetest drive the same Book, so the protocol
// is written once.
type Book struct {
	// LastAck is when the last acknowledgement arrived; zero if none. The
	// grantor declares Expired at LastAck + duration.
	LastAck time.Time
	// Acks counts acknowledgements at this binding.
	Acks int64
	// Incarnation is the one the last acknowledgement named.
	Incarnation holdfastv1.RuntimeIncarnation
	// RuntimeState and Fenced are what the last acknowledgement said.
	RuntimeState lease.State
	Fenced       bool
	// LaterOwners are the devices the last acknowledgement said the
	// runtime writes nothing to, their owner epoch being later than its
	// own (L13).
	LaterOwners []lease.LaterOwner
	// Anchor is the runtime's anchor as this grantor dates it: the arrival
	// of the acknowledgement whose Anchor the last acknowledged grant
	// carried back. The runtime's deadline is at most Anchor + duration
	// (its own anchor instant is earlier, by that reply's transit). Zero
	// while the runtime holds no anchor from this grantor.
	Anchor time.Time

	// echo is the Anchor of the last acknowledgement, sent back in every
	// later grant, and echoFrom the incarnation that issued it.
	echo     lease.Anchor
	echoFrom holdfastv1.RuntimeIncarnation
}

// Sent is what one grant carried, to be matched with its answer.
type Sent struct {
	// AckAt is the acknowledgement the grant's age and anchor name; zero
	// when it carried none.
	AckAt  time.Time
	anchor lease.Anchor
	from   holdfastv1.RuntimeIncarnation
}

// Acked reports whether an acknowledgement has been seen at this binding.
func (b *Book) Acked() bool { return !b.LastAck.IsZero() }

// Stamp fills g's AckAgeMillis and Anchor from the last acknowledgement,
// its age measured at now (just before sending), and returns what g
// carries.
func (b *Book) Stamp(g *lease.Grant, now time.Time) Sent {
	g.AckAgeMillis, g.Anchor = nil, ""
	if !b.Acked() {
		return Sent{}
	}
	// Rounded up: an older age only fences the runtime earlier.
	age := max(now.Sub(b.LastAck), 0)
	ms := int64((age + time.Millisecond - 1) / time.Millisecond)
	g.AckAgeMillis = &ms
	g.Anchor = b.echo
	return Sent{AckAt: b.LastAck, anchor: b.echo, from: b.echoFrom}
}

// Acknowledged records the 200 r to the grant that carried s, arriving at
// now, and reports whether it is the first acknowledgement at the binding.
func (b *Book) Acknowledged(s Sent, r lease.Reply, now time.Time) bool {
	first := !b.Acked()
	if s.anchor != "" && r.Incarnation == s.from {
		// The runtime took an anchor it issued: it now dates its lease
		// from the acknowledgement that anchor came with (or earlier).
		b.Anchor = s.AckAt
	} else {
		// No anchor, or one of the runtime's previous incarnation: the
		// grant extended nothing.
		b.Anchor = time.Time{}
	}
	b.LastAck = now
	b.Acks++
	b.Incarnation = r.Incarnation
	b.RuntimeState = r.State
	b.Fenced = r.Fenced
	b.LaterOwners = r.LaterOwners
	b.echo, b.echoFrom = r.Anchor, r.Incarnation
	return first
}

// NextWait is how long to wait at now before the next grant: at once when
// the runtime holds no anchor from this grantor and the last
// acknowledgement brought one it has not yet sent back (the second renewal
// of a binding, or the first after the runtime's incarnation changed); the
// start-up retry while it holds none; otherwise the L2 cadence against the
// anchor it holds.
func (b *Book) NextWait(duration time.Duration, now time.Time) time.Duration {
	switch {
	case b.Anchor.IsZero() && b.Acked() && b.echo != "":
		return 0
	case b.Anchor.IsZero():
		return StartupInterval(duration)
	default:
		return lease.RenewInterval(duration, now.Sub(b.Anchor))
	}
}
