package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"k8s.io/utils/ptr"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// Kind is one kind of thing that happens to the plant.
type Kind int

const (
	Cut             Kind = iota // one link cut, one way or both, control or field
	Partition                   // the control network split in two
	Degrade                     // a machine's links slow, lossy, duplicating
	PauseProc                   // a process stopped (SIGSTOP) for a while
	Freeze                      // a whole machine paused (a VM frozen)
	CrashRuntime                // a runtime container killed; the kubelet restarts it
	PowerCut                    // a worker node off for a while
	KillLeader                  // the grantor leader killed
	HandOver                    // the grantor leader stopped on purpose
	CrashController             // any controller replica killed
	APIServerDown               // the apiserver lost for a while
	EditMargin                  // spec.availability.rebindMarginSeconds edited
	EditGrace                   // spec.availability.runtimeStartupGraceSeconds edited
	EditTargets                 // spec.availability.targets and colocation edited
	EditMode                    // spec.availability.mode switched on a live unit
	EditLease                   // spec.availability.leaseDurationSeconds edited on a live unit
	Failover                    // a person's failover without a fence confirmation
	FailoverFenced              // the bound node powered off, then a confirmed failover
	Restart                     // holdfast.io/restart
	Recreate                    // the Unit deleted and created again
	Reapply                     // a GitOps tool applies its stale copy of the last fence confirmation (focused seeds only)
	kinds
)

var kindNames = [...]string{"cut", "partition", "degrade", "pause", "freeze", "crash-runtime", "power-cut",
	"kill-leader", "hand-over", "crash-controller", "apiserver-down", "edit-margin", "edit-grace", "edit-targets",
	"edit-mode", "edit-lease", "failover", "failover-fenced", "restart", "recreate", "reapply"}

func (k Kind) String() string { return kindNames[k] }

// Mix weighs the kinds a schedule draws.
type Mix struct {
	Weights [kinds]int
	// LiveEdits draws edits of the mode and the lease of a live unit (L11).
	LiveEdits bool
	// Recreate draws a Unit's deletion and re-creation (L13).
	Recreate bool
	// LongLeaderPauses lets a pause or a freeze of a controller last past
	// the election (a leader that sleeps through its successor's
	// acquisition and resumes after it); off, they stop short of it
	// (shortPause).
	LongLeaderPauses bool
	// Focused draws each seed's schedule from one recipe aimed at a rule's
	// edge (focus.go) instead of the swarm mix; PausedLeader adds the
	// recipe of a leader paused past its successor's acquisition.
	Focused, PausedLeader bool
	// WrittenConfirmations: the stale-confirmation recipe's GitOps tool
	// applies the last confirmation the operator wrote, even one the
	// apiserver refused then; off, only the last one it took.
	WrittenConfirmations bool
}

// shortPause is the longest pause of a controller that never outlasts its
// tenure: the leader renews every second and a successor acquires only
// after the election lease (6s) without a renewal.
const shortPause = 4500 * time.Millisecond

// DefaultMix is every kind the tests search, live edits and re-creation
// aside.
func DefaultMix() Mix {
	var m Mix
	w := map[Kind]int{Cut: 10, Partition: 8, Degrade: 5, PauseProc: 8, Freeze: 5, CrashRuntime: 3, PowerCut: 3,
		KillLeader: 4, HandOver: 3, CrashController: 2, APIServerDown: 3, EditMargin: 2, EditGrace: 1, EditTargets: 1,
		EditMode: 4, EditLease: 8, Failover: 3, FailoverFenced: 2, Restart: 2, Recreate: 2}
	for k, v := range w {
		m.Weights[k] = v
	}
	return m
}

