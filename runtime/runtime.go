// Package runtime is the safety half of a unit runtime as a library: the
// control lease endpoint and its Keeper (hold, then fence), the one guarded
// write path every output goes through, field drivers dialled beside
// start-up, the two gRPC health services, the operating point adopted on
// promotion and restored on a restart in place, MQTT telemetry that never
// holds start-up, and Prometheus metrics. A third-party runtime embeds it
// by supplying its drivers, its outputs and its Program (README.md);
// cmd/unit-runtime is the reference runtime built on it.
package runtime

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/leasetls"
	"github.com/holdfast-io/holdfast/internal/version"
	"github.com/holdfast-io/holdfast/runtime/driver"
	"github.com/holdfast-io/holdfast/runtime/health"
	"github.com/holdfast-io/holdfast/runtime/lease"
	"github.com/holdfast-io/holdfast/runtime/metrics"
	"github.com/holdfast-io/holdfast/runtime/state"
	"github.com/holdfast-io/holdfast/runtime/telemetry"
)

// Defaults of a Config.
const (
	DefaultScanInterval = time.Second
	DefaultDriverGrace  = 60 * time.Second
)

// Output is one commanded value on a device.
type Output struct {
	Name     string
	Device   string
	Register uint16
	// Hold is the value driven at the lease deadline; nil holds the last
	// value (nothing is written).
	Hold *uint16
}

// Input is one value read every scan.
type Input struct {
	Name     string
	Device   string
	Register uint16
}

// Program is the control law. Each scan it gets the operating point (the
// value every output commands now) and the inputs read this scan (a failed
// read is absent), and returns the values to command; an output it leaves
// out keeps its value. It must not block.
type Program interface {
	Scan(op, inputs map[string]uint16) map[string]uint16
}

// ProgramFunc adapts a function to Program.
type ProgramFunc func(op, inputs map[string]uint16) map[string]uint16

// Scan calls f.
func (f ProgramFunc) Scan(op, inputs map[string]uint16) map[string]uint16 { return f(op, inputs) }

// Config is everything a Runtime is built from.
type Config struct {
	Lease lease.Config
	// LeaseAddr, HealthAddr and MetricsAddr are host:port to listen on;
	// an empty MetricsAddr serves no metrics endpoint.
	LeaseAddr string
	// LeaseTLSDir holds the lease endpoint's credentials (api/lease
	// CredentialsFile: this runtime's key and certificate; TrustBundleFile:
	// the lease CA), read again when they change: the endpoint speaks
	// mutual TLS and takes grants only from the authorised grantor
	// (docs/design.md §3 L12). Required unless InsecurePlaintextLease.
	LeaseTLSDir string
	// InsecurePlaintextLease serves the lease endpoint over plain HTTP and
	// takes grants from anyone who reaches it: any process on the network
	// can keep this runtime writing after the controller declared it
	// expired, so a second writer can start beside it. For a lab without a
	// lease CA only.
	InsecurePlaintextLease bool
	HealthAddr             string
	MetricsAddr            string
	// Drivers are the field devices, by Name. Network drivers are wrapped
	// in driver.Reconnecting.
	Drivers []driver.Driver
	Outputs []Output
	Inputs  []Input
	Program Program
	// ScanInterval between scans.
	ScanInterval time.Duration
	// DriverGrace: readiness fails when every driver has been gone longer.
	DriverGrace time.Duration
	// HealthInterval between re-dials of a driver that is down.
	HealthInterval time.Duration
	// StateDir holds the state file; empty keeps no state (every start
	// adopts).
	StateDir string
	// Telemetry publishes status and values; nil publishes nothing.
	Telemetry *telemetry.Client
	// Registry for the metrics; nil makes a private one.
	Registry *prometheus.Registry
}

