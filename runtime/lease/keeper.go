// Package lease is the runtime's half of the control lease (docs/design.md §3): the
// Keeper holds the lease against one anchor, runs the hold and the fence on
// an injected monotonic clock, and gives out the permits without which no
// output is written. Handler serves the Keeper on POST/GET /v1/lease.
package lease

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// Config is what a Keeper is started with.
type Config struct {
	// Unit is the unit's namespace/name; a grant for another unit is refused.
	Unit string
	// Epoch is the binding epoch this runtime was created for (L7); 0 for
	// a warm standby.
	Epoch int64
	// Warm starts the runtime as a warm standby (docs/design.md §3, Warm
	// standby): bound to no epoch, it writes nothing until the first grant
	// from the authorised grantor for its unit binds it to that grant's
	// epoch for good (Keeper.Bind). Failover only, with Epoch 0.
	Warm bool
	// Mode is Failover (lease, hold, fence) or Autonomy (never fences).
	Mode holdfastv1.AvailabilityMode
	// LeaseDuration is the unit's configured lease. It sets the hold bound
	// reported before the first grant; every grant carries its own duration.
	LeaseDuration time.Duration
	// Incarnation names this life of the runtime process.
	Incarnation holdfastv1.RuntimeIncarnation
	// Clock is the monotonic clock every deadline is measured on; nil is the
	// real clock.
	Clock clock.WithTicker
}

// Validate reports every problem of a Config.
func (c *Config) Validate() error {
	var errs []error
	if c.Unit == "" {
		errs = append(errs, errors.New("unit: must name the unit"))
	}
	switch {
	case c.Warm && c.Epoch != 0:
		errs = append(errs, fmt.Errorf("epoch: %d: must be 0 for a warm standby, which takes its epoch from its first grant", c.Epoch))
	case c.Warm && c.Mode != holdfastv1.Failover:
		errs = append(errs, fmt.Errorf("warm: a warm standby must be in Failover mode, not %q: it waits for a lease, and an Autonomy runtime writes without one", c.Mode))
	case !c.Warm && c.Epoch < 1:
		errs = append(errs, fmt.Errorf("epoch: %d: must be at least 1", c.Epoch))
	}
	if c.Mode != holdfastv1.Failover && c.Mode != holdfastv1.Autonomy {
		errs = append(errs, fmt.Errorf("mode: %q: must be Failover or Autonomy", c.Mode))
	}
	if c.LeaseDuration < holdfastv1.MinLeaseDuration || c.LeaseDuration > holdfastv1.MaxLeaseDuration {
		errs = append(errs, fmt.Errorf("leaseDuration: %v: must be between %v and %v", c.LeaseDuration,
			holdfastv1.MinLeaseDuration, holdfastv1.MaxLeaseDuration))
	}
	return errors.Join(errs...)
}

// WriteKind says what an output write is for; the state decides which kinds
// pass.
type WriteKind int

const (
	// WriteControl is an ordinary output write of the control program.
	WriteControl WriteKind = iota
	// WriteHold drives an output to its hold value during the hold.
	WriteHold
)

func (k WriteKind) String() string {
	if k == WriteHold {
		return "hold"
	}
	return "control"
}

// ErrFenced refuses a write the lease does not permit.
var ErrFenced = errors.New("output write refused: the control lease does not permit it")

// RefusedError says why a write was refused.
type RefusedError struct {
	State leaseapi.State
	Kind  WriteKind
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s write refused in lease state %s", e.Kind, e.State)
}

// Unwrap lets errors.Is(err, ErrFenced) match every refusal.
func (e *RefusedError) Unwrap() error { return ErrFenced }

// Permit is the right to make one output write, stamped with the epoch the
// write must carry. Only a Keeper makes one, and every driver write takes
// one, so no output reaches a device except through Acquire. Release it
// when the write has returned: the fence waits for every outstanding permit
// before it reports Fenced.
type Permit struct {
	epoch   int64
	kind    WriteKind
	release func()
	valid   func(WriteKind) bool
}

// Epoch is the binding epoch the write carries (L7).
func (p *Permit) Epoch() int64 { return p.epoch }

// Kind is what the write is for.
func (p *Permit) Kind() WriteKind { return p.kind }

