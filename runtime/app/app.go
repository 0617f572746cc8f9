// Package app is the reference unit runtime's command line: flags, their
// checks, and the run loop of cmd/unit-runtime.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/version"
	"github.com/holdfast-io/holdfast/runtime"
	"github.com/holdfast-io/holdfast/runtime/driver"
	"github.com/holdfast-io/holdfast/runtime/driver/modbus"
	"github.com/holdfast-io/holdfast/runtime/driver/opcua"
	"github.com/holdfast-io/holdfast/runtime/driver/simdriver"
	"github.com/holdfast-io/holdfast/runtime/lease"
	"github.com/holdfast-io/holdfast/runtime/state"
	"github.com/holdfast-io/holdfast/runtime/telemetry"
)

// Options are the parsed flags.
type Options struct {
	// Version: print the build's version and exit.
	Version        bool
	Unit           string
	Epoch          int64
	Warm           bool
	Mode           string
	LeaseDuration  time.Duration
	BindAddress    string
	LeasePort      int
	HealthPort     int
	MetricsPort    int
	LeaseTLSDir    string
	Insecure       bool
	Devices        listFlag
	Outputs        listFlag
	Inputs         listFlag
	ScanInterval   time.Duration
	DriverGrace    time.Duration
	HealthInterval time.Duration
	StateDir       string
	PodUID         string
	PodName        string
	RestartCount   int
	MQTTBroker     string
	MQTTTopic      string
	MQTTQueueSize  int
	MQTTClientID   string

	// envErrs are environment defaults that did not parse, by flag.
	envErrs map[string]error
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// envParse reads an environment default with parse, keeping def when the
// variable is unset and recording an error naming the flag when it does
// not parse.
func envParse[T any](o *Options, flag, name string, def T, parse func(string) (T, error)) T {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	x, err := parse(v)
	if err != nil {
		if o.envErrs == nil {
			o.envErrs = map[string]error{}
		}
		o.envErrs[flag] = fmt.Errorf("--%s (from %s=%s): %v", flag, name, v, err)
		return def
	}
	return x
}

func parseInt64(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }

// envUnit is namespace/name from the pod's namespace and unit label.
func envUnit() string {
	ns, name := os.Getenv(holdfastv1.RuntimeEnvNamespace), os.Getenv(holdfastv1.RuntimeEnvUnitName)
	if ns == "" || name == "" {
		return ""
	}
	return ns + "/" + name
}

// NewFlagSet registers every flag of the reference runtime on a new set.
func NewFlagSet(o *Options) *flag.FlagSet {
	fs := flag.NewFlagSet("unit-runtime", flag.ContinueOnError)
	fs.BoolVar(&o.Version, "version", false, "print the version, the commit and the Go version of this build, and exit")
	fs.StringVar(&o.Unit, "unit", envUnit(), "the unit this runtime drives, namespace/name (env "+holdfastv1.RuntimeEnvNamespace+" and "+holdfastv1.RuntimeEnvUnitName+"); required")
	fs.Int64Var(&o.Epoch, "epoch", envParse(o, "epoch", holdfastv1.RuntimeEnvEpoch, 0, parseInt64), "the binding epoch this runtime was created for, at least 1 (env "+holdfastv1.RuntimeEnvEpoch+"); grants for any other epoch are refused with 409; required unless --warm")
	fs.BoolVar(&o.Warm, "warm", envParse(o, "warm", holdfastv1.RuntimeEnvWarmStandby, false, strconv.ParseBool), "start as a warm standby when no --epoch is given: devices connected and read, nothing written, bound to no epoch until the first grant from the authorised grantor for this unit binds it to that grant's epoch for good (Failover only). With an --epoch (a warm pod's container restarted after its promotion labelled it) the runtime is that epoch's (env "+holdfastv1.RuntimeEnvWarmStandby+")")
	fs.StringVar(&o.Mode, "mode", envOr(holdfastv1.RuntimeEnvMode, string(holdfastv1.Autonomy)), "availability mode: Failover (starts fenced, holds a control lease, holds then fences when renewals stop) or Autonomy (never fences) (env "+holdfastv1.RuntimeEnvMode+")")
	fs.DurationVar(&o.LeaseDuration, "lease-duration", envParse(o, "lease-duration", holdfastv1.RuntimeEnvLeaseDuration, 30*time.Second, time.ParseDuration), "the unit's lease duration, 10s..600s; sets the hold bound reported before the first grant (every grant carries its own duration) (env "+holdfastv1.RuntimeEnvLeaseDuration+")")
	fs.StringVar(&o.BindAddress, "bind-address", "", "address the lease, health and metrics endpoints listen on; empty means every interface")
	fs.IntVar(&o.LeasePort, "lease-port", envParse(o, "lease-port", holdfastv1.RuntimeEnvLeasePort, 9443, strconv.Atoi), "port of the control lease endpoint (POST/GET /v1/lease; the Unit's spec.runtime.leasePort) (env "+holdfastv1.RuntimeEnvLeasePort+")")
	fs.IntVar(&o.HealthPort, "health-port", envParse(o, "health-port", holdfastv1.RuntimeEnvHealthPort, 9440, strconv.Atoi), "port of the gRPC health server with the services "+holdfastv1.HealthServiceReadiness+" and "+holdfastv1.HealthServiceLiveness+" (the Unit's spec.runtime.healthPort) (env "+holdfastv1.RuntimeEnvHealthPort+")")
	fs.IntVar(&o.MetricsPort, "metrics-port", envParse(o, "metrics-port", holdfastv1.RuntimeEnvMetricsPort, 9441, strconv.Atoi), "port of the Prometheus /metrics endpoint; 0 disables it (the Unit's spec.runtime.metricsPort) (env "+holdfastv1.RuntimeEnvMetricsPort+")")
	fs.StringVar(&o.LeaseTLSDir, "lease-tls-dir", os.Getenv(holdfastv1.RuntimeEnvLeaseTLSDir), "directory of the lease endpoint's credentials, read again whenever they change: "+leaseapi.CredentialsFile+" (this runtime's private key, then its certificate chain) and "+leaseapi.TrustBundleFile+" (the lease CA bundle). The endpoint speaks mutual TLS (HTTP/2) and takes a grant only from a client certificate of that CA naming "+leaseapi.GrantorIdentity+"; a status read (GET) needs none. The runtime pod mounts them from the lease signer and a ClusterTrustBundle (env "+holdfastv1.RuntimeEnvLeaseTLSDir+"); required unless --insecure-plaintext-lease")
	fs.BoolVar(&o.Insecure, "insecure-plaintext-lease", envParse(o, "insecure-plaintext-lease", holdfastv1.RuntimeEnvInsecurePlaintextLease, false, strconv.ParseBool), "UNSAFE: serve the lease endpoint over plain HTTP and take grants from anyone who reaches the port. Any process on the network can then keep this runtime writing after the controller declared its lease expired, so two runtimes write at once. Only for a lab whose controller runs with --insecure-plaintext-lease too (env "+holdfastv1.RuntimeEnvInsecurePlaintextLease+")")
	fs.Var(&o.Devices, "device", "a field device, NAME=URL, repeatable: modbus://HOST:PORT[?unit=1&timeout=5s&epochRegister=N|none&probe=N] (Modbus TCP; epochRegister is the device's owner-epoch block, which carries the epoch on every write), opcua://HOST:PORT?node.REG=NODEID[&epochNode=NODEID&timeout=5s&policy=None|Basic256Sha256&mode=..&cert=FILE&key=FILE&user=NAME&passwordFile=FILE] (OPC UA; see runtime/driver/opcua) or sim://[?connectDelay=300ms] (in-process simulation)")
	fs.Var(&o.Outputs, "output", "an output, NAME=DEVICE:REGISTER[,step=N][,hold=V], repeatable: each scan commands its operating point plus step; at the lease deadline it is driven to hold=V (without hold it keeps its last value)")
	fs.Var(&o.Inputs, "input", "an input read every scan, NAME=DEVICE:REGISTER, repeatable")
	fs.DurationVar(&o.ScanInterval, "scan-interval", time.Second, "time between scans; liveness fails when no scan completes within max(60s, 10 scan intervals)")
	fs.DurationVar(&o.DriverGrace, "driver-grace", 60*time.Second, "readiness fails when every field driver has been gone longer than this")
	fs.DurationVar(&o.HealthInterval, "driver-health-interval", 5*time.Second, "how often a network driver that is down is dialled again")
	fs.StringVar(&o.StateDir, "state-dir", os.Getenv(holdfastv1.RuntimeEnvStateDir), "directory of the state file (operating point restored by a restart in place, start count); use a volume that lives as long as the pod (an emptyDir); empty keeps no state (env "+holdfastv1.RuntimeEnvStateDir+")")
	fs.StringVar(&o.PodUID, "pod-uid", os.Getenv(holdfastv1.RuntimeEnvPodUID), "the runtime pod's UID, half of the incarnation reported on every reply (env "+holdfastv1.RuntimeEnvPodUID+", from the downward API)")
	fs.StringVar(&o.PodName, "pod-name", os.Getenv(holdfastv1.RuntimeEnvPodName), "the runtime pod's name, for logs and the MQTT client ID (env "+holdfastv1.RuntimeEnvPodName+")")
	fs.IntVar(&o.RestartCount, "restart-count", -1, "the container's restart count, the other half of the incarnation; -1 counts this pod's starts in --state-dir (the kubelet's restart count when the state dir is the pod's emptyDir)")
	fs.StringVar(&o.MQTTBroker, "mqtt-broker", "", "MQTT broker for status and values, mqtt://HOST:PORT or tls://HOST:PORT; empty publishes nothing. Start-up never waits for it")
	fs.StringVar(&o.MQTTTopic, "mqtt-topic-prefix", telemetry.DefaultTopicPrefix, "topics are PREFIX/NAMESPACE/NAME/status (retained) and PREFIX/NAMESPACE/NAME/values")
	fs.IntVar(&o.MQTTQueueSize, "mqtt-queue-size", telemetry.DefaultQueueSize, "publishes kept, oldest evicted first, while the broker is away; 0 sends live and drops while away")
	fs.StringVar(&o.MQTTClientID, "mqtt-client-id", "", "MQTT client ID, one per runtime; empty derives one from the pod name, or from the unit and the epoch")
	return fs
}

// Usage prints the help text: the runtime's flags, then klog's.
func Usage(w io.Writer, fs, klogFlags *flag.FlagSet) {
	fmt.Fprint(w, `Usage: unit-runtime --unit NAMESPACE/NAME (--epoch N | --warm) [flags]

The reference holdfast unit runtime: drives one unit's field devices under
the control lease (docs/design.md §3). In Failover mode it starts fenced, is
granted by the holdfast grantor over POST /v1/lease (mutual TLS: only the
grantor's certificate from the lease CA is taken), dates its lease from
the acknowledged age each grant carries, and when renewals stop holds its
outputs for clamp(lease/2, 5s, 30s) and then fences: output writes stop,
reads go on, drivers stay connected. Start-up never waits on a broker or a
device dial.

Example:
  unit-runtime --unit plant/kiln-1 --epoch 3 --mode Failover \
    --lease-tls-dir /var/run/holdfast/lease-tls \
    --device coupler-1='modbus://10.10.20.51:502?epochRegister=9000' \
    --output counter=coupler-1:100,step=1 --output valve=coupler-1:101,hold=0 \
    --state-dir /var/lib/holdfast/kiln-1

Flags:
`)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprint(w, "\nLogging flags (klog):\n")
	klogFlags.SetOutput(w)
	klogFlags.PrintDefaults()
}

func newKlogFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	return fs
}

