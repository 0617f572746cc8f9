package lease

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"k8s.io/klog/v2"
	testingclock "k8s.io/utils/clock/testing"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/grantor"
)

// The simulation below runs the grantor's own bookkeeping
// (controller/grantor's Book: what each grant carries, what an
// acknowledgement teaches, the L2 cadence) against a real Keeper on one
// injected clock, through a transport that loses POSTs and responses,
// delays them, holds them in the socket of a stalled runtime for many
// seconds, and a runtime handler that sometimes refuses. Both sides read the
// same clock; only differences of it are used, as with two monotonic
// clocks.

const step = 10 * time.Millisecond

// link decides what happens to one renewal.
type link struct {
	dropForward bool          // the POST never lands
	refuse      bool          // it lands, and the runtime's handler answers 503 without applying it
	dropReturn  bool          // the runtime applied it; the 200 never gets back
	forward     time.Duration // transit of the POST, including time in the socket of a stalled runtime
	ret         time.Duration // transit of the response
}

type phase struct {
	until time.Duration
	kind  string // healthy, symmetric, forwardLoss, reverseLoss, refusing, flaky, stalled
}

// simGrantor is one renewal loop: the real Book, one attempt in flight, the
// request timeout after which a late answer is not an acknowledgement.
type simGrantor struct {
	book     grantor.Book
	timeout  time.Duration
	seq      uint64
	nextSend time.Duration
	inFlight bool
}

type event struct {
	at     time.Duration
	kind   string // arrive, respond, refused, timeout
	seq    uint64
	g      *leaseapi.Grant
	lk     link
	sent   grantor.Sent
	reply  leaseapi.Reply
	sentAt time.Duration
}

type simResult struct {
	// worst excess of the runtime's deadline past the grantor's Expired, of
	// its control writes past Expired, and of any write past Expired + hold
	// bound.
	deadlineExcess, controlExcess, anyExcess time.Duration
	// everFencedWhileHealthy: a control write was refused after the first grant.
	everFencedWhileHealthy bool
	firstRefusal           time.Duration
	grants                 int
	// heldFor is how long the runtime permitted control writes.
	heldFor time.Duration
	// misdated: the grantor's Book dated the runtime's anchor later than
	// the runtime's own deadline allows, by more than a reply's transit
	// (L2's cadence is measured against that date).
	misdated time.Duration
}

