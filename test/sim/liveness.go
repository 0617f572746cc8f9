package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

// Liveness: after a prefix of faults that all heal, the node whose runtime
// holds the unit's lease loses power for good (sometimes with the grantor
// leader killed around it); a runtime of a later epoch must hold the lease
// within the bound the design promises.

// livenessSlack covers what the bound leaves out: reconcile passes,
// watches, scheduling and the two grants a new runtime needs (the first
// carries no acknowledged age and extends nothing).
const livenessSlack = 5 * time.Second

// Liveness is one liveness run's outcome.
type Liveness struct {
	Seed uint64
	// Died is when the runtime's node lost power; Epoch its binding.
	Died  time.Duration
	Epoch int64
	// Held is when a runtime of a later epoch first held the lease (zero:
	// never); Bound the latest the design allows.
	Held, Bound time.Duration
	// Why explains the bound (or why the run could not be judged).
	Why      string
	Violated bool
	tl       *timeline
}

func (l *Liveness) String() string {
	if l.Violated {
		return fmt.Sprintf("seed %d: %s", l.Seed, l.Why)
	}
	return fmt.Sprintf("seed %d: epoch %d's node died at %s, a later epoch held at %s, within %v of the bound (%s)",
		l.Seed, l.Epoch, fmtTrue(l.Died), fmtTrue(l.Held), (l.Bound - l.Held).Round(time.Millisecond), l.Why)
}

// heal is when the liveness runs' faults are all over.
const heal = 10 * time.Minute

// runLiveness runs seed's liveness scenario.
func runLiveness(cfg Config, seed uint64, noise bool) *Liveness {
	r := rand.New(rand.NewPCG(seed, 0x11fe))
	pre := cfg
	pre.Horizon = heal
	pre.Faults.LiveEdits, pre.Faults.Recreate, pre.Faults.LongLeaderPauses = false, false, false
	pre.Faults.Focused = false
	var sched Schedule
	for _, a := range generate(pre, seed) {
		if a.Kind == Recreate || a.Kind == EditTargets {
			// The plant keeps its standbys: liveness is owed while one is
			// there.
			continue
		}
		if a.At+a.Dur > heal {
			a.Dur = heal - a.At
		}
		sched = append(sched, a)
	}
	s := newSim(cfg, seed, noise)
	spec := initialAvailability(seed, cfg.Timings, true)
	s.start(unitSpec(spec))
	for _, a := range sched {
		s.at(a.At, nil, func() { s.apply(a) })
	}
	out := &Liveness{Seed: seed, tl: s.tl}
	killLeader := r.IntN(2) == 0
	leaderAt := time.Duration(r.Float64()*float64(90*time.Second)) - 30*time.Second
	var watch func()
	watch = func() {
		rp, u := s.holder()
		if rp == nil {
			s.at(s.now+time.Second, nil, watch)
			return
		}
		out.Died, out.Epoch = s.now, rp.epoch
		s.log(nil, unitKey_, kFault, "liveness: %s loses power for good with the runtime of epoch %d", rp.n.name, rp.epoch)
		rp.n.powerOff()
		pr := policy.NewPromise(u)
		if b := u.Status.RuntimeBinding; b.Promise != nil {
			pr = *b.Promise
		}
		if killLeader {
			s.at(s.now+max(leaderAt, 0), nil, func() {
				if c := s.leader(); c != nil {
					s.log(nil, unitKey_, kFault, "liveness: the grantor leader %s is killed", c.name)
					c.crash(true)
				}
			})
		}
		s.livenessPromise = &pr
	}
	s.at(heal+time.Minute, nil, watch)
	end := heal + cfg.Horizon
	for s.violation == nil && s.step(end) {
		if len(s.fieldQueue) > 0 {
			s.flushField()
		}
		s.check()
		if out.Died > 0 && s.laterHeld(out.Epoch) > 0 {
			break
		}
	}
	if s.violation != nil {
		out.Violated, out.Why = true, "safety: "+s.violation.What
		return out
	}
	if out.Died == 0 {
		out.Violated, out.Why = true, "the unit never held its lease again after every fault healed at "+fmtTrue(heal)
		return out
	}
	out.Held = s.laterHeld(out.Epoch)
	out.Bound, out.Why = s.livenessBound(out.Died, out.Held)
	if out.Held == 0 || out.Held > out.Bound {
		out.Violated = true
		held := "never"
		if out.Held > 0 {
			held = fmtTrue(out.Held)
		}
		out.Why = fmt.Sprintf("epoch %d's node died at %s and no later epoch held the lease by %s (held: %s); bound: %s",
			out.Epoch, fmtTrue(out.Died), fmtTrue(out.Bound), held, out.Why)
	}
	return out
}

// holder is the runtime that holds the unit's lease by its own clock and by
// the apiserver's record (Held at its epoch), when one does, a leader runs,
// and an untried standby is Ready for it.
func (s *Sim) holder() (*runtimeProc, *holdfastv1.Unit) {
	o, ok := s.api.st.get("Unit", unitNS, unitName)
	if !ok || s.leader() == nil {
		return nil, nil
	}
	u := o.(*holdfastv1.Unit)
	b := u.Status.RuntimeBinding
	if b == nil || b.LeaseState != holdfastv1.LeaseHeld || b.LeaseStateCarried() {
		return nil, nil
	}
	free := false
	for _, n := range s.nodes {
		no, ok := s.api.st.get("Node", "", n.name)
		free = free || ok && n.name != b.Node && n.host.powered && policy.NodeReady(no.(*corev1.Node)) &&
			policy.EligibleTarget(u, no.(*corev1.Node)) && !slices.Contains(b.UnsettledRebinds, n.name)
	}
	if !free {
		return nil, nil
	}
	for _, rp := range s.runtimes() {
		if rp.epoch == b.Epoch && rp.k.State() == leaseapi.Held {
			return rp, u
		}
	}
	return nil, nil
}

// laterHeld is when a runtime of an epoch after epoch first held the lease.
func (s *Sim) laterHeld(epoch int64) time.Duration {
	for _, h := range s.held[unitKey_] {
		if h.epoch > epoch {
			return h.at
		}
	}
	return 0
}

// livenessBound is the latest instant a later epoch may first hold the
// lease after the runtime died at died: the lease and the second the expiry
// is rounded up to, the margin (both as the binding recorded them: a
// person's shorter margin waits for the next binding), the hold-off of any leader that took over
// since (its acquisition + stand-down + lease + margin), the longest
// container start, and the slack.
func (s *Sim) livenessBound(died, held time.Duration) (time.Duration, string) {
	pr := s.livenessPromise
	lease, margin := pr.LeaseDuration(), pr.RebindMargin()
	rebind := died + lease + time.Second + margin
	why := fmt.Sprintf("lease %v + 1s + margin %v", lease, margin)
	for _, acq := range s.acquired {
		if acq > died-s.cfg.StandDown-lease-margin && (held == 0 || acq < held) {
			if at := acq + s.cfg.StandDown + lease + margin; at > rebind {
				rebind = at
				why = fmt.Sprintf("a leader acquired at %s: + stand-down %v + lease %v + margin %v", fmtTrue(acq), s.cfg.StandDown, lease, margin)
			}
		}
	}
	return rebind + s.cfg.StartDelay[1] + livenessSlack, fmt.Sprintf("%s, + start-up %v + %v", why, s.cfg.StartDelay[1], livenessSlack)
}
