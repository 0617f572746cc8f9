package lease

import (
	"math/rand/v2"
	"testing"
	"time"

	"k8s.io/klog/v2"
	testingclock "k8s.io/utils/clock/testing"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/grantor"
	"github.com/holdfast-io/holdfast/policy"
)

// L11 on the runtime's side. A later grant with a shorter duration moves the
// Keeper's deadline only when it dates a later one (its anchor plus the
// shorter duration past the deadline held), and from then on the runtime
// holds for the shorter duration's hold bound. So while every grant carries
// at most the recorded lease, the runtime writes no later than the
// promise's WritesEndBy(lastAck); once policy.NextPromise lowers the record,
// no later than the lowered promise's bound or the instant it was lowered
// (the controller decides on the lowered record only from then). Over many
// schedules: a 60s lease shortened to 10s at a random phase, renewals that
// lose replies, then a partition at a random time, before or after the
// shorter lease takes effect.
func TestAShorterGrantNeverOutlivesThePromise(t *testing.T) {
	const long, short = 60 * time.Second, 10 * time.Second
	for seed := uint64(1); seed <= 60; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x11))
		u := &holdfastv1.Unit{Spec: holdfastv1.UnitSpec{Availability: holdfastv1.Availability{
			Mode: holdfastv1.Failover, LeaseDurationSeconds: int32(long / time.Second), RuntimeStartupGraceSeconds: 120}}}
		promise := policy.NewPromise(u)
		clk := testingclock.NewFakeClock(t0)
		k, err := NewKeeper(Config{Unit: "plant/kiln-1", Epoch: 1, Mode: holdfastv1.Failover, LeaseDuration: long, Clock: clk}, klog.Background().V(10))
		if err != nil {
			t.Fatal(err)
		}
		switchAt := 20*time.Second + time.Duration(rng.IntN(20_000))*time.Millisecond
		stopAt := switchAt + time.Duration(rng.IntN(150_000))*time.Millisecond
		type flight struct {
			g                   *leaseapi.Grant
			sent                grantor.Sent
			arrive, back        time.Duration
			arrived, lostReturn bool
			reply               leaseapi.Reply
		}
		var (
			book     grantor.Book
			seq      uint64
			next     time.Duration
			inFlight *flight
			lowered  time.Time
			wrote    bool
		)
		duration := long
		for now := time.Duration(0); now < stopAt+long+time.Minute; now += 10 * time.Millisecond {
			clk.SetTime(t0.Add(now))
			at := clk.Now()
			if now >= switchAt && duration == long {
				duration = short
				u.Spec.Availability.LeaseDurationSeconds = int32(short / time.Second)
			}
			if now%time.Second == 0 {
				// A controller pass.
				before := promise.LeaseDurationSeconds
				promise, _ = policy.NextPromise(promise, u, policy.PromiseInputs{Now: at, Granting: duration})
				if promise.LeaseDurationSeconds != before {
					lowered = at
				}
			}
			if inFlight == nil && now >= next && now < stopAt {
				seq++
				g := &leaseapi.Grant{Unit: "plant/kiln-1", Epoch: 1, DurationMillis: duration.Milliseconds(), Grantor: "g", Seq: seq}
				f := &flight{g: g, sent: book.Stamp(g, at), arrive: now + time.Duration(rng.IntN(300))*time.Millisecond}
				f.back = f.arrive + time.Duration(rng.IntN(300))*time.Millisecond
				f.lostReturn = rng.IntN(4) == 0
				inFlight = f
			}
			if f := inFlight; f != nil {
				if !f.arrived && now >= f.arrive {
					f.arrived = true
					_, f.reply = k.Grant(f.g, at)
				}
				if f.arrived && now >= f.back {
					if !f.lostReturn && now < stopAt {
						book.Acknowledged(f.sent, f.reply, at)
					}
					inFlight = nil
					next = now + book.NextWait(duration, at)
				}
			}
			if !book.Acked() || !canWrite(k, WriteHold) {
				continue
			}
			wrote = true
			bound := promise.WritesEndBy(book.LastAck)
			if !lowered.IsZero() && lowered.After(bound) {
				bound = lowered
			}
			if !at.Before(bound) {
				t.Fatalf("seed %d (shortened at %v, cut at %v): the runtime may write at %v, the controller's bound from the record %+v and the last acknowledgement at %v is %v",
					seed, switchAt, stopAt, now, promise, book.LastAck.Sub(t0), bound.Sub(t0))
			}
		}
		if !wrote {
			t.Fatalf("seed %d: the runtime never wrote; the schedule tested nothing", seed)
		}
	}
}
