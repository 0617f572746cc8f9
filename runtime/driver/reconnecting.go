package driver

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/holdfast-io/holdfast/runtime/lease"
)

// DefaultHealthInterval is how often a driver that is down is dialled again.
const DefaultHealthInterval = 5 * time.Second

// ReconnectingConfig configures a Reconnecting driver.
type ReconnectingConfig struct {
	// HealthInterval between dials of a driver that is down.
	HealthInterval time.Duration
	// Clock for the health monitor and the down-since instant; nil is real.
	Clock clock.WithTicker
	// OnChange, when set, is called with every change of connectedness.
	OnChange func(name string, connected bool)
}

// Reconnecting wraps a network driver (#1936): the first dial runs on its
// own goroutine so start-up never waits on it; the health monitor dials a
// driver that is down every HealthInterval whether the first dial failed or
// a connection dropped later; every dial and every I/O runs under one
// mutex, so a read that arrives during a dial waits for it and finds the
// driver connected instead of dialling beside it; and a retired driver
// waits for a dial in flight, closes it, and never dials again.
type Reconnecting struct {
	inner Driver
	cfg   ReconnectingConfig
	log   klog.Logger

	mu        sync.Mutex
	connected bool
	closed    bool
	stop      chan struct{}
	started   bool

	// up and downSince are read by health checks without waiting for a
	// dial in flight.
	up        atomic.Bool
	downSince atomic.Pointer[time.Time]
	dials     atomic.Int64
}

// NewReconnecting wraps inner.
func NewReconnecting(inner Driver, cfg ReconnectingConfig, log klog.Logger) *Reconnecting {
	if cfg.HealthInterval <= 0 {
		cfg.HealthInterval = DefaultHealthInterval
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	r := &Reconnecting{
		inner: inner,
		cfg:   cfg,
		log:   log.WithValues("driver", inner.Name()),
		stop:  make(chan struct{}),
	}
	now := cfg.Clock.Now()
	r.downSince.Store(&now)
	return r
}

// Name is the wrapped driver's name.
func (r *Reconnecting) Name() string { return r.inner.Name() }

// Network is true: Reconnecting wraps network drivers.
func (r *Reconnecting) Network() bool { return true }

// Start dials the device on a goroutine of its own and starts the health
// monitor, and returns at once. The monitor runs until ctx ends or the
// driver is closed.
func (r *Reconnecting) Start(ctx context.Context) {
	r.mu.Lock()
	if r.started || r.closed {
		r.mu.Unlock()
		return
	}
	r.started = true
	r.mu.Unlock()
	go func() {
		if err := r.Connect(ctx); err != nil {
			r.log.Info("Failed to connect IO driver, will retry on first I/O and every health interval",
				"err", err, "healthInterval", r.cfg.HealthInterval)
		} else {
			r.log.Info("Connected IO driver")
		}
		r.monitor(ctx)
	}()
}

func (r *Reconnecting) monitor(ctx context.Context) {
	t := r.cfg.Clock.NewTicker(r.cfg.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.stop:
			return
		case <-t.C():
		}
		if r.up.Load() {
			continue
		}
		if err := r.Connect(ctx); err == nil {
			r.log.Info("Reconnected IO driver")
		} else if err != ErrDriverClosed {
			r.log.V(2).Info("IO driver still down", "err", err)
		}
	}
}

// Connect dials the device unless it is connected; a retired driver is
// refused with ErrDriverClosed.
func (r *Reconnecting) Connect(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ensureLocked(ctx)
}

func (r *Reconnecting) ensureLocked(ctx context.Context) error {
	if r.closed {
		return ErrDriverClosed
	}
	if r.connected {
		return nil
	}
	r.dials.Add(1)
	if err := r.inner.Connect(ctx); err != nil {
		_ = r.inner.Close()
		return err
	}
	r.setLocked(true)
	return nil
}

func (r *Reconnecting) setLocked(connected bool) {
	if r.connected == connected {
		return
	}
	r.connected = connected
	if !connected {
		now := r.cfg.Clock.Now()
		r.downSince.Store(&now)
	}
	r.up.Store(connected)
	if r.cfg.OnChange != nil {
		r.cfg.OnChange(r.inner.Name(), connected)
	}
}

// failedLocked drops a connection the last I/O found unusable, so the next
// I/O or the monitor dials again.
func (r *Reconnecting) failedLocked(err error) {
	if IsTransportError(err) && r.connected {
		r.log.Info("IO driver lost its connection", "err", err)
		_ = r.inner.Close()
		r.setLocked(false)
	}
}

// ReadRegisters reads from the device, dialling first when it is down.
func (r *Reconnecting) ReadRegisters(ctx context.Context, addr, count uint16) ([]uint16, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.ensureLocked(ctx); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotConnected, err)
	}
	v, err := r.inner.ReadRegisters(ctx, addr, count)
	r.failedLocked(err)
	return v, err
}

// WriteRegisters writes to the device under the permit, dialling first when
// it is down.
func (r *Reconnecting) WriteRegisters(ctx context.Context, p *lease.Permit, addr uint16, values []uint16) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.ensureLocked(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrNotConnected, err)
	}
	err := r.inner.WriteRegisters(ctx, p, addr, values)
	r.failedLocked(err)
	return err
}

// AbortWrites aborts the wrapped driver's unanswered write, without waiting
// for the I/O mutex the write holds; the write then fails and drops the
// connection, and the next I/O or the monitor dials again.
func (r *Reconnecting) AbortWrites() {
	if a, ok := r.inner.(WriteAborter); ok {
		a.AbortWrites()
	}
}

// Close retires the driver: it waits for a dial in flight, closes the
// connection, stops the monitor, and refuses every later dial.
func (r *Reconnecting) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	close(r.stop)
	err := r.inner.Close()
	r.setLocked(false)
	return err
}

// Connected reports whether the driver has a working connection.
func (r *Reconnecting) Connected() bool { return r.up.Load() }

// DownSince is when the driver was last seen losing its connection (or was
// created, if it never had one), and whether it is down now. It does not
// wait for a dial in flight.
func (r *Reconnecting) DownSince() (time.Time, bool) {
	if r.up.Load() {
		return time.Time{}, false
	}
	return *r.downSince.Load(), true
}

// Dials counts dial attempts, for tests and metrics.
func (r *Reconnecting) Dials() int64 { return r.dials.Load() }