// Runtime is one running unit runtime.
type Runtime struct {
	cfg     Config
	log     klog.Logger
	clock   clock.WithTicker
	keeper  *lease.Keeper
	handler *lease.Handler
	metrics *metrics.Metrics
	reg     *prometheus.Registry
	drivers map[string]driver.Driver
	checker *health.Checker
	state   *state.Dir

	leaseCreds *leasetls.Files[*leasetls.Runtime]
	leaseSrv   *lease.Server
	healthSrv  *health.Server
	metricsSrv *http.Server
	metricsLn  net.Listener

	mu          sync.Mutex
	op          map[string]uint16 // the operating point
	ready       bool              // op is adopted or restored: writes may go out
	holdApplied bool
	lastScan    time.Time
	lastInputs  map[string]uint16
	restored    bool
	started     time.Time
	// laterOwners are the devices whose owner epoch was later than this
	// runtime's at its last write attempt, by device (L13).
	laterOwners map[string]leaseapi.LaterOwner

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New checks cfg and builds a Runtime; it opens nothing.
func New(cfg Config, log klog.Logger) (*Runtime, error) {
	if cfg.ScanInterval <= 0 {
		cfg.ScanInterval = DefaultScanInterval
	}
	if cfg.DriverGrace <= 0 {
		cfg.DriverGrace = DefaultDriverGrace
	}
	if cfg.Lease.Clock == nil {
		cfg.Lease.Clock = clock.RealClock{}
	}
	if cfg.Program == nil {
		cfg.Program = ProgramFunc(func(op, _ map[string]uint16) map[string]uint16 { return op })
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Lease.Warm {
		log = log.WithValues("unit", cfg.Lease.Unit, "warmStandby", true)
	} else {
		log = log.WithValues("unit", cfg.Lease.Unit, "epoch", cfg.Lease.Epoch)
	}
	k, err := lease.NewKeeper(cfg.Lease, log)
	if err != nil {
		return nil, err
	}
	r := &Runtime{cfg: cfg, log: log, clock: cfg.Lease.Clock, keeper: k, drivers: map[string]driver.Driver{},
		op: map[string]uint16{}, reg: cfg.Registry, laterOwners: map[string]leaseapi.LaterOwner{}}
	if r.reg == nil {
		r.reg = prometheus.NewRegistry()
	}
	version.Register(r.reg)
	auth := lease.InsecurePlaintext
	src := metrics.Sources{Remaining: k.Remaining}
	if !cfg.InsecurePlaintextLease {
		if r.leaseCreds, err = leasetls.WatchRuntimeDir(cfg.LeaseTLSDir, log); err != nil {
			return nil, fmt.Errorf("lease credentials in %s: %w", cfg.LeaseTLSDir, err)
		}
		auth = lease.MutualTLS(func() *x509.CertPool { return r.leaseCreds.Current().Roots }, leaseapi.GrantorIdentity)
		src.CertificateExpiry = func() time.Time { return r.leaseCreds.Current().NotAfter() }
	}
	if cfg.Telemetry != nil {
		src.QueueDepth = cfg.Telemetry.QueueDepth
	}
	r.metrics = metrics.New(r.reg, src)
	r.metrics.SetLeaseState(k.State())
	for _, d := range cfg.Drivers {
		if driver.IsNetwork(d) {
			if _, ok := d.(*driver.Reconnecting); !ok {
				d = driver.NewReconnecting(d, driver.ReconnectingConfig{HealthInterval: cfg.HealthInterval,
					Clock: r.clock, OnChange: r.driverChanged}, log)
			}
		}
		r.drivers[d.Name()] = d
		r.metrics.DriverConnected.WithLabelValues(d.Name()).Set(0)
	}
	// The fence aborts every unanswered device write before it waits for
	// them, so a fenced runtime leaves no write queued in the kernel (L3).
	driver.AbortWritesOnFence(k, slices.Collect(maps.Values(r.drivers))...)
	r.handler = lease.NewHandler(k, auth, log)
	r.handler.OnGrant = func(_ *leaseapi.Grant, out lease.Outcome) {
		r.metrics.Grants.WithLabelValues(outcomeLabel(out)).Inc()
	}
	r.handler.LaterOwners = r.LaterOwners
	r.handler.OnRefused = func(reason string) { r.metrics.Unauthenticated.WithLabelValues(reason).Inc() }
	r.checker = &health.Checker{
		Clock: r.clock, DriverGrace: cfg.DriverGrace, ScanInterval: cfg.ScanInterval,
		Fenced:   func() bool { return k.State().WritesNothing() },
		Warm:     k.Warm,
		Drivers:  r.driverStates,
		LastScan: r.lastScanAt,
	}
	k.OnTransition(r.transition)
	return r, nil
}

func (c *Config) validate() error {
	var errs []error
	switch {
	case c.LeaseTLSDir == "" && !c.InsecurePlaintextLease:
		errs = append(errs, errors.New("leaseTLSDir: required: the lease endpoint takes grants only over mutual TLS (InsecurePlaintextLease is unsafe)"))
	case c.LeaseTLSDir != "" && c.InsecurePlaintextLease:
		errs = append(errs, errors.New("leaseTLSDir: must be empty with InsecurePlaintextLease"))
	}
	names := map[string]bool{}
	for _, d := range c.Drivers {
		if names[d.Name()] {
			errs = append(errs, fmt.Errorf("drivers: %q: duplicate name", d.Name()))
		}
		names[d.Name()] = true
	}
	// Every output and input has a name unique among both, on a device
	// that exists.
	seen := map[string]bool{}
	point := func(path, name, device, unique string) {
		if name == "" || seen[name] {
			errs = append(errs, fmt.Errorf("%s.name: %q: must be set and unique%s", path, name, unique))
		}
		seen[name] = true
		if !names[device] {
			errs = append(errs, fmt.Errorf("%s.device: %q: no such device", path, device))
		}
	}
	for i, o := range c.Outputs {
		point(fmt.Sprintf("outputs[%d]", i), o.Name, o.Device, "")
	}
	for i, in := range c.Inputs {
		point(fmt.Sprintf("inputs[%d]", i), in.Name, in.Device, " among inputs and outputs")
	}
	return errors.Join(errs...)
}

func outcomeLabel(o lease.Outcome) string {
	switch o {
	case lease.Extended:
		return "extended"
	case lease.NoAcknowledgedAge:
		return "no_ack"
	case lease.NoAnchor:
		return "no_anchor"
	default:
		return "stale"
	}
}

// Keeper is the runtime's lease Keeper.
func (r *Runtime) Keeper() *lease.Keeper { return r.keeper }

// Handler is the lease endpoint (served on LeaseAddr by Start); an
// embedder with its own HTTP server may mount it instead, serving it with
// LeaseTLSConfig: it takes grants only from the authorised grantor over
// mutual TLS.
func (r *Runtime) Handler() http.Handler { return r.handler }

// LeaseTLSConfig is the lease endpoint's TLS: this runtime's certificate,
// reloaded when it changes, and a client certificate asked for (the
// handler judges it). Nil with InsecurePlaintextLease.
func (r *Runtime) LeaseTLSConfig() *tls.Config {
	if r.leaseCreds == nil {
		return nil
	}
	return leasetls.ServerConfig(func() *tls.Certificate { return r.leaseCreds.Current().Cert })
}

// Checker computes the health verdicts.
func (r *Runtime) Checker() *health.Checker { return r.checker }

// Registry holds the runtime's metrics.
func (r *Runtime) Registry() *prometheus.Registry { return r.reg }

// Driver returns the driver named name as the runtime uses it (network
// drivers wrapped in driver.Reconnecting).
func (r *Runtime) Driver(name string) driver.Driver { return r.drivers[name] }

// LeaseAddr, HealthAddr and MetricsAddr are the bound addresses once
// Start returned.
func (r *Runtime) LeaseAddr() string { return r.leaseSrv.Addr().String() }

// HealthAddr is the gRPC health server's address.
func (r *Runtime) HealthAddr() string { return r.healthSrv.Addr().String() }

// MetricsAddr is the metrics endpoint's address, empty when none.
func (r *Runtime) MetricsAddr() string {
	if r.metricsLn == nil {
		return ""
	}
	return r.metricsLn.Addr().String()
}

// Start brings the runtime up and returns without waiting on the network
// (L8, #1933, #1936): it reads the state file, opens the lease endpoint,
// the health server and the metrics endpoint, starts telemetry in the
// background, connects the simulation drivers, starts every network
// driver's first dial on its own goroutine, and starts the lease and scan
// loops. Nothing it does waits for a broker or a device to answer.
func (r *Runtime) Start(ctx context.Context) error {
	r.log.Info("Starting unit runtime", "mode", r.cfg.Lease.Mode, "incarnation", r.cfg.Lease.Incarnation)
	if err := r.Prepare(); err != nil {
		return err
	}
	var err error
	if r.leaseSrv, err = lease.Listen(r.cfg.LeaseAddr, r.handler, r.LeaseTLSConfig(), r.log); err != nil {
		return err
	}
	if r.leaseCreds != nil {
		r.log.Info("Lease endpoint listening: grants only from the authorised grantor over mutual TLS", "address", r.leaseSrv.Addr().String(),
			"grantor", leaseapi.GrantorIdentity, "certificate", r.leaseCreds.Current().Cert.Leaf.URIs, "notAfter", r.leaseCreds.Current().NotAfter())
	} else {
		r.log.Info("WARNING: lease endpoint listening over plain HTTP; any process that reaches it can keep this runtime writing (--insecure-plaintext-lease)",
			"address", r.leaseSrv.Addr().String())
	}
	var liveness health.Verdict = r.checker.Liveness
	if r.healthSrv, err = health.Listen(r.cfg.HealthAddr, health.NewService(r.checker.Readiness, liveness)); err != nil {
		r.closeServers()
		return err
	}
	r.log.Info("gRPC health server listening", "address", r.healthSrv.Addr().String(),
		"services", []string{holdfastv1.HealthServiceReadiness, holdfastv1.HealthServiceLiveness})
	if r.cfg.MetricsAddr != "" {
		if r.metricsLn, err = net.Listen("tcp", r.cfg.MetricsAddr); err != nil {
			r.closeServers()
			return fmt.Errorf("metrics endpoint: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{}))
		r.metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = r.metricsSrv.Serve(r.metricsLn) }()
	}

	ctx, r.cancel = context.WithCancel(ctx)
	if r.leaseCreds != nil {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.leaseCreds.Run(ctx, leasetls.ReloadInterval) }()
	}
	if t := r.cfg.Telemetry; t != nil {
		// ConnectBackground fails only on configuration, never on reach.
		if err := t.ConnectBackground(ctx); err != nil {
			r.closeServers()
			return err
		}
		if !r.keeper.Warm() {
			t.SetStatus(r.status())
		}
	}
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.keeper.Run(ctx) }()

	for _, d := range r.drivers {
		if rc, ok := d.(*driver.Reconnecting); ok {
			rc.Start(ctx) // dialled beside the start (#1936)
			continue
		}
		// A driver on no network touches no wire: connected before Start
		// returns, as nothing re-dials it.
		if err := d.Connect(ctx); err != nil {
			r.log.Error(err, "Failed to connect simulation driver", "driver", d.Name())
		} else {
			r.driverChanged(d.Name(), true)
		}
	}
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.scanLoop(ctx) }()
	r.log.Info("Unit runtime started")
	return nil
}