// Action is one entry of a schedule: at At, something of Kind happens,
// and lasts Dur where it lasts. Its other fields are drawn with it.
type Action struct {
	At   time.Duration
	Kind Kind
	Dur  time.Duration
	// A and B name machines (a link, a node, a process's machine); Net the
	// network; OneWay a cut of A to B only; Side the machines on one side
	// of a partition.
	A, B   string
	Net    netKind
	OneWay bool
	Side   []string
	// Pick chooses among the processes or values the action applies to
	// when it happens; Val is an edit's value.
	Pick int
	Val  int32
	// Loss, Dup, Delay of a degradation.
	Loss, Dup float64
	Delay     time.Duration
}

func (a Action) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", fmtTrue(a.At), a.Kind)
	switch a.Kind {
	case Cut:
		dir := "<->"
		if a.OneWay {
			dir = "->"
		}
		fmt.Fprintf(&b, " %s %s%s%s", a.Net, a.A, dir, a.B)
	case Partition:
		fmt.Fprintf(&b, " {%s} from the rest", strings.Join(a.Side, ","))
	case Degrade:
		fmt.Fprintf(&b, " %s: +%v, loss %.0f%%, dup %.0f%%", a.A, a.Delay, a.Loss*100, a.Dup*100)
	case PauseProc:
		fmt.Fprintf(&b, " %s (pick %d)", a.A, a.Pick)
	case Freeze, PowerCut:
		fmt.Fprintf(&b, " %s", a.A)
	case EditMargin, EditGrace, EditLease:
		fmt.Fprintf(&b, " to %ds", a.Val)
	case EditTargets:
		fmt.Fprintf(&b, " (pick %d)", a.Pick)
	case Failover:
		fmt.Fprintf(&b, " to %s", a.B)
	}
	if a.Dur > 0 {
		fmt.Fprintf(&b, " for %v", a.Dur.Round(time.Millisecond))
	}
	return b.String()
}

// Schedule is a run's actions, in time order.
type Schedule []Action

func (s Schedule) String() string {
	var b strings.Builder
	for i, a := range s {
		fmt.Fprintf(&b, "  [%d] %s\n", i, a)
	}
	return b.String()
}

