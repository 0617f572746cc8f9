package leadership

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/holdfast-io/holdfast/internal/audit"
)

// ReleaseGate wraps the election lock so that leadership is handed back only
// on a deliberate stop. client-go's ReleaseOnCancel also tries to release
// after a failed renewal, and controller-runtime cancels the election
// whenever the manager stops; a process about to stand down must not hand
// its leadership to a successor as well, so the two stay disjoint by
// construction: release only when AllowRelease was called.
//
// Every acquisition and renewal of the election lease passes through it too,
// so it keeps the instant the last one that succeeded was sent: the
// stand-down counts from there (GrantsUntil).
type ReleaseGate struct {
	resourcelock.Interface
	// Clock reads the instant a renewal is sent; nil is the real clock.
	Clock   clock.PassiveClock
	allowed atomic.Bool

	mu      sync.Mutex
	renewed time.Time
}

// ErrReleaseRefused is what the gate answers to a release it holds back.
var ErrReleaseRefused = errors.New("leadership is released only on a deliberate stop")

// AllowRelease marks the stop as deliberate.
func (g *ReleaseGate) AllowRelease() { g.allowed.Store(true) }

// ReleaseAllowed reports whether the stop was deliberate.
func (g *ReleaseGate) ReleaseAllowed() bool { return g.allowed.Load() }

// Update passes renewals through, noting each that succeeds, and holds back
// a release (a record with no holder) unless the stop is deliberate.
func (g *ReleaseGate) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	if r.HolderIdentity == "" && !g.allowed.Load() {
		return ErrReleaseRefused
	}
	sent := g.now()
	err := g.Interface.Update(ctx, r)
	if err == nil && r.HolderIdentity != "" {
		g.Renewed(sent)
	}
	return err
}

// Create is the first acquisition of a lease that did not exist.
func (g *ReleaseGate) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	sent := g.now()
	err := g.Interface.Create(ctx, r)
	if err == nil && r.HolderIdentity != "" {
		g.Renewed(sent)
	}
	return err
}

func (g *ReleaseGate) now() time.Time {
	if g.Clock == nil {
		return time.Now()
	}
	return g.Clock.Now()
}

// Renewed notes that a renewal (or the acquisition) of the election lease
// sent at sent succeeded. The instant is the one before the request: the
// apiserver wrote the record after it, and a successor counts the election
// lease from the write it observes, so it acquires at least that long after.
func (g *ReleaseGate) Renewed(sent time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if sent.After(g.renewed) {
		g.renewed = sent
	}
}

// GrantsUntil is the instant this process's grantor sends its last grant:
// standDown after the last renewal of its leadership that succeeded, on its
// own clock (docs/design.md §3 L6). A successor acquires at least an
// election lease after that renewal and reads an expiry as a fence only
// standDown + lease + margin after its acquisition, so what this process
// grants by then has fenced first, however long the process slept (SIGSTOP,
// a frozen machine) before it learnt it had lost. Zero when no renewal
// succeeded: nothing may be granted.
func (g *ReleaseGate) GrantsUntil(standDown time.Duration) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.renewed.IsZero() {
		return time.Time{}
	}
	return g.renewed.Add(standDown)
}

// NewLock builds the grantor's election Lease lock behind a ReleaseGate,
// with the election client's request timeout at half the renew deadline (as
// controller-runtime sets it) so one hung request cannot cost the
// leadership.
func NewLock(cfg *rest.Config, namespace, name, identity string, renewDeadline time.Duration) (*ReleaseGate, error) {
	cfg = rest.CopyConfig(cfg)
	cfg = rest.AddUserAgent(cfg, "holdfast-grantor-election")
	cfg.Timeout = max(renewDeadline/2, time.Second)
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	coord, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, namespace, name, core, coord,
		resourcelock.ResourceLockConfig{Identity: identity + "_" + string(uuid.NewUUID())})
	if err != nil {
		return nil, err
	}
	return &ReleaseGate{Interface: lock}, nil
}

// Manager is what Run needs of a controller-runtime manager.
type Manager interface {
	Start(ctx context.Context) error
}

// Loops is what Run needs of the grantor.
type Loops interface {
	Running() []types.NamespacedName
	StopAll()
}

// Ending says how Run ended.
type Ending string