// Prepare is the first step of Start, which opens nothing: it stamps the
// start (the stall budget runs from it until the first scan completes) and
// restores the state file (L10). A caller that steps the runtime from its
// own event loop (test/sim) calls it instead of Start, connects the drivers,
// serves Handler itself, and calls Step for every scan and Keeper().Step at
// the instants it returns.
func (r *Runtime) Prepare() error {
	r.mu.Lock()
	r.started = r.clock.Now()
	r.lastScan = r.started
	r.mu.Unlock()
	return r.restore()
}

// Step runs one scan now: what the scan loop does at every tick and at
// every lease transition.
func (r *Runtime) Step(ctx context.Context) { r.scan(ctx) }

// Stop stops the loops, closes the drivers and the servers.
func (r *Runtime) Stop(ctx context.Context) {
	if r.cancel != nil {
		r.cancel()
	}
	r.wg.Wait()
	for _, d := range r.drivers {
		_ = d.Close()
	}
	if t := r.cfg.Telemetry; t != nil {
		t.Disconnect(ctx)
	}
	r.closeServers()
}

func (r *Runtime) closeServers() {
	if r.leaseSrv != nil {
		_ = r.leaseSrv.Close()
	}
	if r.healthSrv != nil {
		r.healthSrv.Stop()
	}
	if r.metricsSrv != nil {
		_ = r.metricsSrv.Close()
	}
}