// generate draws a schedule over cfg's horizon from seed: actions at
// exponential gaps, each kind by its weight, durations heavy-tailed. Each
// seed draws from a part of the mix only (swarm testing): a schedule of a
// few kinds, densely, reaches the combinations a schedule of every kind
// thinly spreads.
func generate(cfg Config, seed uint64) Schedule {
	if cfg.Faults.Focused {
		return generateFocused(cfg, seed)
	}
	r := rand.New(rand.NewPCG(seed, 0x5ced1e))
	m := cfg.Faults
	var pool []Kind
	for k := range kinds {
		if (k == EditMode || k == EditLease) && !m.LiveEdits || k == Recreate && !m.Recreate || k == Reapply {
			continue
		}
		if r.IntN(2) == 0 {
			continue
		}
		for range m.Weights[k] {
			pool = append(pool, k)
		}
	}
	var out Schedule
	if len(pool) == 0 {
		return out
	}
	hosts := []string{"api", "n1", "n2", "n3"}
	for i := range cfg.Controllers {
		hosts = append(hosts, fmt.Sprintf("cp%d", i+1))
	}
	workers := []string{"n1", "n2", "n3"}
	t := 20*time.Second + time.Duration(r.ExpFloat64()*float64(cfg.Gap))
	for t < cfg.Horizon {
		a := Action{At: t.Round(time.Millisecond), Kind: pool[r.IntN(len(pool))], Pick: r.IntN(1 << 20)}
		switch a.Kind {
		case Cut:
			a.Dur = heavy(r, 30*time.Second)
			a.OneWay = r.IntN(2) == 0
			if r.IntN(3) == 0 {
				a.Net, a.A, a.B = fieldNet, workers[r.IntN(3)], "plc"
				if r.IntN(2) == 0 {
					a.A, a.B = a.B, a.A
				}
			} else {
				a.Net = controlNet
				a.A = hosts[r.IntN(len(hosts))]
				for a.B = a.A; a.B == a.A; {
					a.B = hosts[r.IntN(len(hosts))]
				}
			}
		case Partition:
			a.Dur = heavy(r, 40*time.Second)
			for len(a.Side) == 0 || len(a.Side) == len(hosts) {
				a.Side = nil
				for _, h := range hosts {
					if r.IntN(2) == 0 {
						a.Side = append(a.Side, h)
					}
				}
			}
		case Degrade:
			a.Dur = heavy(r, 30*time.Second)
			a.A = hosts[r.IntN(len(hosts))]
			a.Delay = time.Duration(r.ExpFloat64() * float64(time.Second))
			a.Loss, a.Dup = r.Float64()*0.5, r.Float64()*0.2
		case PauseProc:
			a.Dur = pauseLength(r)
			a.A = []string{"controller", "runtime", "runtime", "kubelet", "holdfast-node"}[r.IntN(5)]
			if a.A == "controller" && !m.LongLeaderPauses {
				a.Dur = min(a.Dur, shortPause)
			}
		case Freeze:
			a.Dur = pauseLength(r)
			frozen := append(slices.Clone(workers), hosts[4:]...)
			a.A = frozen[r.IntN(len(frozen))]
			if strings.HasPrefix(a.A, "cp") && !m.LongLeaderPauses {
				a.Dur = min(a.Dur, shortPause)
			}
		case PowerCut:
			a.Dur = 20*time.Second + heavy(r, 60*time.Second)
			a.A = workers[r.IntN(3)]
		case APIServerDown:
			a.Dur = heavy(r, 30*time.Second)
		case FailoverFenced:
			a.Dur = 30*time.Second + heavy(r, 90*time.Second)
			a.B = []string{"n2", "n3"}[r.IntN(2)]
		case Failover:
			a.B = []string{"n1", "n2", "n3"}[r.IntN(3)]
		case EditLease:
			a.Val = leases[r.IntN(len(leases))]
		case EditMargin:
			a.Val = int32(r.IntN(36))
		case EditGrace:
			a.Val = 10 + int32(r.IntN(120))
		case Recreate:
			a.Dur = time.Duration(r.IntN(30)) * time.Second
		}
		out = append(out, a)
		t += time.Duration(r.ExpFloat64() * float64(cfg.Gap))
	}
	return out
}

// heavy is a duration around mean with a heavy tail: mostly exponential,
// one in ten several times longer.
func heavy(r *rand.Rand, mean time.Duration) time.Duration {
	d := time.Duration(r.ExpFloat64() * float64(mean))
	if r.IntN(10) == 0 {
		d += time.Duration(r.Float64() * float64(8*mean))
	}
	return max(d, 100*time.Millisecond).Round(time.Millisecond)
}

// pauseLength: most pauses are short (a GC, a starved core), some last
// minutes (a stopped process, a frozen VM).
func pauseLength(r *rand.Rand) time.Duration {
	switch x := r.Float64(); {
	case x < 0.4:
		return time.Duration(100+r.IntN(4900)) * time.Millisecond
	case x < 0.75:
		return time.Duration(5+r.IntN(55)) * time.Second
	default:
		return time.Duration(60+r.IntN(300)) * time.Second
	}
}

