// Package grantor is the control-plane side of the control lease (DESIGN §3):
// one renewal loop per Failover runtime with an address, POSTing grants to
// the runtime's lease endpoint at the L2 cadence and recording what came back.
//
// Each grant carries the age of the last acknowledgement and echoes the
// anchor that acknowledgement brought (L1, as amended): the runtime dates
// its lease from the earlier of the two, and its anchor was read on its own
// clock before its reply left, so its deadline is never later than this
// grantor's Expired (LastAck + duration), however long a grant sat in the
// socket of a stopped runtime. The bookkeeping is Book, which the runtime's
// tests drive too.
//
// The loops never write to the apiserver. A grant of liveness travels to a
// pod IP, so the loops outlive the manager when leadership is lost without
// being asked (the stand-down, controller/leadership); what they observed is
// read by the unit reconciler, which alone writes status.
package grantor

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// Target is one binding to renew: the unit, its epoch, where its runtime
// listens and the lease duration.
type Target struct {
	Unit     types.NamespacedName
	Epoch    int64
	Address  string // host:port of the lease endpoint
	Duration time.Duration
}

// Outcome is what one renewal attempt got back.
type Outcome string

const (
	// Acknowledged: the runtime answered 200 for this epoch.
	Acknowledged Outcome = "Acknowledged"
	// Refused: the runtime's handler answered, and not with an
	// acknowledgement (409 for another epoch, 400, 503...).
	Refused = Outcome(holdfastv1.RenewalRefused)
	// Unreachable: no answer from the handler (refused, reset, timed out).
	Unreachable = Outcome(holdfastv1.RenewalUnreachable)
)

// Attempt is one renewal attempt.
type Attempt struct {
	At      time.Time
	Outcome Outcome
	Message string
}

// Observation is what this process has seen at one binding.
type Observation struct {
	Target Target
	// Started is when this process began renewing at this binding.
	Started time.Time
	// Book is the protocol's record: the last acknowledgement, what it
	// said, and the anchor the runtime holds.
	Book
	// LastAttempt is the last completed attempt; zero At if none.
	LastAttempt Attempt
	// Attempts counts completed attempts.
	Attempts int64
}

// Options configure a Grantor.
type Options struct {
	// Name identifies this grantor in its grants (the controller's pod name).
	Name string
	// Clock drives the loops; tests inject a fake.
	Clock clock.WithTicker
	// TLSConfig, when set, makes the grantor speak HTTPS (HTTP/2) to the
	// runtimes.
	TLSConfig *tls.Config
	// Notify is called, never blocking for long, when an observation changes
	// in a way the reconciler must see: the first acknowledgement, and every
	// change of outcome.
	Notify func(types.NamespacedName)
}

// Grantor runs the renewal loops.
type Grantor struct {
	opts   Options
	client *http.Client
	scheme string
	seq    atomic.Uint64

	mu    sync.Mutex
	loops map[types.NamespacedName]*loop
}

// New builds a Grantor. No loop runs until Ensure.
func New(opts Options) *Grantor {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Notify == nil {
		opts.Notify = func(types.NamespacedName) {}
	}
	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     90 * time.Second,
		TLSClientConfig:     opts.TLSConfig,
		ForceAttemptHTTP2:   opts.TLSConfig != nil,
	}
	g := &Grantor{
		opts:   opts,
		client: &http.Client{Transport: transport},
		scheme: "http",
		loops:  map[types.NamespacedName]*loop{},
	}
	if opts.TLSConfig != nil {
		g.scheme = "https"
	}
	// The runtime takes a grant only when its seq is above the last one it
	// took from a grantor of that name, and a restarted controller keeps its
	// pod name: seq starts at the wall clock so a new process of the same
	// name is never taken for a stale one (its grants would be answered 200
	// and extend nothing).
	g.seq.Store(uint64(opts.Clock.Now().UnixNano()))
	return g
}

// Ensure makes one loop renew t. A loop already renewing the unit at the
// same epoch keeps its observation and takes the new address and duration; a
// loop at another epoch is stopped first, and its observation dropped.
func (g *Grantor) Ensure(t Target) {
	g.mu.Lock()
	l := g.loops[t.Unit]
	if l != nil && l.target().Epoch != t.Epoch {
		delete(g.loops, t.Unit)
		g.mu.Unlock()
		l.stop()
		g.mu.Lock()
		l = g.loops[t.Unit]
	}
	defer g.mu.Unlock()
	if l == nil {
		l = &loop{g: g, obs: Observation{Target: t, Started: g.opts.Clock.Now()}}
		g.loops[t.Unit] = l
		klog.InfoS("Starting lease renewal loop", "unit", t.Unit, "epoch", t.Epoch, "address", t.Address)
	}
	l.retarget(t)
	l.start()
	loopsGauge.Set(float64(g.runningLocked()))
}

// Pause stops the unit's loop and waits until no attempt of it is in flight,
// keeping its observation for a later Ensure at the same epoch. It returns
// the final observation. A re-bind pauses the old binding's loop before it
// decides, so no acknowledgement can arrive behind its decision.
func (g *Grantor) Pause(unit types.NamespacedName) (Observation, bool) {
	g.mu.Lock()
	l := g.loops[unit]
	g.mu.Unlock()
	if l == nil {
		return Observation{}, false
	}
	l.stop()
	g.mu.Lock()
	loopsGauge.Set(float64(g.runningLocked()))
	g.mu.Unlock()
	return l.observe(), true
}