func (r *Runtime) driverChanged(name string, connected bool) {
	v := 0.0
	if connected {
		v = 1
	}
	r.metrics.DriverConnected.WithLabelValues(name).Set(v)
}

func (r *Runtime) driverStates() []health.DriverState {
	var out []health.DriverState
	for name, d := range r.drivers {
		switch d := d.(type) {
		case *driver.Reconnecting:
			since, down := d.DownSince()
			out = append(out, health.DriverState{Name: name, Down: down, DownSince: since})
		case interface{ Connected() bool }:
			if !d.Connected() {
				out = append(out, health.DriverState{Name: name, Down: true, DownSince: r.startedAt()})
			} else {
				out = append(out, health.DriverState{Name: name})
			}
		}
	}
	return out
}

func (r *Runtime) startedAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started
}

func (r *Runtime) lastScanAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastScan
}

// transition runs on every change of the reported lease state.
func (r *Runtime) transition(tr lease.Transition) {
	r.metrics.SetLeaseState(tr.To)
	if tr.To == leaseapi.Holding || tr.To == leaseapi.Fenced {
		// Whatever the device holds after a hold or a fence is read again
		// before the next control write.
		r.mu.Lock()
		r.ready = false
		r.mu.Unlock()
	}
	if t := r.telemetry(); t != nil {
		t.SetStatus(r.status())
	}
}