// apply carries out a at its instant.
func (s *Sim) apply(a Action) {
	a, ok := s.resolved(a)
	if !ok {
		s.log(nil, unitKey_, kFault, "%s: names no machine now, skipped", a)
		return
	}
	s.log(nil, unitKey_, kFault, "%s", a)
	undo := func(f func()) {
		if a.Dur > 0 {
			s.at(s.now+a.Dur, nil, func() {
				f()
				s.log(nil, unitKey_, kFault, "ends: %s", a)
			})
		}
	}
	switch a.Kind {
	case Cut:
		from, to := s.hostByName[a.A], s.hostByName[a.B]
		ls := []*link{s.net.link(from, to, a.Net)}
		if !a.OneWay {
			ls = append(ls, s.net.link(to, from, a.Net))
		}
		cutLinks(ls, 1)
		undo(func() { cutLinks(ls, -1) })
	case Partition:
		var ls []*link
		for _, x := range s.hosts {
			for _, y := range s.hosts {
				if slices.Contains(a.Side, x.name) && !slices.Contains(a.Side, y.name) && y.name != "plc" && y.name != "ops" && x.name != "plc" {
					ls = append(ls, s.net.link(x, y, controlNet), s.net.link(y, x, controlNet))
				}
			}
		}
		cutLinks(ls, 1)
		undo(func() { cutLinks(ls, -1) })
	case Degrade:
		h := s.hostByName[a.A]
		var ls []*link
		for _, y := range s.hosts {
			if y != h {
				ls = append(ls, s.net.link(h, y, controlNet), s.net.link(y, h, controlNet))
			}
		}
		for _, l := range ls {
			l.delay += a.Delay
			l.loss += a.Loss
			l.dup += a.Dup
		}
		undo(func() {
			for _, l := range ls {
				l.delay -= a.Delay
				l.loss -= a.Loss
				l.dup -= a.Dup
			}
		})
	case PauseProc:
		p := s.pickProc(a)
		if p == nil {
			return
		}
		p.paused++
		s.log(p.host, unitKey_, kFault, "%s paused", p.name)
		undo(func() {
			p.paused--
			s.resumed(p)
			s.log(p.host, unitKey_, kFault, "%s resumed", p.name)
		})
	case Freeze:
		h := s.hostByName[a.A]
		h.frozen++
		undo(func() {
			h.frozen--
			for _, p := range slices.Clone(h.procs) {
				s.resumed(p)
			}
		})
	case CrashRuntime:
		if rp := s.pickRuntime(a.Pick); rp != nil {
			rp.n.stopContainer(rp.c, "crashed")
		}
	case PowerCut:
		n := s.node(a.A)
		if !n.host.powered {
			return
		}
		n.powerOff()
		undo(n.boot)
	case KillLeader:
		if c := s.leader(); c != nil {
			c.crash(true)
		}
	case HandOver:
		if c := s.leader(); c != nil {
			c.stop()
		}
	case CrashController:
		s.ctrls[a.Pick%len(s.ctrls)].crash(true)
	case APIServerDown:
		s.kill(s.api.p)
		for _, c := range s.api.caches {
			c.breakStream()
		}
		undo(func() { s.revive(s.api.p) })
	case EditMargin:
		s.op.edit(fmt.Sprintf("rebindMarginSeconds to %d", a.Val), func(u *holdfastv1.Unit) bool {
			u.Spec.Availability.RebindMarginSeconds = ptr.To(a.Val)
			return true
		})
	case EditGrace:
		s.op.edit(fmt.Sprintf("runtimeStartupGraceSeconds to %d", a.Val), func(u *holdfastv1.Unit) bool {
			u.Spec.Availability.RuntimeStartupGraceSeconds = a.Val
			return true
		})
	case EditTargets:
		all := [][]string{{"n2", "n3"}, {"n2"}, {"n3"}}
		col := []holdfastv1.ColocationPolicy{holdfastv1.ColocationRefuse, holdfastv1.ColocationWarn}[a.Pick/3%2]
		s.op.edit(fmt.Sprintf("targets to %v, colocation %s", all[a.Pick%3], col), func(u *holdfastv1.Unit) bool {
			u.Spec.Availability.Targets = &holdfastv1.FailoverTargets{Nodes: all[a.Pick%3]}
			u.Spec.Availability.Colocation = col
			return true
		})
	case EditMode:
		s.op.edit("mode switch", func(u *holdfastv1.Unit) bool {
			if u.Spec.Availability.Mode == holdfastv1.Failover {
				u.Spec.Availability.Mode = holdfastv1.Autonomy
			} else {
				u.Spec.Availability.Mode = holdfastv1.Failover
			}
			return true
		})
	case EditLease:
		s.op.edit(fmt.Sprintf("leaseDurationSeconds to %d", a.Val), func(u *holdfastv1.Unit) bool {
			u.Spec.Availability.LeaseDurationSeconds = a.Val
			if u.Spec.Availability.RuntimeStartupGraceSeconds < a.Val {
				u.Spec.Availability.RuntimeStartupGraceSeconds = a.Val
			}
			if m := u.Spec.Availability.RebindMarginSeconds; m != nil {
				if hold := int32(holdfastv1.HoldBound(time.Duration(a.Val)*time.Second) / time.Second); *m < hold {
					u.Spec.Availability.RebindMarginSeconds = ptr.To(hold)
				}
			}
			return true
		})
	case Failover:
		s.op.failover(a.B, "")
	case FailoverFenced:
		s.failoverFenced(a)
	case Restart:
		s.op.restart()
	case Reapply:
		s.op.reapply(a.Pick == 1)
	case Recreate:
		s.op.remove()
		spec := s.op.spec
		s.at(s.now+a.Dur, nil, func() { s.op.recreate(spec) })
	}
}

