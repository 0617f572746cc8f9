package sim

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// entry is one line of the timeline: an instant of true time, the machine
// whose clock it is also read on, and what happened.
type entry struct {
	at    time.Duration
	host  *host
	local time.Time
	// unit the line concerns ("" for the cluster); kind sorts the lines a
	// reader needs from the noise.
	unit string
	kind kind
	text string
}

type kind int

const (
	kNoise    kind = iota // renewals, scans, probes
	kState                // lease transitions, status changes, elections
	kDecision             // Events and audit lines of the controllers, fence actions
	kFault                // the schedule: faults and a person's actions
	kCheck                // what the properties found
)

// timeline keeps every entry of a run.
type timeline struct {
	entries []entry
	// noise keeps the kNoise entries too (off in the search, on when a
	// violation is replayed for its timeline).
	noise bool
}

func (s *Sim) log(h *host, unit string, k kind, format string, args ...any) {
	if k == kNoise && !s.tl.noise {
		return
	}
	e := entry{at: s.now, host: h, unit: unit, kind: k, text: fmt.Sprintf(format, args...)}
	if h != nil {
		e.local = h.clock.Now()
	}
	s.tl.entries = append(s.tl.entries, e)
}

// fmtTrue prints true time as T+seconds.
func fmtTrue(d time.Duration) string {
	return fmt.Sprintf("T+%9.3fs", d.Seconds())
}

// render prints the entries from since on, of at least kind min, each with
// its true time and its machine's clock reading.
func (t *timeline) render(since time.Duration, min kind) string {
	var b strings.Builder
	for _, e := range t.entries {
		if e.at < since || e.kind < min {
			continue
		}
		clk := strings.Repeat(" ", 22)
		if e.host != nil {
			clk = fmt.Sprintf("%-6s %s", e.host.name, e.local.Format("15:04:05.000"))
			clk += strings.Repeat(" ", max(0, 22-len(clk)))
		}
		mark := map[kind]string{kNoise: " ", kState: " ", kDecision: "*", kFault: "!", kCheck: "X"}[e.kind]
		fmt.Fprintf(&b, "%s %s %s %s\n", fmtTrue(e.at), clk, mark, e.text)
	}
	return b.String()
}

// clocks describes every machine's clock, so that any true instant can be
// read on any of them.
func (s *Sim) clocks() string {
	var b strings.Builder
	hosts := append([]*host(nil), s.hosts...)
	sort.Slice(hosts, func(i, j int) bool { return hosts[i].name < hosts[j].name })
	for _, h := range hosts {
		c := h.clock
		fmt.Fprintf(&b, "  %-6s reads %s at T+0, rate error %+.0f ppm, now %s\n", h.name,
			c.base.Format("15:04:05.000"), (c.rate-1)*1e6, c.Now().Format("15:04:05.000"))
	}
	return b.String()
}
