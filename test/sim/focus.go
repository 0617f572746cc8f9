package sim

import (
	"math/rand/v2"
	"slices"
	"time"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

// Focused seeds. A rule's edge is a narrow schedule: the swarm mix meets it
// rarely, and a search of a bounded number of seeds may miss it. A focused
// seed draws one recipe, each aimed at the edge of one rule and repeated
// over the horizon, with the machines it names resolved when the action
// happens (the writer's node, the leader's machine), since a schedule is
// drawn before anyone knows where the unit will run.
type recipe int

const (
	// writerFrozen (L1, the anchor): the writer's machine frozen, or its
	// runtime stopped, across renewals, for about the lease and margin: a
	// grant that waited in its queue arrives late, and only the runtime's
	// own issue instant dates it.
	writerFrozen recipe = iota
	// marginAtBound (L3, the margin against the hold bound): the unit
	// starts at the smallest margin admission accepts, an operator asks for
	// a smaller one, and the writer is cut from the control network, so the
	// re-bind comes at lease + margin while the old runtime holds.
	marginAtBound
	// leaderWithWriter (L6, the hold-off): the leader and the writer's node
	// cut together from the rest: the leader loses the election and stands
	// down renewing the writer, which its successor cannot reach.
	leaderWithWriter
	// pausedLeader (L6, the stand-down of a paused leader): the leader
	// stopped (SIGSTOP) or its machine frozen past the election, and cut
	// with the writer's node from the rest: the standby takes over and
	// cannot reach the writer, the old leader resumes after it and renews
	// the writer for its stand-down.
	pausedLeader
	// staleConfirmation (a confirmation certifies one epoch): the writer's
	// node powered off and the unit failed over with a confirmed fence;
	// later the leader and the new writer's node are cut from the rest (as
	// leaderWithWriter) and a GitOps tool applies its copy of that
	// confirmation again: the successor must still wait out its hold-off.
	// With Mix.WrittenConfirmations the copy may be one the apiserver
	// refused then (its failover's target NotReady), naming the epoch that
	// is still bound: its runtime, restarted when its node came back, is
	// certified stopped. The epoch cannot tell that apart (docs/safety.md).
	staleConfirmation
	recipes
)

var recipeNames = [...]string{"writer-frozen", "margin-at-bound", "leader-with-writer", "paused-leader", "stale-confirmation"}

func (r recipe) String() string { return recipeNames[r] }

// Names an action's machines resolve to when it happens.
const (
	writerHost = "writer" // the node of the newest runtime
	leaderHost = "leader" // the grantor leader's machine
)

// focusedRecipes are the recipes a focused seed draws from; pausedLeader
// only with m.PausedLeader.
func focusedRecipes(m Mix) []recipe {
	rs := []recipe{writerFrozen, marginAtBound, leaderWithWriter, staleConfirmation}
	if m.PausedLeader {
		rs = append(rs, pausedLeader)
	}
	return rs
}

// focusOf is the recipe seed's focused schedule follows.
func focusOf(m Mix, seed uint64) recipe {
	rs := focusedRecipes(m)
	return rs[seed%uint64(len(rs))]
}

// generateFocused draws seed's focused schedule: its recipe's episode every
// few minutes over the horizon, from T+60s (the unit held by then).
func generateFocused(cfg Config, seed uint64) Schedule {
	r := rand.New(rand.NewPCG(seed, 0xf0c05ed))
	rc := focusOf(cfg.Faults, seed)
	var out Schedule
	for t := 60*time.Second + time.Duration(r.IntN(60))*time.Second; t < cfg.Horizon; t += 4*time.Minute + time.Duration(r.IntN(240))*time.Second {
		at := t.Round(time.Millisecond)
		switch rc {
		case writerFrozen:
			// Shorter than a lease is renewed away; a few minutes outlasts
			// any lease, margin and re-bind.
			d := time.Duration(5+r.IntN(175)) * time.Second
			if r.IntN(3) == 0 {
				out = append(out, Action{At: at, Kind: PauseProc, A: "runtime", Pick: 1, Dur: d})
			} else {
				out = append(out, Action{At: at, Kind: Freeze, A: writerHost, Dur: d})
			}
		case marginAtBound:
			out = append(out,
				Action{At: at, Kind: EditMargin, Val: int32(r.IntN(31))},
				Action{At: at + 5*time.Second, Kind: Partition, Side: []string{writerHost}, Dur: time.Duration(30+r.IntN(150)) * time.Second})
		case leaderWithWriter:
			out = append(out, Action{At: at, Kind: Partition, Side: []string{leaderHost, writerHost}, Dur: time.Duration(20+r.IntN(280)) * time.Second})
		case staleConfirmation:
			off := time.Duration(30+r.IntN(60)) * time.Second
			cut := at + off + time.Duration(60+r.IntN(60))*time.Second
			out = append(out,
				Action{At: at, Kind: FailoverFenced, B: []string{"n2", "n3"}[r.IntN(2)], Dur: off},
				Action{At: cut, Kind: Partition, Side: []string{leaderHost, writerHost}, Dur: time.Duration(20+r.IntN(280)) * time.Second},
				Action{At: cut + time.Duration(r.IntN(20))*time.Second, Kind: Reapply, Pick: pickIf(cfg.Faults.WrittenConfirmations)})
		case pausedLeader:
			// The leader stops first, then it and the writer's node are cut
			// from the rest: its successor cannot reach the writer, and the
			// writer's node plugin learns of no new binding. A SIGSTOPped
			// leader longer than its liveness probe allows is killed
			// (controller.probe); a frozen machine's is not probed.
			if r.IntN(2) == 0 {
				out = append(out, Action{At: at, Kind: PauseProc, A: "controller", Pick: 0, Dur: time.Duration(8+r.IntN(20)) * time.Second})
			} else {
				out = append(out, Action{At: at, Kind: Freeze, A: leaderHost, Dur: time.Duration(8+r.IntN(130)) * time.Second})
			}
			out = append(out, Action{At: at + 100*time.Millisecond, Kind: Partition, Side: []string{leaderHost, writerHost},
				Dur: time.Duration(150+r.IntN(250)) * time.Second})
		}
	}
	return out
}

// focusedAvailability is a focused seed's unit: in Failover, its margin
// drawn between zero and the hold bound (admission refuses below the bound,
// and the operator draws again: the margin is at the bound).
func focusedAvailability(seed uint64, t policy.GrantorTimings) holdfastv1.Availability {
	r := rand.New(rand.NewPCG(seed, 0xa11ce))
	for {
		a := drawAvailability(r)
		a.Mode = holdfastv1.Failover
		hold := int32(holdfastv1.HoldBound(a.LeaseDuration()) / time.Second)
		a.RebindMarginSeconds = &[]int32{int32(r.IntN(int(hold) + 1))}[0]
		if admissible(a, t) {
			return a
		}
	}
}

// resolve names the machine an action's name stands for now: the writer's
// node, the leader's or a follower's machine, or the name itself; "" when
// there is none (no runtime, no leader).
func (s *Sim) resolve(name string) string {
	switch name {
	case writerHost:
		var best *runtimeProc
		for _, rp := range s.runtimes() {
			if best == nil || rp.epoch > best.epoch {
				best = rp
			}
		}
		if best == nil {
			return ""
		}
		return best.n.name
	case leaderHost:
		if c := s.leader(); c != nil {
			return c.p.host.name
		}
		return ""
	}
	return name
}

// resolved is a with its machines resolved now; false when one names none.
func (s *Sim) resolved(a Action) (Action, bool) {
	var ok = true
	name := func(n string) string {
		if n == "" {
			return ""
		}
		r := s.resolve(n)
		ok = ok && r != ""
		return r
	}
	if a.Kind != PauseProc {
		a.A = name(a.A)
	}
	a.B = name(a.B)
	if a.Side != nil {
		a.Side = slices.Clone(a.Side)
		for i, n := range a.Side {
			a.Side[i] = name(n)
		}
		slices.Sort(a.Side)
		a.Side = slices.Compact(a.Side)
	}
	return a, ok
}

func pickIf(b bool) int {
	if b {
		return 1
	}
	return 0
}