// Parse reads args into a runtime.Config; every problem is reported with
// its flag and reason.
func Parse(args []string, stderr io.Writer, log klog.Logger) (runtime.Config, *Options, error) {
	var o Options
	fs := NewFlagSet(&o)
	klogFlags := newKlogFlags()
	klogFlags.VisitAll(func(f *flag.Flag) {
		if fs.Lookup(f.Name) == nil {
			fs.Var(f.Value, f.Name, f.Usage)
		}
	})
	fs.SetOutput(io.Discard)
	fs.Usage = func() { Usage(stderr, NewFlagSet(&Options{}), newKlogFlags()) }
	if err := fs.Parse(args); err != nil {
		return runtime.Config{}, nil, err // the flag package printed the usage
	}
	if o.Version {
		return runtime.Config{}, &o, nil
	}
	fs.Visit(func(f *flag.Flag) { delete(o.envErrs, f.Name) }) // a flag given wins over its environment
	if fs.NArg() > 0 {
		return runtime.Config{}, nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg, err := o.Config(log)
	return cfg, &o, err
}

// Config turns the options into a runtime.Config.
func (o *Options) Config(log klog.Logger) (runtime.Config, error) {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(o.envErrs)) {
		errs = append(errs, o.envErrs[name])
	}
	bad := func(flag, value, reason string) {
		errs = append(errs, fmt.Errorf("--%s=%s: %s", flag, value, reason))
	}
	if o.Unit == "" {
		bad("unit", "", "must name the unit (namespace/name)")
	} else if ns, name, ok := strings.Cut(o.Unit, "/"); !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		bad("unit", o.Unit, "must be namespace/name")
	}
	warm := o.Warm && o.Epoch == 0
	if o.Epoch < 1 && !warm {
		bad("epoch", strconv.FormatInt(o.Epoch, 10), "must be at least 1 (or absent with --warm: a warm standby takes its epoch from its first grant)")
	}
	mode := holdfastv1.AvailabilityMode(o.Mode)
	if mode != holdfastv1.Failover && mode != holdfastv1.Autonomy {
		bad("mode", o.Mode, "must be Failover or Autonomy")
	} else if warm && mode != holdfastv1.Failover {
		bad("mode", o.Mode, "must be Failover with --warm: a warm standby waits for a lease, and an Autonomy runtime writes without one")
	}
	if warm && o.MQTTBroker != "" && o.MQTTClientID == "" && o.PodName == "" {
		bad("mqtt-client-id", "", "required with --warm and --mqtt-broker when --pod-name is empty: a warm standby has no epoch to make its own client ID from")
	}
	if o.LeaseDuration < holdfastv1.MinLeaseDuration || o.LeaseDuration > holdfastv1.MaxLeaseDuration {
		bad("lease-duration", o.LeaseDuration.String(), "must be between 10s and 600s")
	}
	for name, p := range map[string]int{"lease-port": o.LeasePort, "health-port": o.HealthPort} {
		if p < 0 || p > 65535 {
			bad(name, strconv.Itoa(p), "must be a port, 0..65535")
		}
	}
	if o.MetricsPort < 0 || o.MetricsPort > 65535 {
		bad("metrics-port", strconv.Itoa(o.MetricsPort), "must be a port, 0..65535 (0 disables)")
	}
	if o.LeasePort != 0 && (o.LeasePort == o.HealthPort || o.LeasePort == o.MetricsPort) || o.HealthPort != 0 && o.HealthPort == o.MetricsPort {
		bad("lease-port", strconv.Itoa(o.LeasePort), "the lease, health and metrics ports must differ")
	}
	switch {
	case o.LeaseTLSDir == "" && !o.Insecure:
		bad("lease-tls-dir", "", "required: the lease endpoint takes grants only over mutual TLS (the runtime pod sets "+holdfastv1.RuntimeEnvLeaseTLSDir+"); --insecure-plaintext-lease serves plain HTTP to anyone, unsafe")
	case o.LeaseTLSDir != "" && o.Insecure:
		bad("insecure-plaintext-lease", "true", "must not be given with --lease-tls-dir")
	}
	if o.ScanInterval <= 0 {
		bad("scan-interval", o.ScanInterval.String(), "must be positive")
	}
	if o.DriverGrace <= 0 {
		bad("driver-grace", o.DriverGrace.String(), "must be positive")
	}
	if o.HealthInterval <= 0 {
		bad("driver-health-interval", o.HealthInterval.String(), "must be positive")
	}
	if o.RestartCount < -1 {
		bad("restart-count", strconv.Itoa(o.RestartCount), "must be -1 (count starts) or a count")
	}
	if o.MQTTQueueSize < 0 {
		bad("mqtt-queue-size", strconv.Itoa(o.MQTTQueueSize), "must not be negative")
	}

	var drivers []driver.Driver
	devices := map[string]bool{}
	for _, spec := range o.Devices {
		name, raw, ok := strings.Cut(spec, "=")
		if !ok || name == "" {
			bad("device", spec, "must be NAME=URL")
			continue
		}
		if devices[name] {
			bad("device", spec, "duplicate device name")
			continue
		}
		d, err := newDriver(name, raw)
		if err != nil {
			bad("device", spec, err.Error())
			continue
		}
		devices[name] = true
		drivers = append(drivers, d)
	}
	var outputs []runtime.Output
	steps := map[string]uint16{}
	for _, spec := range o.Outputs {
		out, step, err := parseOutput(spec, devices)
		if err != nil {
			bad("output", spec, err.Error())
			continue
		}
		outputs = append(outputs, out)
		steps[out.Name] = step
	}
	var inputs []runtime.Input
	for _, spec := range o.Inputs {
		name, dev, reg, rest, err := parsePoint(spec, devices)
		if err == nil && rest != "" {
			err = errors.New("an input takes no options")
		}
		if err != nil {
			bad("input", spec, err.Error())
			continue
		}
		inputs = append(inputs, runtime.Input{Name: name, Device: dev, Register: reg})
	}

	var tel *telemetry.Client
	if o.MQTTBroker != "" {
		clientID := o.MQTTClientID
		switch {
		case clientID != "":
		case o.PodName != "":
			clientID = "holdfast-" + o.PodName
		default:
			// Every epoch's runtime subscribes to the unit's status topic
			// (runtime/telemetry); two sharing one client ID would take
			// each other's session over on every reconnect.
			clientID = fmt.Sprintf("holdfast-runtime-%s-e%d", strings.ReplaceAll(o.Unit, "/", "-"), o.Epoch)
		}
		var err error
		tel, err = telemetry.New(telemetry.Config{BrokerURL: o.MQTTBroker, Unit: o.Unit, TopicPrefix: o.MQTTTopic,
			QueueSize: o.MQTTQueueSize, ClientID: clientID}, log)
		if err != nil {
			bad("mqtt-broker", o.MQTTBroker, err.Error())
		}
	}
	if err := errors.Join(errs...); err != nil {
		return runtime.Config{}, err
	}

	restarts := int32(o.RestartCount)
	if o.RestartCount == -1 {
		restarts = 0
		if o.StateDir == "" {
			log.Info("Warning: neither --restart-count nor --state-dir is set, so every start reports restart count 0 and a container restarted in place cannot be told from the one before it; mount an emptyDir and pass --state-dir")
		} else {
			d, err := state.Open(o.StateDir)
			if err != nil {
				return runtime.Config{}, fmt.Errorf("--state-dir=%s: %w", o.StateDir, err)
			}
			if restarts, err = d.CountStart(o.PodUID); err != nil {
				return runtime.Config{}, fmt.Errorf("--state-dir=%s: counting starts: %w", o.StateDir, err)
			}
		}
	}
	host := o.BindAddress
	return runtime.Config{
		Lease: lease.Config{Unit: o.Unit, Epoch: o.Epoch, Warm: warm, Mode: mode, LeaseDuration: o.LeaseDuration,
			Incarnation: holdfastv1.RuntimeIncarnation{PodUID: o.PodUID, RestartCount: restarts}},
		LeaseAddr:              net.JoinHostPort(host, strconv.Itoa(o.LeasePort)),
		LeaseTLSDir:            o.LeaseTLSDir,
		InsecurePlaintextLease: o.Insecure,
		HealthAddr:             net.JoinHostPort(host, strconv.Itoa(o.HealthPort)),
		MetricsAddr:            metricsAddr(host, o.MetricsPort),
		Drivers:                drivers,
		Outputs:                outputs,
		Inputs:                 inputs,
		Program:                runtime.StepProgram(outputs, steps),
		ScanInterval:           o.ScanInterval,
		DriverGrace:            o.DriverGrace,
		HealthInterval:         o.HealthInterval,
		StateDir:               o.StateDir,
		Telemetry:              tel,
	}, nil
}

