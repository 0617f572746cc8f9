// Package lease is the wire protocol of the control lease between the grantor
// (holdfast-controller) and a unit runtime (docs/design.md §3).
//
// The grantor POSTs a Grant to Path on the runtime pod's IP and leasePort. The
// runtime answers 200 with a Reply, 409 with a Conflict for an epoch that is
// not its own, 400 with an Error for a malformed grant, and 403 with an Error
// (ReasonUnauthenticated) for a grant not sent by the authorised grantor over
// mutual TLS (auth.go). GET on Path answers a Status, which the node plugin's
// watchdog reads, with or without TLS: it grants nothing.
//
// One anchor (L1): every Reply carries an Anchor, a token the
// runtime issues naming the instant on its own monotonic clock at which it
// took the grant. The grantor keeps the Anchor of the last reply it saw
// acknowledged and sends it back, beside that reply's age (AckAgeMillis),
// in every later grant. The runtime dates its lease from the earlier of the
// two:
//
//	deadline = min(arrival - ackAge, anchor) + duration
//
// The anchor instant comes before the grantor received that reply, which is
// the grantor's lastAck, so the runtime's deadline is never later than the
// grantor's Expired (lastAck + duration) however long the grant took to
// arrive: a grant that sat in the socket of a stopped runtime buys it
// nothing. A grant without both (the first at a binding, or one whose anchor
// this runtime did not issue, e.g. from its previous life) extends nothing
// and is answered with a fresh Anchor; the grantor follows such a reply at
// once with a grant carrying it.
package lease

