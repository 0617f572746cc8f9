// Package grantor is the control-plane side of the control lease (docs/design.md §3):
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
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/leasetls"
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
	// Timeouts counts the consecutive attempts, up to the last, that got no
	// answer within their bound; the loop backs off while it is above zero.
	Timeouts int
}

// Options configure a Grantor.
type Options struct {
	// Name identifies this grantor in its grants (the controller's pod name).
	Name string
	// Clock drives the loops; tests inject a fake.
	Clock clock.WithTicker
	// TLS authenticates the channel both ways (docs/design.md §3 L12): the
	// grantor presents its certificate and sends a grant only to an endpoint
	// proving to be the binding's runtime. Nil speaks plain HTTP to anyone
	// at the address (--insecure-plaintext-lease).
	TLS Credentials
	// Notify is called, never blocking for long, when an observation changes
	// in a way the reconciler must see: the first acknowledgement, and every
	// change of outcome.
	Notify func(types.NamespacedName)
	// Rand, when set, draws the loops' phase spread and jitter; nil draws
	// from math/rand/v2's global source. A simulation sets it so that one
	// seed gives one schedule.
	Rand *rand.Rand
	// Stepped, when set, runs no goroutine per loop: it is called (under
	// the Grantor's locks: it must not call back) with the unit each time a
	// loop starts, and the caller drives the loop with Begin and End at the
	// instants End names. For a caller that steps every process from one
	// event loop (test/sim); the loop's decisions are the same code.
	Stepped func(types.NamespacedName)
	// GrantsUntil, when set, is the instant from which no grant is sent
	// (zero: none is): the leadership's, its last renewal + the stand-down
	// (leadership.ReleaseGate.GrantsUntil, docs/design.md §3 L6). A process
	// that slept past its loss sends none of the grants queued meanwhile.
	GrantsUntil func() time.Time
}

// Credentials are the grantor's side of the lease channel's TLS, read at
// every attempt so a rotation applies without a restart.
type Credentials interface {
	// ClientCertificate is the grantor's certificate now (api/lease
	// GrantorIdentity, from the lease CA).
	ClientCertificate() *tls.Certificate
	// RuntimeRoots are the CAs a runtime's certificate must chain to now.
	RuntimeRoots() *x509.CertPool
}

// Grantor runs the renewal loops.
type Grantor struct {
	opts   Options
	scheme string
	seq    atomic.Uint64

	mu    sync.Mutex
	loops map[types.NamespacedName]*loop
	// watches read the status of runtimes that hold no lease (watch.go).
	watches map[types.NamespacedName]*watch
}