func runSim(t *testing.T, rng *rand.Rand, duration time.Duration, length time.Duration, phases []phase,
	linkFor func(kind string, seq uint64, rng *rand.Rand) link) simResult {
	t.Helper()
	clk := testingclock.NewFakeClock(t0)
	k, err := NewKeeper(Config{Unit: "plant/kiln-1", Epoch: 3, Mode: holdfastv1.Failover,
		LeaseDuration: duration, Clock: clk}, klog.Background().V(10))
	if err != nil {
		t.Fatal(err)
	}
	holdBound := holdfastv1.HoldBound(duration)
	g := &simGrantor{timeout: grantor.RequestTimeout(duration)}
	var events []event
	var res simResult
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	phaseAt := func(at time.Duration) string {
		for _, p := range phases {
			if at < p.until {
				return p.kind
			}
		}
		return "healthy"
	}
	schedule := func(now time.Duration) { g.nextSend = now + g.book.NextWait(duration, at(now)) }
	for now := time.Duration(0); now <= length; now += step {
		clk.SetTime(at(now))
		// grantor sends
		if !g.inFlight && now >= g.nextSend {
			g.seq++
			gr := &leaseapi.Grant{Unit: "plant/kiln-1", Epoch: 3, DurationMillis: duration.Milliseconds(),
				Grantor: "g", Seq: g.seq}
			ev := event{seq: g.seq, g: gr, sentAt: now, sent: g.book.Stamp(gr, at(now))}
			ev.lk = linkFor(phaseAt(now), g.seq, rng)
			g.inFlight = true
			timeout := ev
			timeout.kind, timeout.at = "timeout", now+g.timeout
			events = append(events, timeout)
			if !ev.lk.dropForward {
				arrive := ev
				arrive.kind, arrive.at = "arrive", now+ev.lk.forward
				events = append(events, arrive)
			}
		}
		// deliver what is due, in time order
		for i := 0; i < len(events); i++ {
			ev := events[i]
			if ev.at > now {
				continue
			}
			events = append(events[:i], events[i+1:]...)
			i--
			switch ev.kind {
			case "arrive":
				if ev.lk.refuse {
					// the handler answers 503 without applying the grant
					resp := ev
					resp.kind, resp.at = "refused", now+ev.lk.ret
					events = append(events, resp)
					continue
				}
				_, ev.reply = k.Grant(ev.g, clk.Now())
				res.grants++
				if !ev.lk.dropReturn {
					resp := ev
					resp.kind, resp.at = "respond", now+ev.lk.ret
					events = append(events, resp)
				}
			case "respond":
				if !g.inFlight || ev.seq != g.seq || now-ev.sentAt > g.timeout {
					continue // too late: the grantor already gave up on it
				}
				g.inFlight = false
				g.book.Acknowledged(ev.sent, ev.reply, at(now))
				schedule(now)
			case "refused":
				if g.inFlight && ev.seq == g.seq && now-ev.sentAt <= g.timeout {
					g.inFlight = false
					schedule(now)
				}
			case "timeout":
				if g.inFlight && ev.seq == g.seq {
					g.inFlight = false
					schedule(now)
				}
			}
		}
		// the invariant, at every instant
		if rem, granted := k.Remaining(); granted {
			if !g.book.Acked() {
				t.Fatalf("at %v the runtime holds a deadline and the grantor has seen no acknowledgement", now)
			}
			expired := g.book.LastAck.Add(duration)
			if deadline := clk.Now().Add(rem); deadline.After(expired) {
				res.deadlineExcess = max(res.deadlineExcess, deadline.Sub(expired))
			}
		}
		// L2: the cadence runs against the Book's date of the runtime's
		// anchor, which must not be later than the runtime's own by more
		// than the return transit of a reply (under the request timeout;
		// a millisecond for the age's rounding). Checked while the Book
		// believes that anchor live past the transit.
		if !g.book.Anchor.IsZero() {
			believed := g.book.Anchor.Add(duration - g.timeout - time.Millisecond)
			if believed.After(clk.Now()) {
				rem, granted := k.Remaining()
				if !granted {
					res.misdated = max(res.misdated, believed.Sub(clk.Now()))
				} else if deadline := clk.Now().Add(rem); deadline.Before(believed) {
					res.misdated = max(res.misdated, believed.Sub(deadline))
				}
			}
		}
		if g.book.Acked() {
			expired := g.book.LastAck.Sub(t0) + duration
			if now >= expired && canWrite(k, WriteControl) {
				res.controlExcess = max(res.controlExcess, now-expired+step)
			}
			if now >= expired+holdBound && canWrite(k, WriteHold) {
				res.anyExcess = max(res.anyExcess, now-expired-holdBound+step)
			}
		}
		if k.State() != leaseapi.Ungranted {
			if canWrite(k, WriteControl) {
				res.heldFor += step
			} else if !res.everFencedWhileHealthy {
				res.everFencedWhileHealthy, res.firstRefusal = true, now
			}
		}
	}
	return res
}

func randomPhases(rng *rand.Rand, length time.Duration) []phase {
	kinds := []string{"healthy", "symmetric", "forwardLoss", "reverseLoss", "refusing", "flaky", "stalled"}
	var ps []phase
	at := time.Duration(0)
	for at < length {
		at += time.Duration(rng.IntN(40_000)) * time.Millisecond
		ps = append(ps, phase{until: at, kind: kinds[rng.IntN(len(kinds))]})
	}
	return ps
}