import (
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// Path of the lease endpoint on the runtime's leasePort.
const Path = "/v1/lease"

// Grant is one renewal of a runtime's control lease.
type Grant struct {
	// Unit is the unit's namespace/name.
	Unit string `json:"unit"`
	// Epoch is the binding epoch the grant is for.
	Epoch int64 `json:"epoch"`
	// DurationMillis is the lease duration.
	DurationMillis int64 `json:"durationMillis"`
	// AckAgeMillis is the age, measured by the grantor just before sending,
	// of the last renewal it saw acknowledged at this binding. Absent when
	// there is none: such a grant extends nothing (L1), and the grantor
	// follows its first acknowledged renewal at once with a second.
	AckAgeMillis *int64 `json:"ackAgeMillis,omitempty"`
	// Anchor is the Anchor of the last reply the grantor saw acknowledged at
	// this binding: the reply whose age AckAgeMillis is. Absent when there
	// is none. A grant extends the lease only when it carries both, and the
	// Anchor was issued by the runtime receiving it (L1).
	Anchor Anchor `json:"anchor,omitempty"`
	// Grantor names the granting process (pod name), for the runtime's log.
	Grantor string `json:"grantor"`
	// Seq increases with every grant a grantor sends.
	Seq uint64 `json:"seq"`
}

// Duration is the grant's lease duration.
func (g *Grant) Duration() time.Duration {
	return time.Duration(g.DurationMillis) * time.Millisecond
}

// AckAge is the acknowledged age the grant carries, and whether it has one.
func (g *Grant) AckAge() (time.Duration, bool) {
	if g.AckAgeMillis == nil {
		return 0, false
	}
	return time.Duration(*g.AckAgeMillis) * time.Millisecond, true
}

// Validate returns every problem of a malformed grant with its field path.
func (g *Grant) Validate() field.ErrorList {
	var errs field.ErrorList
	if g.Unit == "" {
		errs = append(errs, field.Required(field.NewPath("unit"), "must name the unit"))
	}
	if g.Epoch < 1 {
		errs = append(errs, field.Invalid(field.NewPath("epoch"), g.Epoch, "must be at least 1"))
	}
	if d := g.Duration(); d < holdfastv1.MinLeaseDuration || d > holdfastv1.MaxLeaseDuration {
		errs = append(errs, field.Invalid(field.NewPath("durationMillis"), g.DurationMillis,
			"must be between 10000 and 600000"))
	}
	if g.AckAgeMillis != nil && *g.AckAgeMillis < 0 {
		errs = append(errs, field.Invalid(field.NewPath("ackAgeMillis"), *g.AckAgeMillis, "must not be negative"))
	}
	if len(g.Anchor) > MaxAnchorLength {
		errs = append(errs, field.TooLong(field.NewPath("anchor"), "", MaxAnchorLength))
	}
	if g.Grantor == "" {
		errs = append(errs, field.Required(field.NewPath("grantor"), "must name the grantor"))
	}
	return errs
}

// Anchor names one instant on one runtime's monotonic clock: the instant at
// which that runtime took a grant. The runtime issues one in every Reply and
// accepts back only the ones it issued itself in its current life; to the
// grantor it is opaque, to be echoed, never made or compared by value.
type Anchor string

// MaxAnchorLength bounds an Anchor on the wire; the runtime's are 43
// characters.
const MaxAnchorLength = 128

// State is the runtime's own view of its lease.
type State string

const (
	// Ungranted: a Failover runtime that has not been granted at this epoch;
	// it is fenced.
	Ungranted State = "Ungranted"
	// Held: granted, before the deadline; outputs are written.
	Held State = "Held"
	// Holding: past the deadline, within the hold bound; outputs are driven
	// to their hold values and nothing else is written.
	Holding State = "Holding"
	// Fenced: past deadline plus hold bound; every output write is refused,
	// reads go on, drivers stay connected.
	Fenced State = "Fenced"
	// Autonomous: an Autonomy runtime; it never fences.
	Autonomous State = "Autonomous"
	// Warm: a warm standby (docs/design.md §3, Warm standby): bound to no
	// epoch yet, it reads its devices and writes nothing. The first grant
	// from the authorised grantor for its unit binds it to that grant's
	// epoch for good; it is then Ungranted at that epoch. It is not
	// reported as Fenced or Ungranted because both name a runtime of an
	// epoch: Fenced is what the controller and the node plugin take as
	// proof that an epoch's writer has stopped (L3, L11), and Ungranted
	// waits for one epoch's grant. A warm runtime belongs to no epoch, and
	// any epoch's grant may still make it a writer.
	Warm State = "Warm"
)

// WritesNothing says whether a state refuses every output write.
func (s State) WritesNothing() bool {
	return s == Fenced || s == Ungranted || s == Warm
}

// Reply answers an accepted grant (200).
type Reply struct {
	Epoch       int64                         `json:"epoch"`
	State       State                         `json:"state"`
	Fenced      bool                          `json:"fenced"`
	Incarnation holdfastv1.RuntimeIncarnation `json:"incarnation"`
	// Anchor names the instant the runtime took this grant. The grantor
	// sends it back in later grants (Grant.Anchor) while this reply is its
	// last acknowledged one.
	Anchor Anchor `json:"anchor,omitempty"`
	// LaterOwners are the devices this runtime writes nothing to, because
	// their owner epoch is later than its own (docs/design.md §3 L13).
	LaterOwners []LaterOwner `json:"laterOwners,omitempty"`
}

// LaterOwner is a device whose owner-epoch block holds a later epoch than
// the runtime's: read before the runtime's first write on a connection, it
// says another binding has taken the device since this one was made (or the
// unit's epochs restarted), so the runtime writes nothing to it, neither its
// epoch nor an output, until the block is no later than its own.
type LaterOwner struct {
	// Device is the runtime's name of the device (its driver).
	Device string `json:"device"`
	// Address is where the runtime reaches it.
	Address string `json:"address,omitempty"`
	// OwnerEpoch is the epoch the device's owner-epoch block holds.
	OwnerEpoch int64 `json:"ownerEpoch"`
}

// Conflict answers a grant for an epoch that is not the runtime's (409).
type Conflict struct {
	Message      string `json:"message"`
	RuntimeEpoch int64  `json:"runtimeEpoch"`
	GrantEpoch   int64  `json:"grantEpoch"`
}

// Error answers a malformed request (400) or a refusal the runtime explains
// (403 when the sender is not the authorised grantor).
type Error struct {
	Message string `json:"message"`
	// Reason is ReasonUnauthenticated for a 403; empty otherwise.
	Reason string `json:"reason,omitempty"`
}

// Status answers GET Path.
type Status struct {
	Unit string                      `json:"unit"`
	Mode holdfastv1.AvailabilityMode `json:"mode"`
	// Epoch is the binding epoch; 0 while the runtime is Warm (bound to
	// none yet).
	Epoch int64 `json:"epoch"`
	State State `json:"state"`
	// Fenced is true while output writes are refused.
	Fenced bool `json:"fenced"`
	// RemainingMillis until the lease deadline by the runtime's monotonic
	// clock, negative once past it; absent when nothing was ever granted.
	RemainingMillis *int64 `json:"remainingMillis,omitempty"`
	// Deadline is the same instant on the wall clock, for people.
	Deadline *time.Time `json:"deadline,omitempty"`
	// HoldBoundMillis is the runtime's hold bound.
	HoldBoundMillis int64                         `json:"holdBoundMillis"`
	Incarnation     holdfastv1.RuntimeIncarnation `json:"incarnation"`
	// LastGrantor and LastSeq identify the last grant that extended the lease.
	LastGrantor string `json:"lastGrantor,omitempty"`
	LastSeq     uint64 `json:"lastSeq,omitempty"`
	// LaterOwners are the devices the runtime writes nothing to because
	// their owner epoch is later than its own (L13).
	LaterOwners []LaterOwner `json:"laterOwners,omitempty"`
}