const (
	// Released: stopped on purpose; leadership handed back at once, every
	// loop stopped at once.
	Released Ending = "Released"
	// StoodDown: the manager stopped without being asked; the loops went
	// on renewing for the stand-down (or until a signal), then stopped.
	StoodDown Ending = "StoodDown"
	// Exited: the manager stopped without being asked while this process
	// renewed nothing; there was nothing to stand down for.
	Exited Ending = "Exited"
)

// RunOptions configure Run.
type RunOptions struct {
	// StandDown is --lease-stand-down; 0 disables the stand-down.
	StandDown time.Duration
	Clock     clock.Clock
	Gate      *ReleaseGate
	Audit     *audit.Logger
	Actor     string
}

// Run starts the manager and, when it stops, either releases (the stop was
// asked for: ctx was cancelled) or stands down (it was not). Never both: the
// gate lets the release through only in the first case.
func Run(ctx context.Context, mgr Manager, loops Loops, o RunOptions) (Ending, error) {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	mgrCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	managerDone := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			// Marked before the manager sees the cancel, so its
			// election's release goes through.
			if o.Gate != nil {
				o.Gate.AllowRelease()
			}
			cancel()
		case <-managerDone:
		}
	}()
	err := mgr.Start(mgrCtx)
	close(managerDone)
	leaderGauge.Set(0)

	if ctx.Err() != nil {
		loops.StopAll()
		klog.InfoS("Stopped on request: leadership released, renewal loops stopped")
		return Released, err
	}

	held := loops.Running()
	leadershipLosses.Inc()
	if o.StandDown <= 0 || len(held) == 0 {
		loops.StopAll()
		klog.ErrorS(err, "Manager stopped without being asked; nothing to stand down for", "renewing", len(held), "standDown", o.StandDown)
		return Exited, err
	}

	names := make([]string, len(held))
	for i, u := range held {
		names[i] = u.String()
	}
	// The stand-down counts from the last renewal of the leadership, not
	// from now: a process that slept through its loss learns of it late.
	standDown := o.StandDown
	if o.Gate != nil {
		if until := o.Gate.GrantsUntil(o.StandDown); !until.IsZero() {
			standDown = max(until.Sub(o.Clock.Now()), 0)
		}
	}
	msg := fmt.Sprintf("Manager stopped without being asked (%v); standing down: renewing the %d runtimes held (%s) for %v (a stand-down of %v after the last renewal of the leadership), learning nothing new", err, len(held), strings.Join(names, ", "), standDown.Round(time.Millisecond), o.StandDown)
	klog.InfoS("Standing down", "reason", err, "renewing", names, "standDown", standDown)
	if o.Audit != nil {
		if aerr := o.Audit.Write(audit.Record{Actor: o.Actor, Reason: "GrantorStandingDown", Message: msg}); aerr != nil {
			klog.ErrorS(aerr, "Writing the audit line")
		}
	}
	standingDown.Set(1)
	defer standingDown.Set(0)
	timer := o.Clock.NewTimer(standDown)
	defer timer.Stop()
	select {
	case <-timer.C():
	case <-ctx.Done():
		klog.InfoS("Signal during the stand-down: stopping now")
	}
	loops.StopAll()
	if o.Audit != nil {
		_ = o.Audit.Write(audit.Record{Actor: o.Actor, Reason: "GrantorStoodDown",
			Message: fmt.Sprintf("Stand-down over: stopped renewing %s", strings.Join(names, ", "))})
	}
	return StoodDown, err
}

// ServeHealth answers /healthz (and /readyz) on addr for as long as ctx
// lives, independent of the manager: a grantor standing down has lost its
// manager's probe server and must not be killed by its liveness probe in
// the middle of the window it was given. It returns the bound address.
func ServeHealth(ctx context.Context, addr string, extra map[string]http.Handler) (string, error) {
	if addr == "0" || addr == "" {
		return "", nil
	}
	mux := http.NewServeMux()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.Handle("/healthz", ok)
	mux.Handle("/readyz", ok)
	for p, h := range extra {
		mux.Handle(p, h)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("--health-probe-bind-address: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	go func() {
		<-ctx.Done()
		sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
		defer c()
		_ = srv.Shutdown(sctx)
	}()
	return l.Addr().String(), nil
}
