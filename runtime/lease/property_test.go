package lease

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"k8s.io/klog/v2"
	testingclock "k8s.io/utils/clock/testing"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// The simulation below runs a grantor on the L2 cadence against a real
// Keeper on one injected clock, through a transport that loses POSTs and
// responses, delays them, and a runtime handler that sometimes refuses.
// Both sides read the same clock; only differences of it are used, as with
// two monotonic clocks.

const step = 10 * time.Millisecond

// link decides what happens to one renewal.
type link struct {
	dropForward bool          // the POST never lands
	refuse      bool          // it lands, and the runtime's handler answers 503 without applying it
	dropReturn  bool          // the runtime applied it; the 200 never gets back
	forward     time.Duration // transit of the POST
	ret         time.Duration // transit of the response
}

type phase struct {
	until time.Duration
	kind  string // healthy, symmetric, forwardLoss, reverseLoss, refusing, flaky
}

// simGrantor is the grantor DESIGN §3 describes: ackAge is the age, just
// before sending, of the last renewal it saw acknowledged; it declares
// Expired at lastAck + duration; the first acknowledged renewal is followed
// at once by a second; the cadence is RenewInterval against the anchor the
// runtime holds.
type simGrantor struct {
	duration  time.Duration
	timeout   time.Duration
	hasAck    bool
	lastAck   time.Duration // when the last 200 came back
	anchor    time.Duration // the lastAck the last acknowledged grant carried (the runtime's anchor)
	hasAnchor bool
	seq       uint64
	nextSend  time.Duration
	inFlight  bool
}

type event struct {
	at   time.Duration
	kind string // arrive, respond, timeout
	seq  uint64
	g    *leaseapi.Grant
	lk   link
	// carried is the lastAck the grant's age referred to.
	carried    time.Duration
	hasCarried bool
	sentAt     time.Duration
}

type simResult struct {
	// worst excess of the runtime's control writes past the grantor's
	// Expired, and of any write past Expired + hold bound.
	controlExcess, anyExcess time.Duration
	// everFencedWhileHealthy: a control write was refused after the first grant.
	everFencedWhileHealthy bool
	firstRefusal           time.Duration
	grants                 int
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
	g := &simGrantor{duration: duration, timeout: 2 * time.Second}
	var events []event
	var res simResult
	phaseAt := func(at time.Duration) string {
		for _, p := range phases {
			if at < p.until {
				return p.kind
			}
		}
		return "healthy"
	}
	schedule := func(now time.Duration) {
		var interval time.Duration
		switch {
		case !g.hasAck:
			interval = time.Second // start-up: retry until the first 200
		case !g.hasAnchor:
			interval = 0 // the second renewal follows the first at once
		default:
			interval = leaseapi.RenewInterval(duration, now-g.anchor)
		}
		g.nextSend = now + interval
	}
	for now := time.Duration(0); now <= length; now += step {
		clk.SetTime(t0.Add(now))
		// grantor sends
		if !g.inFlight && now >= g.nextSend {
			g.seq++
			gr := &leaseapi.Grant{Unit: "plant/kiln-1", Epoch: 3, DurationMillis: duration.Milliseconds(),
				Grantor: "g", Seq: g.seq}
			ev := event{seq: g.seq, g: gr, sentAt: now}
			if g.hasAck {
				a := (now - g.lastAck).Milliseconds()
				gr.AckAgeMillis = &a
				ev.carried, ev.hasCarried = g.lastAck, true
			}
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
				k.Grant(ev.g, clk.Now())
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
				if ev.hasCarried {
					g.anchor, g.hasAnchor = ev.carried, true
				}
				g.hasAck, g.lastAck = true, now
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
		if g.hasAck {
			expired := g.lastAck + duration
			if now >= expired && canWrite(k, WriteControl) {
				res.controlExcess = max(res.controlExcess, now-expired+step)
			}
			if now >= expired+holdBound && canWrite(k, WriteHold) {
				res.anyExcess = max(res.anyExcess, now-expired-holdBound+step)
			}
		}
		if k.State() != leaseapi.Ungranted {
			if !canWrite(k, WriteControl) && !res.everFencedWhileHealthy {
				res.everFencedWhileHealthy, res.firstRefusal = true, now
			}
		}
	}
	return res
}

func randomPhases(rng *rand.Rand, length time.Duration) []phase {
	kinds := []string{"healthy", "symmetric", "forwardLoss", "reverseLoss", "refusing", "flaky"}
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
		}
		return lk
	}
}