// Valid reports whether the lease, read on the clock now, still permits
// this write. A driver asks just before its bytes go on the wire, so a
// write that waited behind a dial or another request past the fence is
// never sent (the fence does not wait for a write that has not started).
func (p *Permit) Valid() bool {
	return p.release != nil && (p.valid == nil || p.valid(p.kind))
}

// Release ends the permit. It is safe to call more than once.
func (p *Permit) Release() {
	if p.release != nil {
		p.release()
		p.release = nil
	}
}

// Transition is one change of the reported lease state.
type Transition struct {
	From, To leaseapi.State
	Epoch    int64
	// Remaining until the deadline at the transition (negative past it).
	Remaining time.Duration
	// Grantor and Seq of the grant that caused a transition to Held.
	Grantor string
	Seq     uint64
}

// Outcome is what a grant did.
type Outcome int

const (
	// Extended: the grant moved the deadline later.
	Extended Outcome = iota
	// NoAcknowledgedAge: the grant carried no acknowledged age and grants
	// nothing (L1).
	NoAcknowledgedAge
	// Stale: the grant's anchor is not later than the deadline already held,
	// already past, or its seq is not newer than its grantor's last.
	Stale
	// NoAnchor: the grant carried no Anchor, or one this Keeper did not
	// issue (another life of the runtime, or made up), and grants nothing
	// (L1).
	NoAnchor
)

