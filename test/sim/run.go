package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

// Result is what one run found.
type Result struct {
	Seed      uint64
	Schedule  Schedule
	Violation *Violation
	// Events counts the steps the event loop took; Simulated the true
	// time covered.
	Events    int
	Simulated time.Duration
	Spec      holdfastv1.Availability
	tl        *timeline
	clocks    string
}

// run simulates seed's plant under sched: the unit's availability is drawn
// from the seed, the actions happen at their instants, and the run stops at
// the first violation or the horizon.
func run(cfg Config, seed uint64, sched Schedule, noise bool) *Result {
	s := newSim(cfg, seed, noise)
	spec := initialAvailability(seed, cfg.Timings, false)
	if cfg.Faults.Focused {
		spec = focusedAvailability(seed, cfg.Timings)
	}
	s.start(unitSpec(spec))
	for _, a := range sched {
		s.at(a.At, nil, func() { s.apply(a) })
	}
	res := &Result{Seed: seed, Schedule: sched, Spec: spec, tl: s.tl}
	for s.violation == nil && s.step(cfg.Horizon) {
		res.Events++
		if len(s.fieldQueue) > 0 {
			s.flushField()
		}
		s.check()
	}
	res.Violation = s.violation
	res.Simulated = s.now
	res.clocks = s.clocks()
	return res
}

// initialAvailability draws the unit's first availability from the seed,
// among the ones admission accepts (the operator draws again otherwise),
// with the lease floor of the grantor timings t; in Failover when failover.
func initialAvailability(seed uint64, t policy.GrantorTimings, failover bool) holdfastv1.Availability {
	r := rand.New(rand.NewPCG(seed, 0xa11ce))
	for {
		a := drawAvailability(r)
		if failover {
			a.Mode = holdfastv1.Failover
		}
		if admissible(a, t) {
			return a
		}
	}
}

// Report is a violation as a person reads it: the seed, the shrunk
// schedule, and the timeline.
func (r *Result) Report(full Schedule, keep []int, command string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %s\n", r.Seed, r.Violation)
	fmt.Fprintf(&b, "unit availability at creation: %s\n", describe(r.Spec))
	fmt.Fprintf(&b, "schedule shrunk to %d of the seed's %d actions:\n", len(keep), len(full))
	for _, i := range keep {
		fmt.Fprintf(&b, "  [%d] %s\n", i, full[i])
	}
	fmt.Fprintf(&b, "reproduce: %s\n", command)
	fmt.Fprintf(&b, "clocks:\n%s", r.clocks)
	fmt.Fprintf(&b, "timeline (true time, machine and its clock; ! schedule, * decision, X violation):\n")
	b.WriteString(r.tl.render(0, kState))
	return b.String()
}
