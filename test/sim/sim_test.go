package sim

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
)

// What the search in make test explores. A kind whose hole is open on main
// stays off here until its fix is on main (docs/safety.md names the seed that
// finds it); make sim and the flags below search it meanwhile:
const (
	// liveEditsInCI: edits of the mode and the lease of a live unit (L11:
	// a promise never weakens).
	liveEditsInCI = true
	// recreateInCI: a Unit deleted and created again under its name, as a
	// GitOps tool does (L13: the name stays taken until the deleted Unit's
	// runtime has provably stopped writing).
	recreateInCI = true
	// longLeaderPausesInCI: a grantor leader paused or frozen past the
	// election, which resumes after its successor took over.
	longLeaderPausesInCI = true
	// pausedLeaderInCI: the focused recipe of a leader stopped past its
	// successor's acquisition while the successor cannot reach the writer
	// (L6: the grants end a stand-down after the last renewal of the
	// leadership, however late the loss is learnt).
	pausedLeaderInCI = true
	// writtenConfirmationsInCI: the stale-confirmation recipe's GitOps
	// tool applying a fence confirmation the apiserver refused when it was
	// written, after the node it names came back and restarted the runtime
	// of the epoch it names (a confirmation names the runtime's process,
	// not only its epoch).
	writtenConfirmationsInCI = true
)

// ciSeeds and ciLiveness are the runs make test makes: about a minute of
// CPU, a few minutes of wall time on a loaded two-core machine.
const (
	ciSeeds    = 130
	ciFocused  = 16
	ciLiveness = 16
)

var (
	simSeeds     = flag.Int("sim.seeds", ciSeeds, "seeds TestSimulationFindsNoTwoWriters searches")
	simFirst     = flag.Uint64("sim.first", 1, "the first seed searched")
	simLiveness  = flag.Int("sim.liveness", ciLiveness, "seeds TestSimulationLiveness runs")
	simHorizon   = flag.Duration("sim.horizon", 0, "true time each run simulates (0: 30m)")
	simLive      = flag.Bool("sim.live-edits", liveEditsInCI, "draw edits of the mode and the lease of a live unit")
	simRecreate  = flag.Bool("sim.recreate", recreateInCI, "draw a Unit's deletion and re-creation")
	simLong      = flag.Bool("sim.long-leader-pauses", longLeaderPausesInCI, "let a pause of a controller outlast the election")
	simShrink    = flag.Duration("sim.shrink", time.Minute, "wall time spent shrinking a violation")
	simSeed      = flag.Uint64("sim.seed", 0, "TestSimulationReplay: the seed")
	simKeep      = flag.String("sim.keep", "", "TestSimulationReplay: the indices of the seed's actions kept (empty: all)")
	simTimelines = flag.String("sim.timelines", "", "a directory each violation's timeline is also written to")
	simWithout   = flag.String("sim.without", "", "kinds of action left out of the mix, comma separated (e.g. edit-mode,partition)")
	simFocused   = flag.Int("sim.focused", ciFocused, "focused seeds TestSimulationFindsNoTwoWriters searches (focus.go)")
	simFocus     = flag.Bool("sim.focus", false, "TestSimulationReplay: the seed is a focused one")
	simPaused    = flag.Bool("sim.paused-leader", pausedLeaderInCI, "focused seeds draw the recipe of a leader paused past its successor's acquisition")
	simWritten   = flag.Bool("sim.written-confirmations", writtenConfirmationsInCI, "the stale-confirmation recipe re-applies a confirmation as written, even one refused then")
)

func TestMain(m *testing.M) {
	// The real code logs as it would in production; a run writes the
	// decisions that matter to its own timeline instead.
	klog.SetLogger(logr.Discard())
	crlog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

// config is the plant the flags describe.
func config() Config {
	cfg := DefaultConfig()
	if *simHorizon > 0 {
		cfg.Horizon = *simHorizon
	}
	cfg.Faults.LiveEdits = *simLive
	cfg.Faults.Recreate = *simRecreate
	cfg.Faults.LongLeaderPauses = *simLong
	cfg.Faults.Focused = *simFocus
	cfg.Faults.PausedLeader = *simPaused
	cfg.Faults.WrittenConfirmations = *simWritten
	for _, name := range strings.Split(*simWithout, ",") {
		for k := range kinds {
			if k.String() == name {
				cfg.Faults.Weights[k] = 0
			}
		}
	}
	return cfg
}

// command reproduces a violation of a seed, focused or not.
func command(focused bool) func(seed uint64, keep []int) string {
	return func(seed uint64, keep []int) string {
		c := commandOf(seed, keep)
		if focused {
			c += fmt.Sprintf(" -sim.focus -sim.paused-leader=%v -sim.written-confirmations=%v", *simPaused, *simWritten)
		}
		return c
	}
}

func commandOf(seed uint64, keep []int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "go test ./test/sim -run 'TestSimulationReplay$' -v -args -sim.seed=%d -sim.keep=%s", seed, joinInts(keep))
	if *simHorizon > 0 {
		fmt.Fprintf(&b, " -sim.horizon=%v", *simHorizon)
	}
	fmt.Fprintf(&b, " -sim.live-edits=%v -sim.recreate=%v -sim.long-leader-pauses=%v", *simLive, *simRecreate, *simLong)
	if *simWithout != "" {
		fmt.Fprintf(&b, " -sim.without=%s", *simWithout)
	}
	return b.String()
}