// New builds a Grantor. No loop runs until Ensure.
func New(opts Options) *Grantor {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Notify == nil {
		opts.Notify = func(types.NamespacedName) {}
	}
	g := &Grantor{
		opts:   opts,
		scheme: "http",
		loops:  map[types.NamespacedName]*loop{},
	}
	if opts.TLS != nil {
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
		l.transport = g.transport(t)
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
	g.Unwatch(unit)
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

// StopAll stops every loop and watch and waits for them.
func (g *Grantor) StopAll() {
	g.mu.Lock()
	loops := g.loops
	g.loops = map[types.NamespacedName]*loop{}
	g.mu.Unlock()
	for _, l := range loops {
		l.stop()
	}
	loopsGauge.Set(0)
	g.mu.Lock()
	watches := g.watches
	g.watches = nil
	g.mu.Unlock()
	for _, w := range watches {
		w.stop()
	}
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

// transport is one loop's connection to its runtime. Each binding has its
// own, so a connection is only ever verified for, and used by, the binding
// whose runtime it proved to reach.
func (g *Grantor) transport(t Target) *http.Transport {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     90 * time.Second,
	}
	if c := g.opts.TLS; c != nil {
		tr.TLSClientConfig = leasetls.ClientConfig(c.ClientCertificate, c.RuntimeRoots, lease.RuntimeIdentity(t.Unit.String(), t.Epoch))
		tr.ForceAttemptHTTP2 = true
	}
	return tr
}

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

// attempt sends one grant and records what came back. It reports whether the
// reconciler must be told.
func (l *loop) attempt(ctx context.Context) bool {
	if !l.g.mayGrant() {
		return false
	}
	x := l.begin(ctx)
	reply, outcome, msg, timedOut := l.post(ctx, x.Target, &x.Grant, x.Timeout)
	if ctx.Err() != nil {
		// Paused or stopped mid-flight: the attempt is not an observation.
		return false
	}
	return l.record(x, reply, outcome, msg, timedOut)
}

// refusedRetry is how often a loop the leadership lets grant no more looks
// again.
const refusedRetry = time.Second

// mayGrant: the leadership still lets this process grant (GrantsUntil).
func (g *Grantor) mayGrant() bool {
	if g.opts.GrantsUntil == nil {
		return true
	}
	return g.opts.Clock.Now().Before(g.opts.GrantsUntil())
}

// begin stamps the next grant from the book.
func (l *loop) begin(ctx context.Context) *Exchange {
	clk := l.g.opts.Clock
	x := &Exchange{Grant: lease.Grant{Grantor: l.g.opts.Name, Seq: l.g.seq.Add(1)}, ctx: ctx, l: l}
	l.mu.Lock()
	t := l.obs.Target
	x.Target = t
	x.Grant.Unit, x.Grant.Epoch, x.Grant.DurationMillis = t.Unit.String(), t.Epoch, t.Duration.Milliseconds()
	start := clk.Now()
	x.sent = l.obs.Stamp(&x.Grant, start)
	x.Timeout = AttemptTimeout(t.Duration, l.obs.Timeouts, l.anchorLeft(start))
	l.mu.Unlock()
	return x
}

// record keeps what one attempt got back and reports whether the
// reconciler must be told.
func (l *loop) record(x *Exchange, reply lease.Reply, outcome Outcome, msg string, timedOut bool) bool {
	t, timeout := x.Target, x.Timeout
	now := l.g.opts.Clock.Now()
	renewals.WithLabelValues(string(outcome)).Inc()
	if timedOut {
		renewalTimeouts.Inc()
	}
	l.countBackoff(timedOut)

	l.mu.Lock()
	defer l.mu.Unlock()
	prev, prevOwners := l.obs.LastAttempt.Outcome, l.obs.LaterOwners
	firstAck := false
	l.obs.LastAttempt = Attempt{At: now, Outcome: outcome, Message: msg}
	l.obs.Attempts++
	if timedOut {
		if l.obs.Timeouts == 0 {
			klog.V(1).InfoS("Lease renewal got no answer in time; backing off", "unit", t.Unit, "epoch", t.Epoch, "bound", timeout)
		}
		l.obs.Timeouts++
	} else {
		l.obs.Timeouts = 0
	}
	if outcome == Acknowledged {
		firstAck = l.obs.Acknowledged(x.sent, reply, now)
	}
	if outcome != prev {
		klog.V(2).InfoS("Lease renewal outcome changed", "unit", t.Unit, "epoch", t.Epoch, "outcome", outcome, "message", msg)
	}
	return firstAck || outcome != prev || !slices.Equal(prevOwners, l.obs.LaterOwners)
}

// refreshCredentials closes the loop's idle connections when the
// grantor's certificate or the trusted CAs changed since they were made.
// Only the loop's goroutine calls it.
func (l *loop) refreshCredentials() {
	c := l.g.opts.TLS
	if c == nil {
		return
	}
	cert, roots := c.ClientCertificate(), c.RuntimeRoots()
	if l.cert != nil && (cert != l.cert || roots != l.roots) {
		l.transport.CloseIdleConnections()
	}
	l.cert, l.roots = cert, roots
}

// errNoAnswer is the cause of an attempt's cancellation at its bound.
var errNoAnswer = errors.New("no answer in time")

// post sends one grant and reads the answer within timeout, measured on the
// injected clock. timedOut reports an attempt abandoned at its bound.
func (l *loop) post(ctx context.Context, t Target, grant *lease.Grant, timeout time.Duration) (reply lease.Reply, outcome Outcome, msg string, timedOut bool) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer afterFunc(l.g.opts.Clock, timeout, func() { cancel(errNoAnswer) })()
	l.refreshCredentials()
	req, err := l.g.request(ctx, t, grant)
	if err != nil {
		return reply, Unreachable, err.Error(), false
	}
	resp, err := (&http.Client{Transport: l.transport}).Do(req)
	return l.answer(resp, err, func() bool { return errors.Is(context.Cause(ctx), errNoAnswer) }, timeout, t)
}

// request is the POST of one grant.
func (g *Grantor) request(ctx context.Context, t Target, grant *lease.Grant) (*http.Request, error) {
	body, err := json.Marshal(grant)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.scheme+"://"+t.Address+lease.Path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return req, nil
}

// answer reads the outcome of one POST: the response, or err when there was
// none; abandoned says whether the attempt was abandoned at its bound.
func (l *loop) answer(resp *http.Response, err error, abandoned func() bool, timeout time.Duration, t Target) (reply lease.Reply, outcome Outcome, msg string, timedOut bool) {
	noAnswer := func(err error) (lease.Reply, Outcome, string, bool) {
		if abandoned() {
			return reply, Unreachable, fmt.Sprintf("no answer within %v: %v", timeout, err), true
		}
		return reply, Unreachable, err.Error(), false
	}
	if err != nil {
		if o, m, ok := l.notAuthenticated(t, err); ok {
			return reply, o, m, false
		}
		return noAnswer(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		r, o, m, to := noAnswer(err)
		return r, o, "reading the answer: " + m, to
	}
	o, m := judge(resp.StatusCode, data, t, &reply)
	if resp.StatusCode == http.StatusForbidden && l.g.opts.TLS != nil {
		var e lease.Error
		if json.Unmarshal(data, &e) == nil && e.Reason == lease.ReasonUnauthenticated {
			authFailures.WithLabelValues(authRefusedByRuntime).Inc()
			m = "the runtime refused this grantor's certificate: " + e.Message
		}
	}
	return reply, o, m, false
}

// Why an attempt failed to authenticate (holdfast_grantor_renewal_authentication_failures_total).
const (
	// authRefusedByRuntime: the runtime answered 403, refusing the
	// grantor's certificate.
	authRefusedByRuntime = "refused_by_runtime"
	// authRuntimeUnverified: the endpoint's certificate did not prove it to
	// be the binding's runtime; no grant was sent.
	authRuntimeUnverified = "runtime_unverified"
	// authNotTLS: the endpoint answered the TLS handshake in plain HTTP.
	authNotTLS = "not_tls"
	// authHandshake: the TLS handshake failed otherwise (an alert from the
	// endpoint, a protocol it does not speak).
	authHandshake = "handshake_failed"
)

// notAuthenticated recognises an attempt that ended because the two ends
// did not authenticate each other. Nothing proved to be the binding's
// runtime answered, so it is Unreachable (the Unit's record says so, with
// the reason), never Refused, which says the runtime itself answered.
func (l *loop) notAuthenticated(t Target, err error) (Outcome, string, bool) {
	if l.g.opts.TLS == nil {
		return "", "", false
	}
	var (
		refusal *leasetls.Refusal
		header  tls.RecordHeaderError
		alert   tls.AlertError
		reason  string
		why     string
	)
	switch {
	case errors.As(err, &refusal):
		reason, why = authRuntimeUnverified, fmt.Sprintf("the endpoint is not the runtime of %s at epoch %d: its %v", t.Unit, t.Epoch, refusal)
	case errors.As(err, &header), errors.Is(err, http.ErrSchemeMismatch):
		reason, why = authNotTLS, "the endpoint does not speak TLS (a runtime started with --insecure-plaintext-lease, or not a runtime)"
	case errors.As(err, &alert):
		reason, why = authHandshake, "the endpoint ended the TLS handshake: "+alert.Error()
	default:
		return "", "", false
	}
	authFailures.WithLabelValues(reason).Inc()
	return Unreachable, fmt.Sprintf("lease endpoint %s not authenticated, no grant sent: %s", t.Address, why), true
}

// afterFunc runs f after d on clk and returns its stop. Both clocks the
// grantor runs on (the real one, the tests' fake) have AfterFunc.
func afterFunc(clk clock.WithTicker, d time.Duration, f func()) (stop func()) {
	if c, ok := clk.(clock.WithDelayedExecution); ok {
		t := c.AfterFunc(d, f)
		return func() { t.Stop() }
	}
	t := clk.NewTimer(d)
	done := make(chan struct{})
	go func() {
		select {
		case <-t.C():
			f()
		case <-done:
			t.Stop()
		}
	}()
	return func() { close(done) }
}

// judge reads the runtime's answer.
func judge(code int, data []byte, t Target, reply *lease.Reply) (Outcome, string) {

	switch code {
	case http.StatusOK:
		if err := json.Unmarshal(data, reply); err != nil {
			return Refused, fmt.Sprintf("200 with an unreadable reply: %v", err)
		}
		if reply.Epoch != t.Epoch {
			return Refused, fmt.Sprintf("200 for epoch %d, the grant was for %d", reply.Epoch, t.Epoch)
		}
		if reply.State == lease.Autonomous {
			// L11: an Autonomy runtime takes no lease and never fences, so
			// its answer is no acknowledgement of one.
			return Refused, fmt.Sprintf("200 from a runtime in %s mode (state %s): it holds no lease and never fences itself, so its answer acknowledges nothing",
				holdfastv1.Autonomy, reply.State)
		}
		return Acknowledged, ""
	case http.StatusConflict:
		var c lease.Conflict
		if json.Unmarshal(data, &c) == nil && c.Message != "" {
			return Refused, fmt.Sprintf("409: %s (runtime epoch %d)", c.Message, c.RuntimeEpoch)
		}
	}
	var e lease.Error
	if json.Unmarshal(data, &e) == nil && e.Message != "" {
		return Refused, fmt.Sprintf("%d: %s", code, e.Message)
	}
	return Refused, fmt.Sprintf("%d: %.200s", code, bytes.TrimSpace(data))
}