func (o Outcome) String() string {
	switch o {
	case Extended:
		return "Extended"
	case NoAcknowledgedAge:
		return "NoAcknowledgedAge"
	case Stale:
		return "Stale"
	case NoAnchor:
		return "NoAnchor"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Keeper holds one runtime's control lease.
type Keeper struct {
	cfg   Config
	clock clock.WithTicker
	log   klog.Logger

	// writes is held shared across every permitted write and exclusively by
	// the fence, so Fenced is reported only once no write is in flight.
	// Lock order: writes, then mu.
	writes sync.RWMutex

	mu sync.Mutex
	// epoch is the binding epoch; warm says none is bound yet (Bind).
	epoch    int64
	warm     bool
	duration time.Duration
	deadline time.Time // valid when granted
	granted  bool
	reported leaseapi.State
	lastSeq  map[string]uint64
	last     struct {
		grantor string
		seq     uint64
	}
	changed  chan struct{} // closed and replaced on every transition
	kick     chan struct{} // wakes Run when the deadline moved
	watchers []func(Transition)
	// fencing are called once per fence, at its instant and before the
	// fence waits for the writes in flight; fenceCalled says they were.
	fencing     []func()
	fenceCalled bool

	// The anchors this Keeper issues name instants as offsets from born on
	// its clock, tagged with life and sealed with key, so one from another
	// life of the runtime, or made up, is refused (L1).
	born time.Time
	life [anchorLifeBytes]byte
	key  [32]byte
}

const (
	anchorLifeBytes = 8
	anchorMACBytes  = 16
	anchorBytes     = anchorLifeBytes + 8 + anchorMACBytes
)

// NewKeeper returns a Keeper in its starting state: Ungranted (fenced) in
// Failover mode, Autonomous in Autonomy mode.
func NewKeeper(cfg Config, log klog.Logger) (*Keeper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	binding := []any{"unit", cfg.Unit, "epoch", cfg.Epoch}
	if cfg.Warm {
		binding = []any{"unit", cfg.Unit, "warmStandby", true}
	}
	k := &Keeper{
		cfg:      cfg,
		clock:    cfg.Clock,
		log:      log.WithValues(binding...),
		epoch:    cfg.Epoch,
		warm:     cfg.Warm,
		duration: cfg.LeaseDuration,
		lastSeq:  map[string]uint64{},
		changed:  make(chan struct{}),
		kick:     make(chan struct{}, 1),
	}
	k.born = k.clock.Now()
	if _, err := rand.Read(k.life[:]); err != nil {
		return nil, fmt.Errorf("anchor life: %w", err)
	}
	if _, err := rand.Read(k.key[:]); err != nil {
		return nil, fmt.Errorf("anchor key: %w", err)
	}
	k.reported = k.stateAt(k.born)
	return k, nil
}

// issueAnchor names the instant at on this Keeper's clock. at is never
// before born (the clock is monotonic and born was read first).
func (k *Keeper) issueAnchor(at time.Time) leaseapi.Anchor {
	var b [anchorBytes]byte
	copy(b[:anchorLifeBytes], k.life[:])
	binary.BigEndian.PutUint64(b[anchorLifeBytes:], uint64(max(at.Sub(k.born), 0)))
	copy(b[anchorLifeBytes+8:], k.seal(b[:anchorLifeBytes+8]))
	return leaseapi.Anchor(base64.RawURLEncoding.EncodeToString(b[:]))
}

func (k *Keeper) seal(msg []byte) []byte {
	m := hmac.New(sha256.New, k.key[:])
	m.Write(msg)
	return m.Sum(nil)[:anchorMACBytes]
}

// anchorInstant is the instant an Anchor names, when this Keeper issued it
// and it is not later than now.
func (k *Keeper) anchorInstant(a leaseapi.Anchor, now time.Time) (time.Time, bool) {
	if a == "" {
		return time.Time{}, false
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(string(a))
	if err != nil || len(b) != anchorBytes {
		return time.Time{}, false
	}
	if !hmac.Equal(b[anchorLifeBytes+8:], k.seal(b[:anchorLifeBytes+8])) || !hmac.Equal(b[:anchorLifeBytes], k.life[:]) {
		return time.Time{}, false
	}
	off := binary.BigEndian.Uint64(b[anchorLifeBytes:])
	if now.Before(k.born) || off > uint64(now.Sub(k.born)) {
		return time.Time{}, false
	}
	return k.born.Add(time.Duration(off)), true
}

// Epoch is the binding epoch of this runtime; 0 while it is warm.
func (k *Keeper) Epoch() int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.epoch
}

// Mode is the availability mode of this runtime.
func (k *Keeper) Mode() holdfastv1.AvailabilityMode { return k.cfg.Mode }

// HoldBound is the hold bound of the current lease duration (L3).
func (k *Keeper) HoldBound() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	return holdfastv1.HoldBound(k.duration)
}

// stateAt is the lease state by the clock alone. Callers hold mu.
func (k *Keeper) stateAt(now time.Time) leaseapi.State {
	switch {
	case k.cfg.Mode == holdfastv1.Autonomy:
		return leaseapi.Autonomous
	case k.warm:
		return leaseapi.Warm
	case !k.granted:
		return leaseapi.Ungranted
	case now.Before(k.deadline):
		return leaseapi.Held
	case now.Before(k.deadline.Add(holdfastv1.HoldBound(k.duration))):
		return leaseapi.Holding
	default:
		return leaseapi.Fenced
	}
}

// permits says whether a write of this kind passes in this state.
func permits(s leaseapi.State, kind WriteKind) bool {
	switch s {
	case leaseapi.Autonomous, leaseapi.Held:
		return true
	case leaseapi.Holding:
		return kind == WriteHold
	default:
		return false
	}
}

// fenced says whether a state refuses every write.
func fenced(s leaseapi.State) bool { return s.WritesNothing() }

// Acquire is the gate of the single write path: it returns a Permit when the
// lease, read on the clock at this instant, allows a write of this kind, and
// a *RefusedError otherwise. The state is read from the clock and not from
// the last reported transition, so a late timer never lets a write through.
func (k *Keeper) Acquire(kind WriteKind) (*Permit, error) {
	k.writes.RLock()
	k.mu.Lock()
	s, epoch := k.stateAt(k.clock.Now()), k.epoch
	k.mu.Unlock()
	if !permits(s, kind) {
		k.writes.RUnlock()
		return nil, &RefusedError{State: s, Kind: kind}
	}
	return &Permit{epoch: epoch, kind: kind, release: k.writes.RUnlock, valid: k.permitsNow}, nil
}

func (k *Keeper) permitsNow(kind WriteKind) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return permits(k.stateAt(k.clock.Now()), kind)
}