func linkWith(maxForward time.Duration) func(kind string, seq uint64, rng *rand.Rand) link {
	return func(kind string, _ uint64, rng *rand.Rand) link {
		lk := link{ret: time.Duration(rng.IntN(2500)) * time.Millisecond}
		if maxForward > 0 {
			lk.forward = time.Duration(rng.Int64N(int64(maxForward)))
		}
		switch kind {
		case "symmetric":
			lk.dropForward = true
		case "forwardLoss":
			lk.dropForward = true
		case "reverseLoss":
			lk.dropReturn = true
		case "refusing":
			lk.refuse = true
		case "flaky":
			lk.dropForward = rng.IntN(3) == 0
			lk.dropReturn = rng.IntN(3) == 0
			lk.refuse = rng.IntN(5) == 0
		case "stalled":
			// The runtime is stopped: the kernel takes the POST into its
			// socket and the process reads it when it wakes, long after the
			// grantor gave up on it; sometimes its answer is lost too.
			lk.forward = time.Duration(2000+rng.IntN(40_000)) * time.Millisecond
			lk.dropReturn = rng.IntN(2) == 0
		}
		return lk
	}
}

var durations = []time.Duration{10 * time.Second, 12 * time.Second, 30 * time.Second, 45 * time.Second, 90 * time.Second}

// L1, property: over many random renewal schedules, transits, stalls of the
// runtime, losses, refusals and return delays, the runtime's deadline is
// never later than the grantor's Expired (lastAck + duration) at any
// instant, it makes no control write at or after Expired, and no write at
// all once the hold bound past it has run (which the re-bind margin
// covers).
func TestLeaseNeverOutlivesTheGrantorsExpiry(t *testing.T) {
	var held time.Duration
	for seed := uint64(1); seed <= 150; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x1890))
		d := durations[rng.IntN(len(durations))]
		length := 4 * time.Minute
		maxForward := []time.Duration{0, 50 * time.Millisecond, 1500 * time.Millisecond}[rng.IntN(3)]
		res := runSim(t, rng, d, length, randomPhases(rng, length), linkWith(maxForward))
		if res.deadlineExcess > 0 || res.controlExcess > 0 || res.anyExcess > 0 {
			t.Fatalf("seed %d, lease %v: the runtime's deadline passed the grantor's Expired by %v; it wrote past Expired by %v (control) and past Expired+holdBound by %v (any)",
				seed, d, res.deadlineExcess, res.controlExcess, res.anyExcess)
		}
		if res.grants == 0 {
			t.Fatalf("seed %d: no grant ever landed; the simulation tested nothing", seed)
		}
		if res.misdated > 0 {
			t.Fatalf("seed %d, lease %v: the grantor dated the runtime's anchor %v later than the runtime's deadline allows: its cadence runs against the wrong anchor (L2)",
				seed, d, res.misdated)
		}
		held += res.heldFor
	}
	if held < 150*time.Minute {
		t.Fatalf("the runtime held its lease %v over 150 runs of 4 minutes, under a quarter: the simulation barely granted", held)
	}
}