// TestSimulationFindsNoTwoWriters searches seeded schedules of faults and a
// person's actions over the real lease code (package sim) for a violation
// of one writer per device: two runtimes of one unit that may write with
// their field path open at one instant of true time, or a write reaching a
// device from an epoch below one that already wrote there. A violation
// fails it with its seed, the schedule shrunk, and the timeline.
//
// It searches ciFocused focused seeds first (focus.go: each aimed at the
// edge of one rule, so that breaking the anchor, the margin against the
// hold bound or the hold-off turns it red within make test's seeds), then
// ciSeeds seeds of the swarm mix; make sim SEEDS=N searches more. A kind or
// recipe whose constant above is off (a hole open on main) is searched only
// when its flag asks.
func TestSimulationFindsNoTwoWriters(t *testing.T) {
	for _, focused := range []bool{true, false} {
		cfg := config()
		cfg.Faults.Focused = focused
		n, what := *simSeeds, "swarm"
		if focused {
			n, what = *simFocused, "focused"
		}
		start := time.Now()
		found, runs := Search(cfg, *simFirst, n, 1, *simShrink, command(focused))
		t.Logf("%d %s runs of %v each (seeds %d..%d) in %v", runs, what, cfg.Horizon, *simFirst, *simFirst+uint64(n)-1, time.Since(start).Round(time.Second))
		for _, f := range found {
			if f.Report == "" {
				continue
			}
			if *simTimelines != "" {
				_ = os.WriteFile(fmt.Sprintf("%s/%s-seed-%d.txt", *simTimelines, what, f.Seed), []byte(f.Report), 0o644)
			}
			t.Fatalf("one writer per device broken (%s seed %d, recipe %s) after %v of search:\n%s", what, f.Seed, recipeOf(cfg, f.Seed), f.Elapsed.Round(time.Second), f.Report)
		}
	}
}

// recipeOf names a focused seed's recipe.
func recipeOf(cfg Config, seed uint64) string {
	if !cfg.Faults.Focused {
		return "none"
	}
	return focusOf(cfg.Faults, seed).String()
}

// TestSimulationLiveness: after faults that all heal, the node of the
// runtime that holds the unit's lease loses power for good, in half the
// seeds with the grantor leader killed around it; a runtime of a later
// epoch holds the lease within lease + 1s + margin (or the hold-off of a
// leader that took over since: acquisition + stand-down + lease + margin),
// + the longest container start + 5s. A design that never re-binds fails
// it.
func TestSimulationLiveness(t *testing.T) {
	cfg := config()
	cfg.Horizon = 10 * time.Minute
	worst := time.Duration(-1)
	for seed := *simFirst; seed < *simFirst+uint64(*simLiveness); seed++ {
		l := runLiveness(cfg, seed, false)
		if l.Violated {
			l = runLiveness(cfg, seed, true)
			t.Fatalf("%s\ntimeline:\n%s", l, l.tl.render(0, kState))
		}
		if left := l.Bound - l.Held; worst < 0 || left < worst {
			worst = left
		}
		t.Logf("%s", l)
	}
	t.Logf("the closest re-bind came %v before its bound", worst.Round(time.Millisecond))
}

// TestSimulationReplay replays one seed (-sim.seed) with the actions kept
// (-sim.keep) and prints its timeline: a violation's reproduction.
func TestSimulationReplay(t *testing.T) {
	if *simSeed == 0 {
		t.Skip("replays the seed given with -sim.seed")
	}
	var keep []int
	if *simKeep != "" {
		for _, s := range strings.Split(*simKeep, ",") {
			i, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("-sim.keep: %v", err)
			}
			keep = append(keep, i)
		}
	}
	res := Replay(config(), *simSeed, keep)
	t.Logf("seed %d, actions %v:\n%s", *simSeed, keep, res.tl.render(0, kNoise))
	if res.Violation != nil {
		t.Errorf("%s", res.Violation)
	}
}

// TestSimulationIsDeterministic: one seed gives one run, exactly: the same
// timeline, event for event, twice over.
func TestSimulationIsDeterministic(t *testing.T) {
	cfg := config()
	cfg.Horizon = 10 * time.Minute
	cfg.Faults.LiveEdits, cfg.Faults.Recreate, cfg.Faults.LongLeaderPauses = true, true, true
	for _, seed := range []uint64{3, 7} {
		a, b := Replay(cfg, seed, nil), Replay(cfg, seed, nil)
		ta, tb := a.tl.render(0, kNoise), b.tl.render(0, kNoise)
		if a.Events != b.Events || ta != tb {
			t.Fatalf("seed %d: %d and %d events; first difference:\n%s", seed, a.Events, b.Events, firstDiff(ta, tb))
		}
		if a.Events < 10000 {
			t.Fatalf("seed %d: only %d events in %v", seed, a.Events, cfg.Horizon)
		}
	}
}

func firstDiff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return la[i] + "\n" + lb[i]
		}
	}
	return "one is a prefix of the other"
}