func cutLinks(ls []*link, d int) {
	for _, l := range ls {
		l.cuts += d
	}
}

// failoverFenced makes the fence true before a person certifies it: the
// node the unit is bound to loses power (for a.Dur), then the failover is
// asked with the confirmation.
func (s *Sim) failoverFenced(a Action) {
	o, ok := s.api.st.get("Unit", unitNS, unitName)
	if !ok {
		return
	}
	b := o.(*holdfastv1.Unit).Status.RuntimeBinding
	if b == nil || b.Node == "" || b.Node == a.B {
		return
	}
	n := s.node(b.Node)
	if n == nil || !n.host.powered {
		return
	}
	n.powerOff()
	s.at(s.now+a.Dur, nil, n.boot)
	s.op.failover(a.B, "node "+b.Node+" powered off")
}

func (s *Sim) node(name string) *node {
	for _, n := range s.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// leader is the controller that believes it leads, if one does.
func (s *Sim) leader() *controller {
	for _, c := range s.ctrls {
		if c.p.alive && c.leading {
			return c
		}
	}
	return nil
}

// runtimes are every runtime process alive, in the order they started.
func (s *Sim) runtimes() []*runtimeProc {
	live := s.rts[:0]
	for _, rp := range s.rts {
		if rp.p.alive && rp.n.host.powered && rp.c.rp == rp {
			live = append(live, rp)
		}
	}
	clear(s.rts[len(live):])
	s.rts = live
	return live
}

func (s *Sim) pickRuntime(pick int) *runtimeProc {
	rs := s.runtimes()
	if len(rs) == 0 {
		return nil
	}
	// Mostly the newest epoch: the writer of the moment.
	best := rs[0]
	for _, r := range rs {
		if r.epoch > best.epoch {
			best = r
		}
	}
	if pick%3 != 0 {
		return best
	}
	return rs[pick%len(rs)]
}

func (s *Sim) pickProc(a Action) *proc {
	switch a.A {
	case "controller":
		if c := s.leader(); c != nil && a.Pick%2 == 0 {
			return c.p
		}
		return s.ctrls[a.Pick%len(s.ctrls)].p
	case "runtime":
		if rp := s.pickRuntime(a.Pick); rp != nil {
			return rp.p
		}
	case "kubelet":
		if n := s.nodes[a.Pick%len(s.nodes)]; n.kubelet.alive {
			return n.kubelet
		}
	case "holdfast-node":
		if n := s.nodes[a.Pick%len(s.nodes)]; n.plugin.alive {
			return n.plugin
		}
	}
	return nil
}