// #579/#1802/#1810, the stall: a runtime that is stopped (SIGSTOP, a frozen
// cgroup, an overloaded node) reads grants that sat in its socket for as
// long as it was stopped. Dated from their arrival and the age they carry,
// they would extend it by the whole stall past the grantor's Expired; the
// echoed anchor dates them before the grantor's lastAck however long they
// waited.
func TestAStalledRuntimeNeverOutlivesTheGrantorsExpiry(t *testing.T) {
	const d = 10 * time.Second
	hold := holdfastv1.HoldBound(d)
	for _, order := range []string{"oldest first", "newest first"} {
		t.Run(order, func(t *testing.T) {
			clk := testingclock.NewFakeClock(t0)
			k, err := NewKeeper(Config{Unit: "plant/kiln-1", Epoch: 1, Mode: holdfastv1.Failover, LeaseDuration: d, Clock: clk},
				klog.Background().V(10))
			if err != nil {
				t.Fatal(err)
			}
			var book grantor.Book
			seq := uint64(0)
			send := func() (*leaseapi.Grant, grantor.Sent) {
				seq++
				g := &leaseapi.Grant{Unit: "plant/kiln-1", Epoch: 1, DurationMillis: d.Milliseconds(), Grantor: "ctl-0", Seq: seq}
				return g, book.Stamp(g, clk.Now())
			}
			// Two healthy renewals, 5ms each way: the runtime holds.
			for book.Anchor.IsZero() {
				g, sent := send()
				clk.Step(5 * time.Millisecond)
				_, r := k.Grant(g, clk.Now())
				clk.Step(5 * time.Millisecond)
				book.Acknowledged(sent, r, clk.Now())
			}
			if k.State() != leaseapi.Held {
				t.Fatalf("after two acknowledged renewals the runtime is %s", k.State())
			}
			expired := book.LastAck.Add(d)

			// The runtime stops. The grantor goes on at its cadence, each
			// POST taken into the socket and timed out, until it has long
			// declared Expired and the margin has run.
			var queued []*leaseapi.Grant
			for clk.Now().Before(expired.Add(hold + 5*time.Second)) {
				clk.Step(book.NextWait(d, clk.Now()))
				g, _ := send()
				queued = append(queued, g)
				clk.Step(grantor.RequestTimeout(d)) // no answer: not an acknowledgement
			}
			// 20s of the injected clock after the first queued POST, the
			// runtime wakes and reads them all.
			wake := clk.Now()
			if stall := wake.Sub(expired); stall < 5*time.Second {
				t.Fatalf("the stall ends %v after Expired; the test needs more", stall)
			}
			if order == "newest first" {
				slices.Reverse(queued)
			}
			for _, g := range queued {
				if out, _ := k.Grant(g, clk.Now()); out == Extended {
					t.Fatalf("grant %d of %d, carrying an acknowledged age of %dms and read from the socket at the wake, extended the lease",
						g.Seq, seq, *g.AckAgeMillis)
				}
				if s := k.Status(); s.State != leaseapi.Fenced || !s.Fenced {
					t.Fatalf("after grant %d from the socket the runtime is %s", g.Seq, s.State)
				}
			}
			if rem, _ := k.Remaining(); clk.Now().Add(rem).After(expired) {
				t.Fatalf("the runtime's deadline is %v past the grantor's Expired", clk.Now().Add(rem).Sub(expired))
			}
			// And it stays fenced: nothing but a grant carrying an anchor
			// issued after the wake can move it.
			for end := clk.Now().Add(d + hold); clk.Now().Before(end); clk.Step(100 * time.Millisecond) {
				if s := k.Status(); s.State != leaseapi.Fenced || canWrite(k, WriteControl) || canWrite(k, WriteHold) {
					t.Fatalf("%v after the wake the runtime is %s and permits writes", clk.Now().Sub(wake), s.State)
				}
			}
		})
	}
}

// A grant carrying an acknowledged age but no anchor, or an anchor this
// Keeper did not issue (its previous life's, another runtime's, made up or
// from the future), extends nothing and is answered with a fresh anchor.
func TestAGrantWithoutThisRuntimesAnchorExtendsNothing(t *testing.T) {
	k, clk := newKeeper(t, holdfastv1.Failover)
	other, _ := newKeeper(t, holdfastv1.Failover)
	tampered := []byte(k.issueAnchor(clk.Now()))
	tampered[20] ^= 1 // a bit of the offset: the seal no longer matches
	future := k.issueAnchor(clk.Now().Add(time.Hour))
	for i, a := range []leaseapi.Anchor{"", "not-an-anchor", other.issueAnchor(clk.Now()), leaseapi.Anchor(tampered), future} {
		g := grant(k, 3, uint64(i+1), 30*time.Second, age(0))
		g.Anchor = a
		out, r := k.Grant(g, clk.Now())
		if out != NoAnchor || r.State != leaseapi.Ungranted || r.Anchor == "" {
			t.Fatalf("anchor %q: outcome %v reply %+v, want NoAnchor, nothing granted, a fresh anchor", a, out, r)
		}
		// The fresh anchor, sent back, is taken.
		g = grant(k, 3, uint64(100+i), 30*time.Second, age(0))
		g.Anchor = r.Anchor
		if _, ok := k.anchorInstant(r.Anchor, clk.Now()); !ok {
			t.Fatalf("the Keeper refuses its own anchor %q", r.Anchor)
		}
	}
	if _, ok := k.Remaining(); ok {
		t.Fatal("a grant without this runtime's anchor gave it a deadline")
	}
	_, r := k.Grant(grant(k, 3, 200, 30*time.Second, nil), clk.Now())
	clk.Step(3 * time.Second)
	g := grant(k, 3, 201, 30*time.Second, age(time.Second))
	g.Anchor = r.Anchor
	if out, _ := k.Grant(g, clk.Now()); out != Extended {
		t.Fatalf("a grant carrying this runtime's anchor: %v", out)
	}
	// The anchor (3s ago) is earlier than arrival - ackAge (1s ago): it dates the lease.
	if rem, _ := k.Remaining(); rem != 27*time.Second {
		t.Fatalf("remaining %v, want the anchor's 30s - 3s", rem)
	}
}

