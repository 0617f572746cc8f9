// Package grantor is the control-plane side of the control lease (docs/design.md §3):
// one renewal loop per Failover runtime with an address, POSTing grants to
// the runtime's lease endpoint at the L2 cadence and recording what came back.
//
// Each grant carries the age of the last acknowledgement and echoes the
// anchor that acknowledgement brought (L1): the runtime dates
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
	"crypto/tls"
	"crypto/x509"
	"math/rand/v2"
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
	"github.com/holdfast-io/holdfast/internal/leasetls"
)

// Target is one binding to renew: the unit, its epoch, where its runtime
// listens and the lease duration.
type Target struct {
	Unit  types.NamespacedName
	Epoch int64
	// PodUID is the binding's podUID: the warm standby pod it promoted.
	// Grants then go only to an endpoint proving that pod's warm identity;
	// when empty, only to one proving the epoch's (api/lease
	// BindingIdentity).
	PodUID   string
	Address  string // host:port of the lease endpoint
	Duration time.Duration
}

// identity is what t's runtime must prove before it is sent anything.
func (t Target) identity() string {
	return lease.BindingIdentity(t.Unit.String(), t.Epoch, t.PodUID)
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
// loop at another epoch, or for another pod (its transport proves only the
// identity it was made for), is stopped first, and its observation dropped.
func (g *Grantor) Ensure(t Target) {
	g.mu.Lock()
	l := g.loops[t.Unit]
	if l != nil && (l.target().Epoch != t.Epoch || l.target().PodUID != t.PodUID) {
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
		tr.TLSClientConfig = leasetls.ClientConfig(c.ClientCertificate, c.RuntimeRoots, t.identity())
		tr.ForceAttemptHTTP2 = true
	}
	return tr
}
