package scenario

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// The supervisor starts holdfast-scheduler and both roles of
// holdfast-controller again whenever they exit, as the kubelet does for the
// chart's Deployments (restartPolicy Always), and waits between starts as
// the kubelet's CrashLoopBackOff does: while the apiserver is away every
// start fails within a second, and restarting each every tick filled a
// drill's log with restart lines.
const (
	// restartDelayInitial is the wait before the first start after an exit,
	// and again once a process ran well (restartResetAfter).
	restartDelayInitial = 500 * time.Millisecond
	// restartDelayMax caps the doubling. The kubelet caps at 5m; here 5s,
	// because drills measure failover within tens of seconds of the
	// apiserver's return and a process waiting out its back-off adds up to
	// this to it (a 10s cap would add as much as the units' whole lease).
	restartDelayMax = 5 * time.Second
	// restartResetAfter is the uptime after which an exit starts the back-off
	// over: twice the cap, as client-go's flowcontrol.Backoff (the kubelet's)
	// forgets a back-off after twice its maximum.
	restartResetAfter = 2 * restartDelayMax
	// superviseEvery is how often the supervisor looks for an exit.
	superviseEvery = 250 * time.Millisecond
	// startWithin bounds one start (binary, kubeconfig, health check).
	startWithin = 2 * time.Minute
)

// crashLoop is one supervised process's restart back-off: the wait doubles
// after each exit that came soon after its start, up to restartDelayMax,
// and falls back to restartDelayInitial after a process stayed up
// restartResetAfter.
type crashLoop struct {
	delay    time.Duration // the last wait; 0 before the first exit
	restarts int
}

// next is the wait before starting the process again after it exited having
// run for uptime (a start that failed ran for none); it counts the restart.
func (c *crashLoop) next(uptime time.Duration) time.Duration {
	if c.delay == 0 || uptime >= restartResetAfter {
		c.delay = restartDelayInitial
	} else {
		c.delay = min(2*c.delay, restartDelayMax)
	}
	c.restarts++
	return c.delay
}

// supervised is a process the supervisor keeps running (*cluster.Process,
// *cluster.Controller).
type supervised interface {
	Exited() bool
	Tail(lines int) string
}

// supervisor keeps one process running.
type supervisor struct {
	name string
	// current is the process now (nil when there is none) and whether a
	// drill holds it (World.ArmControllerKill): a held process is left alone.
	current func() (p supervised, held bool)
	// start starts the process again and puts it where current finds it.
	start func(context.Context) error
	// sleep waits d and reports false once supervision has ended.
	sleep func(d time.Duration) bool
	now   func() time.Time
	logf  func(format string, args ...any)
}

// run supervises until sleep reports the end; ctx bounds every start. A
// process's uptime counts from when the supervisor first saw it, whoever
// started it (Up, a drill, the supervisor).
func (s *supervisor) run(ctx context.Context) {
	var (
		loop  crashLoop
		seen  supervised
		since time.Time
		// failed is why the last start gave no running process.
		failed string
	)
	for s.sleep(superviseEvery) {
		p, held := s.current()
		if held || p == nil {
			seen = nil
			continue
		}
		now := s.now()
		if p != seen {
			seen, since = p, now
		}
		if !p.Exited() {
			failed = ""
			continue
		}
		uptime := now.Sub(since)
		why := failed
		if why == "" {
			why = fmt.Sprintf("exited after %s: %s", uptime.Round(100*time.Millisecond), oneLine(p.Tail(1)))
		}
		d := loop.next(uptime)
		s.logf("%s: restart %d in %s (%s)", s.name, loop.restarts, d, why)
		if !s.sleep(d) {
			return
		}
		if q, held := s.current(); held || q != p {
			// A drill took it over meanwhile.
			seen, failed = nil, ""
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, startWithin)
		err := s.start(sctx)
		cancel()
		// Whatever runs now is new: a start that failed counts as an exit
		// with no uptime.
		seen, failed = nil, ""
		if err != nil {
			failed = "starting failed: " + oneLine(err.Error())
		}
	}
}

// keepRunning supervises one process until the World stops supervision.
func (w *World) keepRunning(name string, current func() (supervised, bool), start func(context.Context) error) {
	ctx := w.supervision
	s := &supervisor{name: name, current: current, start: start, now: time.Now, logf: w.logf,
		sleep: func(d time.Duration) bool {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return false
			case <-t.C:
				return !w.Stopping()
			}
		}}
	w.supervisors.Add(1)
	go func() {
		defer w.supervisors.Done()
		s.run(ctx)
	}()
}

// stopSupervision ends every supervisor (a start under way is cancelled)
// and waits for them.
func (w *World) stopSupervision() {
	w.stopSupervising()
	w.supervisors.Wait()
}

// oneLine is s's first line, cut short: a restart is one short log line.
func oneLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if r := []rune(s); len(r) > 160 {
		s = string(r[:160]) + "…"
	}
	return s
}
