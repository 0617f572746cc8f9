package sim

import (
	"math"
	"time"

	"k8s.io/utils/clock"
)

// simClock is one machine's clock: it reads base + rate x (true time), so it
// runs at its own rate error (rate - 1, bounded by Config.MaxRateError) from
// its own offset. It keeps running while the machine is frozen or off, as a
// monotonic clock does. It is the k8s.io/utils clock every piece of real
// code on the machine is given.
type simClock struct {
	s    *Sim
	base time.Time
	rate float64
	// owner runs the timers a task makes (leadership.Run's stand-down).
	owner *proc
	task  *task
}

var (
	_ clock.Clock                = (*simClock)(nil)
	_ clock.WithTicker           = (*simClock)(nil)
	_ clock.WithDelayedExecution = (*simClock)(nil)
)

// local is the clock's reading at true time t.
func (c *simClock) local(t time.Duration) time.Time {
	return c.base.Add(time.Duration(math.Floor(float64(t) * c.rate)))
}

// trueAt is the first true instant at which the clock reads at least l.
func (c *simClock) trueAt(l time.Time) time.Duration {
	t := time.Duration(math.Ceil(float64(l.Sub(c.base)) / c.rate))
	for c.local(t).Before(l) {
		t++
	}
	for t > 0 && !c.local(t-1).Before(l) {
		t--
	}
	return t
}

// trueAfter is the true instant at which d has passed on this clock after
// true time now.
func (c *simClock) trueAfter(now, d time.Duration) time.Duration {
	if d <= 0 {
		return now
	}
	return max(c.trueAt(c.local(now).Add(d)), now)
}

func (c *simClock) Now() time.Time                  { return c.local(c.s.now) }
func (c *simClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// NewTimer fires on the event loop. Only a task (leadership.Run) waits on
// one: the timer parks the task, and firing it resumes the task.
func (c *simClock) NewTimer(d time.Duration) clock.Timer {
	t := &simTimer{c: c, ch: make(chan time.Time, 1), task: c.task, owner: c.owner}
	t.life = c.owner.life
	c.s.after(c.owner, d, func() {
		if t.stopped || c.owner.life != t.life {
			return
		}
		t.stopped = true
		t.ch <- c.Now()
		if t.task != nil {
			c.s.wait(t.task)
		}
	})
	if t.task != nil {
		// The task waits on the timer from here: hand back to the loop,
		// which resumes it when the timer fires or its context ends.
		t.task.park()
	}
	return t
}

func (c *simClock) After(d time.Duration) <-chan time.Time { return c.NewTimer(d).C() }

func (c *simClock) Sleep(time.Duration) { panic("sim: Sleep is not used by the simulated code") }
func (c *simClock) Tick(time.Duration) <-chan time.Time {
	panic("sim: Tick is not used by the simulated code")
}
func (c *simClock) NewTicker(time.Duration) clock.Ticker {
	panic("sim: NewTicker is not used by the simulated code")
}
func (c *simClock) AfterFunc(time.Duration, func()) clock.Timer {
	panic("sim: AfterFunc is not used by the simulated code (the grantor is stepped)")
}

type simTimer struct {
	c       *simClock
	ch      chan time.Time
	task    *task
	owner   *proc
	life    int
	stopped bool
}

func (t *simTimer) C() <-chan time.Time { return t.ch }
func (t *simTimer) Stop() bool {
	was := !t.stopped
	t.stopped = true
	return was
}
func (t *simTimer) Reset(time.Duration) bool {
	panic("sim: Timer.Reset is not used by the simulated code")
}

// clockFor is the clock a task on p reads: p's machine clock, with timers
// that park the task.
func clockFor(p *proc, t *task) *simClock {
	c := *p.host.clock
	c.owner, c.task = p, t
	return &c
}