// Forget stops the unit's loop and drops its observation.
func (g *Grantor) Forget(unit types.NamespacedName) {
	g.mu.Lock()
	l := g.loops[unit]
	delete(g.loops, unit)
	g.mu.Unlock()
	if l != nil {
		l.stop()
		klog.InfoS("Stopped lease renewal loop", "unit", unit, "epoch", l.target().Epoch)
	}
	g.mu.Lock()
	loopsGauge.Set(float64(g.runningLocked()))
	g.mu.Unlock()
}

// Observe returns what the unit's loop has seen.
func (g *Grantor) Observe(unit types.NamespacedName) (Observation, bool) {
	g.mu.Lock()
	l := g.loops[unit]
	g.mu.Unlock()
	if l == nil {
		return Observation{}, false
	}
	return l.observe(), true
}

// Running lists the units whose loops are renewing, sorted.
func (g *Grantor) Running() []types.NamespacedName {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []types.NamespacedName
	for k, l := range g.loops {
		if l.running() {
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// StopAll stops every loop and waits for them.
func (g *Grantor) StopAll() {
	g.mu.Lock()
	loops := g.loops
	g.loops = map[types.NamespacedName]*loop{}
	g.mu.Unlock()
	for _, l := range loops {
		l.stop()
	}
	loopsGauge.Set(0)
}

func (g *Grantor) runningLocked() int {
	n := 0
	for _, l := range g.loops {
		if l.running() {
			n++
		}
	}
	return n
}

// loop renews one binding.
type loop struct {
	g *Grantor

	mu     sync.Mutex
	obs    Observation
	cancel context.CancelFunc
	done   chan struct{}
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
	}
}

func (l *loop) run(ctx context.Context, done chan struct{}) {
	defer close(done)
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
		planned = clk.Now().Add(wait)
		if wait <= 0 {
			continue
		}
		timer := clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C():
		}
	}
}

// nextWait is the L2 cadence against the anchor the runtime holds.
func (l *loop) nextWait() time.Duration {
	now := l.g.opts.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.obs.NextWait(l.obs.Target.Duration, now)
}

// attempt sends one grant and records what came back. It reports whether the
// reconciler must be told.
func (l *loop) attempt(ctx context.Context) bool {
	clk := l.g.opts.Clock
	grant := lease.Grant{Grantor: l.g.opts.Name, Seq: l.g.seq.Add(1)}
	l.mu.Lock()
	t := l.obs.Target
	grant.Unit, grant.Epoch, grant.DurationMillis = t.Unit.String(), t.Epoch, t.Duration.Milliseconds()
	sent := l.obs.Stamp(&grant, clk.Now())
	l.mu.Unlock()

	reply, outcome, msg := l.post(ctx, t, &grant)
	if ctx.Err() != nil {
		// Paused or stopped mid-flight: the attempt is not an observation.
		return false
	}
	now := clk.Now()
	renewals.WithLabelValues(string(outcome)).Inc()

	l.mu.Lock()
	defer l.mu.Unlock()
	prev := l.obs.LastAttempt.Outcome
	firstAck := false
	l.obs.LastAttempt = Attempt{At: now, Outcome: outcome, Message: msg}
	l.obs.Attempts++
	if outcome == Acknowledged {
		firstAck = l.obs.Acknowledged(sent, reply, now)
	}
	if outcome != prev {
		klog.V(2).InfoS("Lease renewal outcome changed", "unit", t.Unit, "epoch", t.Epoch, "outcome", outcome, "message", msg)
	}
	return firstAck || outcome != prev
}

func (l *loop) post(ctx context.Context, t Target, grant *lease.Grant) (lease.Reply, Outcome, string) {
	var reply lease.Reply
	body, err := json.Marshal(grant)
	if err != nil {
		return reply, Unreachable, err.Error()
	}
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout(t.Duration))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.g.scheme+"://"+t.Address+lease.Path, bytes.NewReader(body))
	if err != nil {
		return reply, Unreachable, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.g.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return reply, Unreachable, fmt.Sprintf("no answer within %v: %v", RequestTimeout(t.Duration), err)
		}
		return reply, Unreachable, err.Error()
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return reply, Unreachable, fmt.Sprintf("reading the answer: %v", err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		if err := json.Unmarshal(data, &reply); err != nil {
			return reply, Refused, fmt.Sprintf("200 with an unreadable reply: %v", err)
		}
		if reply.Epoch != t.Epoch {
			return reply, Refused, fmt.Sprintf("200 for epoch %d, the grant was for %d", reply.Epoch, t.Epoch)
		}
		return reply, Acknowledged, ""
	case http.StatusConflict:
		var c lease.Conflict
		if json.Unmarshal(data, &c) == nil && c.Message != "" {
			return reply, Refused, fmt.Sprintf("409: %s (runtime epoch %d)", c.Message, c.RuntimeEpoch)
		}
	}
	var e lease.Error
	if json.Unmarshal(data, &e) == nil && e.Message != "" {
		return reply, Refused, fmt.Sprintf("%d: %s", resp.StatusCode, e.Message)
	}
	return reply, Refused, fmt.Sprintf("%d: %.200s", resp.StatusCode, bytes.TrimSpace(data))
}