// Grant applies one renewal that arrived at arrival (read on the Keeper's
// clock when the request reached the runtime). The caller has validated the
// grant and checked its unit and epoch.
//
// L1: the deadline is min(arrival - ackAge, anchor) + duration. Both name
// the acknowledged reply before this grant: ackAge dates it by the
// grantor's clock and is only as good as the grant's transit is short,
// which a stalled runtime (SIGSTOP, a frozen cgroup) makes unbounded; the
// anchor is the instant this Keeper issued that reply, which came before
// the grantor's lastAck whatever the transit. So the runtime never outlives
// the grantor's own lastAck + duration, and a POST that lands late buys
// nothing. A grant without an acknowledged age, without an anchor this
// Keeper issued, whose deadline would not be later than the one held or is
// already past, or not newer than its grantor's last is answered but
// extends nothing. A grant that extends un-fences: the deadline is then in
// the future, so the state is Held. Every reply carries a fresh anchor.
func (k *Keeper) Grant(g *leaseapi.Grant, arrival time.Time) (Outcome, leaseapi.Reply) {
	var out Outcome
	var tr *Transition
	k.mu.Lock()
	now := k.clock.Now()
	arrival = minTime(arrival, now)
	ackAge, hasAck := g.AckAge()
	anchor, hasAnchor := k.anchorInstant(g.Anchor, now)
	switch {
	case !hasAck:
		out = NoAcknowledgedAge
	case !hasAnchor:
		out = NoAnchor
	case k.lastSeq[g.Grantor] >= g.Seq && k.seen(g.Grantor):
		out = Stale
	default:
		k.lastSeq[g.Grantor] = g.Seq
		candidate := minTime(arrival.Add(-ackAge), anchor).Add(g.Duration())
		if !candidate.After(now) || (k.granted && !candidate.After(k.deadline)) {
			out = Stale
			break
		}
		out = Extended
		k.duration = g.Duration()
		k.deadline = candidate
		k.granted = true
		k.last.grantor, k.last.seq = g.Grantor, g.Seq
		tr = k.transitionLocked(now)
		select {
		case k.kick <- struct{}{}:
		default:
		}
	}
	reply := leaseapi.Reply{
		Epoch:       k.epoch,
		State:       k.reported,
		Fenced:      fenced(k.reported),
		Incarnation: k.cfg.Incarnation,
		Anchor:      k.issueAnchor(arrival),
	}
	k.mu.Unlock()
	if tr != nil {
		k.notify(*tr)
	}
	return out, reply
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (k *Keeper) seen(grantor string) bool {
	_, ok := k.lastSeq[grantor]
	return ok
}

// transitionLocked moves the reported state to the clock's state when that
// needs no draining (every move except into a fenced state). Callers hold mu.
func (k *Keeper) transitionLocked(now time.Time) *Transition {
	s := k.stateAt(now)
	if s == k.reported || fenced(s) {
		return nil
	}
	return k.setLocked(s, now)
}

func (k *Keeper) setLocked(s leaseapi.State, now time.Time) *Transition {
	tr := &Transition{From: k.reported, To: s, Epoch: k.epoch, Remaining: k.deadline.Sub(now),
		Grantor: k.last.grantor, Seq: k.last.seq}
	k.reported = s
	if !fenced(s) {
		k.fenceCalled = false
	}
	close(k.changed)
	k.changed = make(chan struct{})
	return tr
}

// observe brings the reported state up to the clock. Entering Fenced first
// waits for every write in flight, so a reader that sees Fenced knows no
// permitted write is still on the wire. With wait false it does not wait:
// while a write is in flight the state stays as reported, which is what a
// watchdog reading GET /v1/lease must see of a runtime wedged in a write
// (past deadline + hold bound and not Fenced).
func (k *Keeper) observe(wait bool) {
	k.mu.Lock()
	now := k.clock.Now()
	s := k.stateAt(now)
	if s == k.reported {
		k.mu.Unlock()
		return
	}
	if !fenced(s) {
		tr := k.setLocked(s, now)
		k.mu.Unlock()
		k.notify(*tr)
		return
	}
	var hooks []func()
	if !k.fenceCalled && !fenced(k.reported) {
		k.fenceCalled = true
		hooks = slices.Clone(k.fencing)
	}
	k.mu.Unlock()
	// The writes in flight are cut short before the fence waits for them,
	// so nothing permitted before the fence reaches the device after it.
	for _, f := range hooks {
		f()
	}

	if wait {
		k.writes.Lock()
	} else if !k.writes.TryLock() {
		return
	}
	k.mu.Lock()
	now = k.clock.Now()
	var tr *Transition
	if s = k.stateAt(now); s != k.reported {
		tr = k.setLocked(s, now)
	}
	k.mu.Unlock()
	k.writes.Unlock()
	if tr != nil {
		k.notify(*tr)
	}
}

// OnTransition registers f to be called, in order, with every change of the
// reported state. f runs on the goroutine that made the change and must not
// block or call back into the Keeper's write path.
func (k *Keeper) OnTransition(f func(Transition)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.watchers = append(k.watchers, f)
}

func (k *Keeper) notify(tr Transition) {
	k.mu.Lock()
	ws := slices.Clone(k.watchers)
	k.mu.Unlock()
	switch tr.To {
	case leaseapi.Holding:
		k.log.Info("Control lease expired, holding outputs before self-fencing", "holdBound", k.HoldBound())
	case leaseapi.Fenced:
		k.log.Info("Control lease expired and hold bound passed, self-fenced: output writes stopped, reads continue")
	case leaseapi.Held:
		k.log.Info("Control lease granted", "from", tr.From, "grantor", tr.Grantor, "seq", tr.Seq, "remaining", tr.Remaining)
	}
	for _, w := range ws {
		w(tr)
	}
}

// OnFence registers f to be called once per fence, at the fence instant
// and before the Keeper waits for the writes in flight: a driver aborts its
// connection there (driver.AbortWritesOnFence) so that no permitted write
// still queued in the kernel reaches the device once the runtime is
// fenced. f must not block on a write in flight.
func (k *Keeper) OnFence(f func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.fencing = append(k.fencing, f)
}

// Changed returns a channel closed at the next change of the reported state.
func (k *Keeper) Changed() <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.changed
}

