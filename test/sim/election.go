package sim

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/holdfast-io/holdfast/controller/leadership"
	"github.com/holdfast-io/holdfast/policy"
)

// electionRecord is the grantor's election Lease as the apiserver keeps it.
type electionRecord struct {
	holder   string
	duration time.Duration
	rv       int64
}

// elector is client-go's leader election (tools/leaderelection), simulated
// at its contract on the candidate's clock: a standby takes the Lease only
// when the record it saw last has not changed for the election's lease
// duration; the leader renews every retry period and gives up when a
// round of renewals has failed for the renew deadline; attempts of a
// standby are jittered by up to 1.2 retry periods; every request times out
// at half the renew deadline (leadership.NewLock). Leadership is released
// through the real leadership.ReleaseGate, which lets a release through
// only on a deliberate stop.
type elector struct {
	c    *controller
	life int
	t    policy.GrantorTimings
	gate *leadership.ReleaseGate

	observed     electionRecord
	observedTime time.Time
	leader       bool
	rounds       int
	stopped      bool
}

func (e *elector) s() *Sim  { return e.c.s }
func (e *elector) p() *proc { return e.c.p }
func (e *elector) now() time.Time {
	return e.p().clock().Now()
}

func (e *elector) valid(now time.Time) bool {
	return e.observedTime.Add(e.observed.duration).After(now)
}

// start begins the acquire loop.
func (e *elector) start() {
	e.gate = &leadership.ReleaseGate{Interface: &simLock{e: e}}
	e.s().soon(e.p(), e.tryAcquire)
}

func (e *elector) current() bool { return !e.stopped && e.life == e.p().life }

// attempt is tryAcquireOrRenew: the leader's fast path writes the record it
// last saw; otherwise read the record, judge it on this clock, and write it
// conditioned on what was read.
func (e *elector) attempt(done func(ok bool)) {
	s := e.s()
	timeout := e.t.ElectionRenewDeadline / 2
	me := e.c.identity()
	write := func(seen electionRecord, then func(bool)) {
		want := electionRecord{holder: me, duration: e.t.ElectionLeaseDuration}
		sent := e.now()
		s.callWithin(e.p(), timeout, func(a *apiserver) (client.Object, error) {
			if a.election.rv != seen.rv {
				return nil, apierrors.NewConflict(resources["Node"], "holdfast-grantor", nil)
			}
			a.rv++
			want.rv = a.rv
			a.election = want
			return nil, nil
		}, func(r apiResult) {
			if !e.current() {
				return
			}
			if r.err == nil {
				e.observed, e.observedTime = want, e.now()
				// What the gate notes of a renewal through it (the
				// simulated lock answers asynchronously).
				e.gate.Renewed(sent)
			}
			then(r.err == nil)
		})
	}
	slow := func() {
		var got electionRecord
		s.callWithin(e.p(), timeout, func(a *apiserver) (client.Object, error) {
			got = a.election
			return nil, nil
		}, func(r apiResult) {
			if !e.current() {
				return
			}
			if r.err != nil {
				done(false)
				return
			}
			now := e.now()
			if got != e.observed {
				e.observed, e.observedTime = got, now
			}
			if got.holder != "" && got.holder != me && e.valid(now) {
				done(false)
				return
			}
			write(got, done)
		})
	}
	if e.leader && e.observed.holder == me && e.valid(e.now()) {
		write(e.observed, func(ok bool) {
			if ok {
				done(true)
				return
			}
			slow()
		})
		return
	}
	slow()
}

func (e *elector) tryAcquire() {
	if !e.current() {
		return
	}
	e.attempt(func(ok bool) {
		if !e.current() {
			return
		}
		if ok {
			e.leader = true
			e.s().log(e.p().host, "", kState, "%s acquired the grantor's leadership", e.c.identity())
			e.c.startedLeading()
			e.s().after(e.p(), e.t.ElectionRetryPeriod, e.round)
			return
		}
		jitter := time.Duration(e.s().rng.Float64() * leaderelection.JitterFactor * float64(e.t.ElectionRetryPeriod))
		e.s().after(e.p(), e.t.ElectionRetryPeriod+jitter, e.tryAcquire)
	})
}

// round is one renewal round (wait.PollUntilContextTimeout): attempts every
// retry period until one succeeds; none by the renew deadline loses the
// leadership, whatever is still in flight.
func (e *elector) round() {
	if !e.current() || !e.leader {
		return
	}
	e.rounds++
	id := e.rounds
	succeeded := false
	e.s().after(e.p(), e.t.ElectionRenewDeadline, func() {
		if e.current() && e.leader && e.rounds == id && !succeeded {
			e.lose()
		}
	})
	var try func()
	try = func() {
		if !e.current() || !e.leader || e.rounds != id || succeeded {
			return
		}
		started := e.now()
		e.attempt(func(ok bool) {
			if !e.current() || !e.leader || e.rounds != id || succeeded {
				return
			}
			if ok {
				succeeded = true
				e.s().after(e.p(), e.t.ElectionRetryPeriod, e.round)
				return
			}
			e.s().after(e.p(), max(0, started.Add(e.t.ElectionRetryPeriod).Sub(e.now())), try)
		})
	}
	try()
}

// lose ends the leadership unasked: the manager stops, and the release that
// ReleaseOnCancel then tries goes through the gate (refused).
func (e *elector) lose() {
	e.leader = false
	e.stopped = true
	e.s().log(e.p().host, "", kState, "%s lost the grantor's leadership (renewals failed for %v)", e.c.identity(), e.t.ElectionRenewDeadline)
	e.release()
	e.c.stoppedLeading()
}

// release is client-go's release on cancel, through the gate.
func (e *elector) release() {
	if e.observed.holder != e.c.identity() {
		return
	}
	_ = e.gate.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "", LeaseDurationSeconds: 1})
}

// simLock is the resource lock under the real ReleaseGate: only a release
// reaches it, and it carries it to the apiserver.
type simLock struct {
	resourcelock.Interface
	e *elector
}

func (l *simLock) Update(_ context.Context, r resourcelock.LeaderElectionRecord) error {
	e := l.e
	me := e.c.identity()
	e.s().callWithin(e.p(), e.t.ElectionRenewDeadline, func(a *apiserver) (client.Object, error) {
		if a.election.holder == me {
			a.rv++
			a.election = electionRecord{holder: r.HolderIdentity, duration: time.Second, rv: a.rv}
		}
		return nil, nil
	}, func(apiResult) {})
	e.s().log(e.p().host, "", kState, "%s released the grantor's leadership", me)
	return nil
}
