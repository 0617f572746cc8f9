package grantor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// loop renews one binding.
type loop struct {
	g *Grantor
	// transport carries this binding's grants; a loop keeps its epoch, so
	// it never serves another binding.
	transport *http.Transport
	// cert and roots are the credentials the open connections were made
	// with: when they change, the idle ones are closed and the next grant
	// goes out on a connection made with the new ones.
	cert  *tls.Certificate
	roots *x509.CertPool

	mu     sync.Mutex
	obs    Observation
	cancel context.CancelFunc
	done   chan struct{}
	// ctx is a stepped loop's life (Options.Stepped).
	ctx context.Context
	// counted: this loop is in the backing-off gauge.
	counted bool
	// parked is true while the loop waits on its timer with no attempt in
	// flight: the tests' signal that it has handled a clock step.
	parked atomic.Bool
	// spread: the loop's phase has been spread, once.
	spread bool
}

func (l *loop) target() Target {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.obs.Target
}

func (l *loop) observe() Observation {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.obs
}

func (l *loop) retarget(t Target) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.obs.Target = t
}

func (l *loop) running() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cancel != nil
}

func (l *loop) start() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel, l.done = cancel, make(chan struct{})
	if l.g.opts.Stepped != nil {
		l.ctx = ctx
		close(l.done)
		l.g.opts.Stepped(l.obs.Target.Unit)
		return
	}
	go l.run(ctx, l.done)
}

func (l *loop) stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.cancel, l.done = nil, nil
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
		if l.g.opts.Stepped != nil {
			l.countBackoff(false)
		}
	}
	l.transport.CloseIdleConnections()
}

func (l *loop) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	defer l.countBackoff(false)
	clk := l.g.opts.Clock
	planned := clk.Now()
	for {
		if skew := clk.Since(planned); skew >= 0 {
			renewalSkew.Observe(skew.Seconds())
		}
		notify := l.attempt(ctx)
		if ctx.Err() != nil {
			return
		}
		if notify {
			l.g.opts.Notify(l.target().Unit)
		}
		wait := l.nextWait()
		if !l.g.mayGrant() {
			// No grant may go out any more (GrantsUntil): the book's next
			// renewal may be due at once, and the loop must not spin on it
			// until it is stopped.
			wait = max(wait, refusedRetry)
		}
		planned = clk.Now().Add(wait)
		if wait <= 0 {
			continue
		}
		timer := clk.NewTimer(wait)
		l.parked.Store(true)
		select {
		case <-ctx.Done():
			l.parked.Store(false)
			timer.Stop()
			return
		case <-timer.C():
		}
		l.parked.Store(false)
	}
}

// nextWait is the L2 cadence against the anchor the runtime holds, backed
// off after timeouts where the runtime holds none.
func (l *loop) nextWait() time.Duration {
	now := l.g.opts.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.obs.Target.Duration
	anchored := l.anchorLeft(now) > 0
	wait := BackoffWait(d, l.obs.Timeouts, anchored, l.obs.NextWait(d, now))
	if anchored && wait > 0 {
		if !l.spread {
			l.spread = true
			return wait - l.g.randN(wait)
		}
		wait -= l.g.randN(wait/jitterDivisor + 1)
		// On a grid, so that loops due within one step wake together: the
		// process wakes once per step rather than once per renewal.
		if q := now.Add(wait).Truncate(planGrid); q.After(now) {
			wait = q.Sub(now)
		}
	}
	return wait
}

// planGrid is the step anchored renewals are planned on (only ever earlier).
const planGrid = 20 * time.Millisecond

// jitterDivisor: every wait while the runtime holds an anchor is shortened by
// a random part of up to a tenth of it. A stall of the grantor's process (a
// starved core, a GC pause) delivers every answer that waited through it at
// once, and since each loop plans its next renewal from its answer, loops
// that were spread fall in step again and stay there; the jitter spreads
// them again within a few cadences. Only ever earlier (L1, L2 unchanged): on
// average one renewal in twenty more.
const jitterDivisor = 10

// The first wait at the cadence is shortened by a uniform random part of
// it (the phase spread). Loops started together (every loop at once after a
// leader's warm start, or a burst of new bindings) would otherwise renew in
// step, each cadence a burst of every unit's renewal queued behind one
// another on the grantor's cores: the tail of the renewal skew. Later waits
// run from each loop's own acknowledgements and keep the spread. Only ever
// earlier, so L1 and L2 hold as they are; the cost is one early renewal per
// loop.

// randN is a uniform duration in [0, n), n > 0.
func (g *Grantor) randN(n time.Duration) time.Duration {
	if g.opts.Rand != nil {
		return time.Duration(g.opts.Rand.Int64N(int64(n)))
	}
	return rand.N(n)
}

// anchorLeft is what is left of the runtime's anchor at now: zero when it
// holds none or it has run out. l.mu held.
func (l *loop) anchorLeft(now time.Time) time.Duration {
	if l.obs.Anchor.IsZero() {
		return 0
	}
	return max(l.obs.Anchor.Add(l.obs.Target.Duration).Sub(now), 0)
}

// countBackoff keeps the backing-off gauge: on while the last attempt timed
// out, off otherwise and when the loop ends.
func (l *loop) countBackoff(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case on && !l.counted:
		backingOff.Inc()
	case !on && l.counted:
		backingOff.Dec()
	}
	l.counted = on
}