var durations = []time.Duration{10 * time.Second, 12 * time.Second, 30 * time.Second, 45 * time.Second, 90 * time.Second}

// L1, property: over many random renewal schedules, losses, refusals and
// return delays, the runtime makes no control write at or after the instant
// a grantor declares Expired (lastAck + duration), and no write at all once
// the hold bound past it has run (which the re-bind margin covers).
func TestLeaseNeverOutlivesTheGrantorsExpiry(t *testing.T) {
	for seed := uint64(1); seed <= 150; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x1890))
		d := durations[rng.IntN(len(durations))]
		length := 4 * time.Minute
		res := runSim(t, rng, d, length, randomPhases(rng, length), linkWith(0))
		if res.controlExcess > 0 || res.anyExcess > 0 {
			t.Fatalf("seed %d, lease %v: the runtime wrote past the grantor's Expired by %v (control) and past Expired+holdBound by %v (any)",
				seed, d, res.controlExcess, res.anyExcess)
		}
		if res.grants == 0 {
			t.Fatalf("seed %d: no grant ever landed; the simulation tested nothing", seed)
		}
	}
}

// The one slack the anchor leaves: the runtime cannot see how long a POST
// was on the wire, so a POST that lands late and whose 200 is lost extends
// the runtime by at most its own forward transit past the grantor's
// Expired. The grantor's request timeout bounds the transit it still counts,
// and the default re-bind margin's 5s over the hold bound covers it.
func TestLeaseOutlivesTheGrantorOnlyByAForwardTransit(t *testing.T) {
	const maxForward = 1500 * time.Millisecond
	var worst time.Duration
	for seed := uint64(1); seed <= 100; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x1802))
		d := durations[rng.IntN(len(durations))]
		length := 3 * time.Minute
		res := runSim(t, rng, d, length, randomPhases(rng, length), linkWith(maxForward))
		if res.controlExcess > maxForward+step || res.anyExcess > maxForward+step {
			t.Fatalf("seed %d, lease %v: excess %v/%v past the grantor's Expired is more than the forward transit bound %v",
				seed, d, res.controlExcess, res.anyExcess, maxForward)
		}
		worst = max(worst, res.controlExcess)
	}
	t.Logf("worst excess over 100 schedules with forward transit up to %v: %v", maxForward, worst)
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
						lk.ret = ret
						return lk
					})
					if res.everFencedWhileHealthy {
						t.Fatalf("lease %v, responses after %v: renewal %d %s stopped a healthy runtime's writes at %v",
							d, ret, bad, failure, res.firstRefusal)
					}
				}
			}
		}
	}
}

func ExampleKeeper_Grant() {
	clk := testingclock.NewFakeClock(t0)
	k, _ := NewKeeper(Config{Unit: "plant/kiln-1", Epoch: 3, Mode: holdfastv1.Failover, LeaseDuration: 30 * time.Second, Clock: clk}, klog.Background().V(10))
	ack := int64(5000)
	_, reply := k.Grant(&leaseapi.Grant{Unit: "plant/kiln-1", Epoch: 3, DurationMillis: 30000, AckAgeMillis: &ack, Grantor: "g", Seq: 1}, clk.Now())
	rem, _ := k.Remaining()
	fmt.Println(reply.State, rem)
	// Output: Held 25s
}