// State is the reported lease state: the last transition the Keeper made.
func (k *Keeper) State() leaseapi.State {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.reported
}

// Remaining is the time until the deadline on the Keeper's clock, and
// whether anything was ever granted.
func (k *Keeper) Remaining() (time.Duration, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.granted {
		return 0, false
	}
	return k.deadline.Sub(k.clock.Now()), true
}

// Status is the answer to GET /v1/lease.
func (k *Keeper) Status() leaseapi.Status {
	k.observe(false)
	k.mu.Lock()
	defer k.mu.Unlock()
	st := leaseapi.Status{
		Unit:            k.cfg.Unit,
		Mode:            k.cfg.Mode,
		Epoch:           k.epoch,
		State:           k.reported,
		Fenced:          fenced(k.reported),
		HoldBoundMillis: holdfastv1.HoldBound(k.duration).Milliseconds(),
		Incarnation:     k.cfg.Incarnation,
		LastGrantor:     k.last.grantor,
		LastSeq:         k.last.seq,
	}
	if k.granted {
		rem := k.deadline.Sub(k.clock.Now())
		ms := rem.Milliseconds()
		st.RemainingMillis = &ms
		wall := time.Now().Add(rem).UTC()
		st.Deadline = &wall
	}
	return st
}

// Run makes the transitions at their instants (Held to Holding at the
// deadline, Holding to Fenced at deadline + holdBound) until ctx ends.
// Writes are gated by the clock whether or not Run is late; Run is what
// runs the hold, reports the fence and notifies.
func (k *Keeper) Run(ctx context.Context) {
	for {
		wait := k.Step()
		var timer clock.Timer
		var fire <-chan time.Time
		if wait >= 0 {
			timer = k.clock.NewTimer(wait)
			fire = timer.C()
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case <-fire:
		case <-k.kick:
			if timer != nil {
				timer.Stop()
			}
		}
	}
}

// Step makes the transitions due on the clock now and returns the wait
// until the next one, negative when none is due (nothing granted, Autonomy,
// fenced). Run calls it at every wake-up; a caller that steps every process
// from one event loop (test/sim) calls it at the instants it returns and
// after every grant.
func (k *Keeper) Step() time.Duration {
	k.observe(true)
	k.mu.Lock()
	defer k.mu.Unlock()
	var wait time.Duration = -1
	if k.granted && k.cfg.Mode == holdfastv1.Failover {
		now := k.clock.Now()
		switch k.reported {
		case leaseapi.Held:
			wait = k.deadline.Sub(now)
		case leaseapi.Holding:
			wait = k.deadline.Add(holdfastv1.HoldBound(k.duration)).Sub(now)
		}
	}
	return wait
}
