package sim

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Found is one seed's violation, shrunk and ready to print.
type Found struct {
	Seed   uint64
	Result *Result
	Keep   []int
	Report string
	// Elapsed is the wall time from the search's start to this seed's end.
	Elapsed time.Duration
}

// Search runs seeds first..first+n-1 on every core and returns the
// violations found, the one of the lowest seed shrunk (within shrinkBudget)
// and printed. stopAfter > 0 stops after that many violations.
func Search(cfg Config, first uint64, n int, stopAfter int, shrinkBudget time.Duration, command func(seed uint64, keep []int) string) ([]Found, int) {
	start := time.Now()
	var (
		mu    sync.Mutex
		found []Found
		next  atomic.Uint64
		done  atomic.Int64
		stop  atomic.Bool
	)
	next.Store(first)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				seed := next.Add(1) - 1
				if seed >= first+uint64(n) {
					return
				}
				res := run(cfg, seed, generate(cfg, seed), false)
				done.Add(1)
				if res.Violation == nil {
					continue
				}
				mu.Lock()
				found = append(found, Found{Seed: seed, Result: res, Elapsed: time.Since(start)})
				if stopAfter > 0 && len(found) >= stopAfter {
					stop.Store(true)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(found) == 0 {
		return nil, int(done.Load())
	}
	best := 0
	for i, f := range found {
		if f.Seed < found[best].Seed {
			best = i
		}
	}
	f := &found[best]
	full := generate(cfg, f.Seed)
	f.Keep = shrink(cfg, f.Seed, full, f.Result.Violation, shrinkBudget)
	replay := run(cfg, f.Seed, pick(full, f.Keep), true)
	if replay.Violation == nil {
		// The shrunk schedule lost it after all: print the whole one.
		f.Keep = nil
		for i := range full {
			f.Keep = append(f.Keep, i)
		}
		replay = run(cfg, f.Seed, full, true)
	}
	f.Result = replay
	f.Report = replay.Report(full, f.Keep, command(f.Seed, f.Keep))
	return found, int(done.Load())
}

// Replay runs seed with only the actions at keep (nil: all), with the
// whole timeline.
func Replay(cfg Config, seed uint64, keep []int) *Result {
	full := generate(cfg, seed)
	if keep == nil {
		return run(cfg, seed, full, true)
	}
	return run(cfg, seed, pick(full, keep), true)
}

func (f Found) String() string {
	return fmt.Sprintf("seed %d: %s", f.Seed, f.Result.Violation)
}