// telemetry is the MQTT client while the runtime may speak for its unit:
// nil while it is a warm standby, which drives nothing and has no epoch
// for the status topic's ordering rule to place it by.
func (r *Runtime) telemetry() *telemetry.Client {
	if r.keeper.Warm() {
		return nil
	}
	return r.cfg.Telemetry
}

func (r *Runtime) status() telemetry.Status {
	st := r.keeper.Status()
	return telemetry.Status{Unit: st.Unit, Epoch: st.Epoch, Mode: string(st.Mode), State: string(st.State),
		Fenced: st.Fenced, PodUID: st.Incarnation.PodUID, RestartCount: st.Incarnation.RestartCount}
}

// OperatingPoint is a copy of the values the outputs command now.
func (r *Runtime) OperatingPoint() map[string]uint16 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.op)
}

// Restored reports whether this start restored its operating point from
// the state file (a restart in place).
func (r *Runtime) Restored() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.restored
}

// StepProgram is the reference runtime's control law: every scan it
// commands every output, advancing each by its step (wrapping at 65535)
// from its operating point, so an output with no step holds its value. It
// makes a steady, checkable stream of writes for tests, drills and the
// demo. Like any program with compile-time defaults it would command
// step-from-zero to an output with no operating point, which is why the
// runtime never runs it before the operating point is adopted or restored.
func StepProgram(outputs []Output, steps map[string]uint16) Program {
	return ProgramFunc(func(op, _ map[string]uint16) map[string]uint16 {
		next := make(map[string]uint16, len(outputs))
		for _, o := range outputs {
			next[o.Name] = op[o.Name] + steps[o.Name]
		}
		return next
	})
}