// L2: at the L2 cadence a single refused, lost or unanswered renewal, at
// any lease and whatever the response delay, never fences a healthy runtime.
func TestOneRefusedRenewalNeverFencesAHealthyRuntime(t *testing.T) {
	for _, d := range []time.Duration{10 * time.Second, 11 * time.Second, 30 * time.Second, 60 * time.Second, 120 * time.Second} {
		for _, failure := range []string{"refusing", "symmetric", "reverseLoss"} {
			for _, ret := range []time.Duration{0, 100 * time.Millisecond, 1900 * time.Millisecond} {
				for bad := uint64(8); bad <= 11; bad++ {
					rng := rand.New(rand.NewPCG(1, 1))
					res := runSim(t, rng, d, 4*d, nil, func(_ string, seq uint64, rng *rand.Rand) link {
						kind := "healthy"
						if seq == bad {
							kind = failure
						}
						lk := linkWith(0)(kind, seq, rng)
						lk.ret = min(ret, grantor.RequestTimeout(d)*9/10) // answered inside the request timeout
						return lk
					})
					if res.everFencedWhileHealthy {
						t.Fatalf("lease %v, responses after %v: renewal %d %s stopped a healthy runtime's writes at %v",
							d, ret, bad, failure, res.firstRefusal)
					}
					if res.heldFor < 3*d {
						t.Fatalf("lease %v, responses after %v, renewal %d %s: the runtime held only %v of %v", d, ret, bad, failure, res.heldFor, 4*d)
					}
				}
			}
		}
	}
}

func ExampleKeeper_Grant() {
	clk := testingclock.NewFakeClock(t0)
	k, _ := NewKeeper(Config{Unit: "plant/kiln-1", Epoch: 3, Mode: holdfastv1.Failover, LeaseDuration: 30 * time.Second, Clock: clk}, klog.Background().V(10))
	// The first grant at a binding carries nothing acknowledged: it grants
	// nothing, and its reply carries the runtime's anchor.
	_, first := k.Grant(&leaseapi.Grant{Unit: "plant/kiln-1", Epoch: 3, DurationMillis: 30000, Grantor: "g", Seq: 1}, clk.Now())
	fmt.Println(first.State)
	// The grantor sends that anchor back with the age of its
	// acknowledgement, here 5s; the runtime dates its lease from the
	// earlier of the two.
	clk.Step(6 * time.Second)
	ack := int64(5000)
	_, reply := k.Grant(&leaseapi.Grant{Unit: "plant/kiln-1", Epoch: 3, DurationMillis: 30000, AckAgeMillis: &ack,
		Anchor: first.Anchor, Grantor: "g", Seq: 2}, clk.Now())
	rem, _ := k.Remaining()
	fmt.Println(reply.State, rem)
	// Output:
	// Ungranted
	// Held 24s
}