func metricsAddr(host string, port int) string {
	if port == 0 {
		return ""
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

func newDriver(name, raw string) (driver.Driver, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "modbus", "modbus+tcp":
		cfg, err := modbus.ParseURL(name, raw)
		if err != nil {
			return nil, err
		}
		return modbus.New(cfg), nil
	case "opcua":
		cfg, err := opcua.ParseURL(name, raw)
		if err != nil {
			return nil, err
		}
		return opcua.New(cfg), nil
	case "sim":
		var delay time.Duration
		for key, vals := range u.Query() {
			if key != "connectDelay" {
				return nil, fmt.Errorf("%s: unknown parameter (known: connectDelay)", key)
			}
			if delay, err = time.ParseDuration(vals[0]); err != nil || delay < 0 {
				return nil, fmt.Errorf("connectDelay: %q: must be a duration", vals[0])
			}
		}
		return simdriver.New(name, delay), nil
	default:
		return nil, fmt.Errorf("scheme %q: must be modbus, opcua or sim", u.Scheme)
	}
}

// parsePoint reads NAME=DEVICE:REGISTER[,options].
func parsePoint(spec string, devices map[string]bool) (name, dev string, reg uint16, rest string, err error) {
	name, target, ok := strings.Cut(spec, "=")
	if !ok || name == "" {
		return "", "", 0, "", errors.New("must be NAME=DEVICE:REGISTER")
	}
	target, rest, _ = strings.Cut(target, ",")
	dev, regText, ok := strings.Cut(target, ":")
	if !ok {
		return "", "", 0, "", errors.New("must be NAME=DEVICE:REGISTER")
	}
	if !devices[dev] {
		return "", "", 0, "", fmt.Errorf("device %q: no such --device", dev)
	}
	n, perr := strconv.ParseUint(regText, 10, 16)
	if perr != nil {
		return "", "", 0, "", fmt.Errorf("register %q: must be 0..65535", regText)
	}
	return name, dev, uint16(n), rest, nil
}

func parseOutput(spec string, devices map[string]bool) (runtime.Output, uint16, error) {
	name, dev, reg, rest, err := parsePoint(spec, devices)
	if err != nil {
		return runtime.Output{}, 0, err
	}
	out := runtime.Output{Name: name, Device: dev, Register: reg}
	var step uint16
	for _, opt := range strings.Split(rest, ",") {
		if opt == "" {
			continue
		}
		key, val, _ := strings.Cut(opt, "=")
		n, perr := strconv.ParseUint(val, 10, 16)
		if perr != nil {
			return runtime.Output{}, 0, fmt.Errorf("%s: %q: must be 0..65535", key, val)
		}
		switch key {
		case "step":
			step = uint16(n)
		case "hold":
			h := uint16(n)
			out.Hold = &h
		default:
			return runtime.Output{}, 0, fmt.Errorf("%s: unknown option (known: step, hold)", key)
		}
	}
	return out, step, nil
}

// Main runs the reference runtime until SIGTERM or SIGINT; it returns the
// process exit code.
func Main(args []string, stderr io.Writer) int {
	log := klog.Background()
	cfg, o, err := Parse(args, stderr, log)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "unit-runtime: %v\nRun unit-runtime --help for the flags.\n", err)
		return 2
	}
	if o.Version {
		version.Print(os.Stdout, "unit-runtime")
		return 0
	}
	defer klog.Flush()
	if o.PodName != "" {
		log = log.WithValues("pod", o.PodName)
	}
	if o.Warm && o.Epoch > 0 {
		log.Info("--warm given with an epoch: this runtime is that epoch's (a warm standby's container restarted after its promotion)", "epoch", o.Epoch)
	}
	rt, err := runtime.New(cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "unit-runtime: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := rt.Start(ctx); err != nil {
		log.Error(err, "Failed to start the unit runtime")
		return 1
	}
	<-ctx.Done()
	log.Info("Shutting down unit runtime")
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rt.Stop(shutdown)
	return 0
}
