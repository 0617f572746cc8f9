package sim

import (
	"container/heap"
	"iter"
	"time"
)

// event is one step of the simulation at an instant of true time. An event
// owned by a process runs only while the process lives the life it was
// scheduled in, and waits while the process (or its machine) is paused.
type event struct {
	at   time.Duration
	seq  uint64
	proc *proc
	life int
	fn   func()
}

type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(*event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// proc is one process: a controller replica, a runtime container, a
// kubelet, a fence agent, the apiserver. It reads its machine's clock.
type proc struct {
	name string
	host *host
	// life counts the process's lives: a crash or a stop ends one, and
	// every event of an earlier life is dropped.
	life  int
	alive bool
	// paused counts SIGSTOPs in force on this process alone.
	paused   int
	deferred []*event
	// onResume runs when the process (or its machine) resumes.
	onResume func()
}

func (p *proc) clock() *simClock { return p.host.clock }

// running says whether the process executes now.
func (p *proc) running() bool {
	return p.alive && p.paused == 0 && p.host.frozen == 0 && p.host.powered
}

// host is one machine: its clock, its address, whether it has power, and
// whether it is frozen (a paused VM: every process on it stops, its clock
// goes on).
type host struct {
	name    string
	ip      string
	clock   *simClock
	powered bool
	frozen  int
	procs   []*proc
	// ports: the runtime listening on each port of the host network.
	ports map[int32]*runtimeProc
}

// at schedules fn at true time t for p (nil: the simulation's own event).
func (s *Sim) at(t time.Duration, p *proc, fn func()) {
	if t < s.now {
		t = s.now
	}
	s.seq++
	e := &event{at: t, seq: s.seq, proc: p, fn: fn}
	if p != nil {
		e.life = p.life
	}
	heap.Push(&s.queue, e)
}

// after schedules fn after d of p's own clock.
func (s *Sim) after(p *proc, d time.Duration, fn func()) {
	s.at(p.clock().trueAfter(s.now, d), p, fn)
}

// soon schedules fn for p now, after the events already due.
func (s *Sim) soon(p *proc, fn func()) { s.at(s.now, p, fn) }

// step runs the next event; false when none is left before the end.
func (s *Sim) step(end time.Duration) bool {
	for s.queue.Len() > 0 {
		e := heap.Pop(&s.queue).(*event)
		if e.at > end {
			heap.Push(&s.queue, e)
			return false
		}
		s.now = e.at
		if p := e.proc; p != nil {
			if e.life != p.life || !p.alive || !p.host.powered {
				continue
			}
			if !p.running() {
				p.deferred = append(p.deferred, e)
				continue
			}
		}
		e.fn()
		return true
	}
	return false
}

// resumed re-schedules, in their order, the events a process deferred while
// it was paused, once it runs again.
func (s *Sim) resumed(p *proc) {
	if !p.running() {
		return
	}
	d := p.deferred
	p.deferred = nil
	for _, e := range d {
		if e.life == p.life {
			s.seq++
			e.at, e.seq = s.now, s.seq
			heap.Push(&s.queue, e)
		}
	}
	if p.onResume != nil {
		p.onResume()
	}
}

// kill ends p's life now: its events are dropped, its deferred work lost.
func (s *Sim) kill(p *proc) {
	p.life++
	p.alive = false
	p.deferred = nil
	for port, l := range p.host.ports {
		if l.p == p {
			delete(p.host.ports, port)
		}
	}
}

// revive starts a new life of p.
func (s *Sim) revive(p *proc) {
	p.life++
	p.alive = true
	p.paused = 0
	p.deferred = nil
}

// task runs one piece of real code that blocks (a reconcile pass on its
// apiserver calls, leadership.Run on its manager and its stand-down timer)
// as a coroutine of the event loop (iter.Pull): it runs only when the loop
// resumes it, until it parks on something only the loop releases (an
// apiserver answer, a timer of the simulated clock) or ends. No goroutine
// scheduling decides anything.
type task struct {
	name  string
	next  func() (struct{}, bool)
	yield func(struct{}) bool
	done  bool
	// pending is the apiserver call the task is parked on, answered into
	// result; killed: its process died, every call fails at once.
	pending bool
	result  apiResult
	killed  bool
}

// goTask starts fn as a coroutine and runs it until it parks or ends.
func (s *Sim) goTask(name string, fn func(t *task)) *task {
	t := &task{name: name}
	t.next, _ = iter.Pull(func(yield func(struct{}) bool) {
		t.yield = yield
		fn(t)
	})
	s.wait(t)
	return t
}

// park hands control back to the event loop; it returns when the loop
// resumes the task.
func (t *task) park() { t.yield(struct{}{}) }

// wait resumes t until it parks again or ends.
func (s *Sim) wait(t *task) {
	if t == nil || t.done {
		return
	}
	if _, ok := t.next(); !ok {
		t.done = true
	}
}
