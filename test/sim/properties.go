package sim

import (
	"fmt"

	"strings"
	"time"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
)

// Violation is a property broken at an instant of true time.
type Violation struct {
	At   time.Duration
	Unit string
	What string
}

func (v *Violation) String() string {
	return fmt.Sprintf("%s %s: %s", fmtTrue(v.At), v.Unit, v.What)
}

// violate records the first violation; the run stops after the event.
func (s *Sim) violate(unit, what string) {
	if s.violation != nil {
		return
	}
	s.violation = &Violation{At: s.now, Unit: unit, What: what}
	s.log(nil, unit, kCheck, "VIOLATION: %s", what)
}

// check holds the safety property after every event: never two runtimes of
// one unit that may write, read on their own clocks (Held, Holding,
// Autonomous), with their field path to the device open. Between two
// events no runtime gains the right to write (only a grant, a start or a
// healed link gives it, and each is an event), so checking after every
// event checks every instant.
func (s *Sim) check() {
	for unit, dev := range s.devices {
		var writers []*runtimeProc
		for _, rp := range s.runtimes() {
			if rp.unit != unit || !s.net.up(rp.n.host, dev.host, fieldNet) {
				continue
			}
			if rp.mayWrite() {
				writers = append(writers, rp)
			}
		}
		if len(writers) > 1 {
			var who []string
			for _, w := range writers {
				st := w.seen
				who = append(who, fmt.Sprintf("%s (epoch %d, mode %s, %s by its clock %s)", w.id, w.epoch, w.mode, st,
					w.n.host.clock.Now().Format("15:04:05.000")))
			}
			s.violate(unit, "two runtimes may write with their field path open: "+strings.Join(who, " and "))
		}
		s.noteHeld(unit)
	}
}

// noteHeld records the first instant each epoch's runtime held its lease.
func (s *Sim) noteHeld(unit string) {
	for _, rp := range s.runtimes() {
		if rp.unit != unit || rp.seen != leaseapi.Held {
			continue
		}
		hs := s.held[unit]
		if n := len(hs); n > 0 && hs[n-1].epoch >= rp.epoch {
			continue
		}
		s.held[unit] = append(hs, heldAt{epoch: rp.epoch, at: s.now})
	}
}
