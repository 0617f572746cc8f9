package scenario

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

const ms = time.Millisecond

// TestCrashLoopBackOff holds the supervisor's wait between starts: it
// doubles after every exit soon after a start, stops at the cap, and starts
// over after a process stayed up long enough.
func TestCrashLoopBackOff(t *testing.T) {
	short := 200 * ms
	for _, tc := range []struct {
		name    string
		uptimes []time.Duration
		want    []time.Duration
	}{
		{"the first exit waits the initial delay, even after a long run", []time.Duration{time.Hour}, []time.Duration{500 * ms}},
		{"doubles while it keeps exiting soon", []time.Duration{0, short, 0, 3 * time.Second},
			[]time.Duration{500 * ms, time.Second, 2 * time.Second, 4 * time.Second}},
		{"capped", []time.Duration{0, 0, 0, 0, 0, 0, 0, 0},
			[]time.Duration{500 * ms, time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second}},
		{"starts over after a long enough run", []time.Duration{0, 0, 0, 0, 0, restartResetAfter, short, 0},
			[]time.Duration{500 * ms, time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 500 * ms, time.Second, 2 * time.Second}},
		{"a run just short of the reset still doubles", []time.Duration{0, restartResetAfter - ms},
			[]time.Duration{500 * ms, time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c crashLoop
			var got []time.Duration
			for _, u := range tc.uptimes {
				got = append(got, c.next(u))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("waits after uptimes %v: %v, want %v", tc.uptimes, got, tc.want)
			}
			if c.restarts != len(tc.uptimes) {
				t.Fatalf("restarts = %d, want %d", c.restarts, len(tc.uptimes))
			}
		})
	}
}

// fakeProc is a supervised process that has exited once the fake clock
// reaches exitAt.
type fakeProc struct {
	clock  *time.Time
	exitAt time.Time
}

func (p *fakeProc) Exited() bool    { return !p.clock.Before(p.exitAt) }
func (p *fakeProc) Tail(int) string { return "last line\nnot this" }
func (p *fakeProc) runFor(d time.Duration) *fakeProc {
	p.exitAt = p.clock.Add(d)
	return p
}

// supervision runs a supervisor on a fake clock until it has slept `naps`
// times; proc and held are what it sees, start is called on every start.
type supervision struct {
	clock  time.Time
	proc   *fakeProc
	held   bool
	starts int
	// startErr fails every start, leaving the exited process in place.
	startErr error
	// lives is how long each started process runs.
	lives  func(start int) time.Duration
	onNap  func(s *supervision, d time.Duration)
	waits  []time.Duration // back-off waits, polls left out
	logged []string
}

func (s *supervision) run(naps int) {
	sup := &supervisor{name: "proc",
		current: func() (supervised, bool) {
			if s.proc == nil {
				return nil, s.held
			}
			return s.proc, s.held
		},
		start: func(context.Context) error {
			s.starts++
			if s.startErr != nil {
				return s.startErr
			}
			s.proc = (&fakeProc{clock: &s.clock}).runFor(s.lives(s.starts))
			return nil
		},
		sleep: func(d time.Duration) bool {
			if d != superviseEvery {
				s.waits = append(s.waits, d)
			}
			s.clock = s.clock.Add(d)
			if s.onNap != nil {
				s.onNap(s, d)
			}
			naps--
			return naps > 0
		},
		now:  func() time.Time { return s.clock },
		logf: func(f string, a ...any) { s.logged = append(s.logged, fmt.Sprintf(f, a...)) },
	}
	sup.run(context.Background())
}

func newSupervision(life time.Duration) *supervision {
	s := &supervision{clock: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	s.proc = (&fakeProc{clock: &s.clock}).runFor(life)
	s.lives = func(int) time.Duration { return life }
	return s
}

// TestSupervisorBacksOffACrashLoop: a process that exits at once is started
// again after waits that double up to the cap, with one short log line per
// restart naming its count and wait.
func TestSupervisorBacksOffACrashLoop(t *testing.T) {
	s := newSupervision(0)
	s.run(200)
	want := []time.Duration{500 * ms, time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	if len(s.waits) < len(want) || !slices.Equal(s.waits[:len(want)], want) {
		t.Fatalf("back-off waits %v, want them to begin %v", s.waits, want)
	}
	if s.starts < len(s.waits)-1 || s.starts > len(s.waits) {
		t.Fatalf("%d starts after %d waits", s.starts, len(s.waits))
	}
	if len(s.logged) != len(s.waits) {
		t.Fatalf("%d log lines for %d restarts: %q", len(s.logged), len(s.waits), s.logged)
	}
	if got, want := s.logged[2], "proc: restart 3 in 2s (exited after 0s: last line)"; got != want {
		t.Fatalf("third restart logged %q, want %q", got, want)
	}
}

// TestSupervisorBacksOffFailedStarts: a start that fails (the apiserver
// away) counts as an exit with no uptime, and the next restart line says
// why.
func TestSupervisorBacksOffFailedStarts(t *testing.T) {
	s := newSupervision(0)
	s.startErr = fmt.Errorf("namespace holdfast-system: connection refused\nmore")
	s.run(100)
	want := []time.Duration{500 * ms, time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second}
	if len(s.waits) < len(want) || !slices.Equal(s.waits[:len(want)], want) {
		t.Fatalf("back-off waits %v, want them to begin %v", s.waits, want)
	}
	if got, want := s.logged[1], "proc: restart 2 in 1s (starting failed: namespace holdfast-system: connection refused)"; got != want {
		t.Fatalf("second restart logged %q, want %q", got, want)
	}
}

// TestSupervisorStartsOverAfterALongRun: a process that ran past the reset
// uptime is started again after the initial wait, however often it
// crashed before.
func TestSupervisorStartsOverAfterALongRun(t *testing.T) {
	s := newSupervision(0)
	s.lives = func(start int) time.Duration {
		if start == 4 {
			return restartResetAfter + time.Second
		}
		return 0
	}
	s.run(200)
	want := []time.Duration{500 * ms, time.Second, 2 * time.Second, 4 * time.Second, 500 * ms, time.Second}
	if len(s.waits) < len(want) || !slices.Equal(s.waits[:len(want)], want) {
		t.Fatalf("back-off waits %v, want them to begin %v", s.waits, want)
	}
}

// TestSupervisorLeavesAHeldProcessAlone: a replica a drill killed on
// purpose (World.ArmControllerKill) is not started again while the drill holds
// it, and a wait under way when the drill takes it over ends in no start.
func TestSupervisorLeavesAHeldProcessAlone(t *testing.T) {
	s := newSupervision(0)
	s.held = true
	s.run(100)
	if s.starts != 0 || len(s.logged) != 0 {
		t.Fatalf("held: %d starts, logged %q; want none", s.starts, s.logged)
	}

	s = newSupervision(0)
	s.onNap = func(s *supervision, d time.Duration) {
		if d != superviseEvery {
			s.held = true // the drill takes it during the back-off wait
		}
	}
	s.run(100)
	if s.starts != 0 {
		t.Fatalf("taken over during the wait: %d starts, want none (logged %q)", s.starts, s.logged)
	}
	if len(s.logged) != 1 || !strings.Contains(s.logged[0], "restart 1 in 500ms") {
		t.Fatalf("logged %q, want the one restart it then left alone", s.logged)
	}
}
