package app

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/runtime/driver/opcua"
)

func TestHelpDocumentsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	_, _, err := Parse([]string{"--help"}, &out, ktesting.NewLogger(t, ktesting.NewConfig()))
	if err != flag.ErrHelp {
		t.Fatalf("--help = %v, want flag.ErrHelp", err)
	}
	help := out.String()
	var o Options
	n := 0
	NewFlagSet(&o).VisitAll(func(f *flag.Flag) {
		n++
		if len(f.Usage) < 20 {
			t.Errorf("--%s has no real description: %q", f.Name, f.Usage)
		}
		if !strings.Contains(help, "-"+f.Name+" ") && !strings.Contains(help, "-"+f.Name+"\n") {
			t.Errorf("--help does not document --%s", f.Name)
		}
	})
	newKlogFlags().VisitAll(func(f *flag.Flag) {
		if !strings.Contains(help, "-"+f.Name) {
			t.Errorf("--help does not document the klog flag -%s", f.Name)
		}
	})
	for _, name := range []string{"unit", "epoch", "mode", "lease-port", "health-port", "device", "state-dir", "pod-uid", "restart-count"} {
		if NewFlagSet(&o).Lookup(name) == nil {
			t.Errorf("no --%s flag", name)
		}
	}
	if n < 20 {
		t.Fatalf("only %d flags visited", n)
	}
}

func TestBadFlagsNameTheFlagAndTheReason(t *testing.T) {
	_, _, err := Parse([]string{
		"--unit", "a/b/c", "--epoch", "-1", "--mode", "Hot", "--lease-duration", "5s",
		"--lease-port", "9440", "--health-port", "9440", "--lease-tls-dir", "/run/lease", "--insecure-plaintext-lease",
		"--device", "c1=modbus://127.0.0.1:502?unit=300", "--device", "c2=ftp://x:1", "--device", "nameless",
		"--device", "c3=sim://", "--device", "v1=opcua://127.0.0.1:4840?node.1=ns=2;s=V&colour=blue", "--output", "o=c9:1", "--output", "p=c3:70000", "--output", "q=c3:1,ramp=2", "--input", "i=c3:1,step=1",
		"--scan-interval", "0s", "--mqtt-queue-size", "-1", "--restart-count", "-2",
	}, &bytes.Buffer{}, ktesting.NewLogger(t, ktesting.NewConfig()))
	if err == nil {
		t.Fatal("bad flags were accepted")
	}
	for _, want := range []string{
		"--unit=a/b/c: must be namespace/name",
		"--epoch=-1: must be at least 1",
		"--mode=Hot: must be Failover or Autonomy",
		"--lease-duration=5s: must be between 10s and 600s",
		"--lease-port=9440: the lease, health and metrics ports must differ",
		"--insecure-plaintext-lease=true: must not be given with --lease-tls-dir",
		"--device=c1=modbus://127.0.0.1:502?unit=300: device c1: unit:",
		`--device=c2=ftp://x:1: scheme "ftp": must be modbus, opcua or sim`,
		"--device=nameless: must be NAME=URL",
		"--device=v1=opcua://127.0.0.1:4840?node.1=ns=2;s=V&colour=blue: device v1: colour: unknown parameter",
		`--output=o=c9:1: device "c9": no such --device`,
		`--output=p=c3:70000: register "70000": must be 0..65535`,
		"--output=q=c3:1,ramp=2: ramp: unknown option",
		"--input=i=c3:1,step=1: an input takes no options",
		"--scan-interval=0s: must be positive",
		"--mqtt-queue-size=-1: must not be negative",
		"--restart-count=-2: must be -1",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestFlagsBuildTheConfig(t *testing.T) {
	t.Setenv(holdfastv1.RuntimeEnvPodUID, "uid-7")
	dir := t.TempDir()
	args := []string{"--unit", "plant/kiln-1", "--epoch", "4", "--mode", "Failover", "--bind-address", "127.0.0.1",
		"--device", "c1=modbus://127.0.0.1:5020?epochRegister=9000", "--device", "s=sim://?connectDelay=300ms",
		"--output", "counter=c1:100,step=2", "--output", "valve=c1:101,hold=7", "--input", "level=s:3", "--state-dir", dir,
		"--lease-tls-dir", "/run/lease"}
	for want := int32(0); want < 3; want++ {
		cfg, o, err := Parse(args, &bytes.Buffer{}, ktesting.NewLogger(t, ktesting.NewConfig()))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Lease.Incarnation.PodUID != "uid-7" || cfg.Lease.Incarnation.RestartCount != want {
			t.Fatalf("start %d: incarnation %+v, want uid-7/%d counted in the state dir", want, cfg.Lease.Incarnation, want)
		}
		if cfg.Lease.Mode != holdfastv1.Failover || cfg.Lease.Epoch != 4 || cfg.LeaseAddr != "127.0.0.1:9443" ||
			cfg.HealthAddr != "127.0.0.1:9440" || cfg.MetricsAddr != "127.0.0.1:9441" || len(cfg.Drivers) != 2 ||
			len(cfg.Outputs) != 2 || *cfg.Outputs[1].Hold != 7 || cfg.Outputs[0].Hold != nil || len(cfg.Inputs) != 1 || o.Unit != "plant/kiln-1" ||
			cfg.LeaseTLSDir != "/run/lease" || cfg.InsecurePlaintextLease {
			t.Fatalf("config %+v", cfg)
		}
		next := cfg.Program.Scan(map[string]uint16{"counter": 10, "valve": 3}, nil)
		if next["counter"] != 12 || next["valve"] != 3 {
			t.Fatalf("program step = %v", next)
		}
	}
	t.Setenv(holdfastv1.RuntimeEnvPodUID, "uid-8")
	cfg, _, err := Parse(args, &bytes.Buffer{}, ktesting.NewLogger(t, ktesting.NewConfig()))
	if err != nil || cfg.Lease.Incarnation.RestartCount != 0 {
		t.Fatalf("a new pod in an old state dir: %+v %v, want restart count 0", cfg.Lease.Incarnation, err)
	}
}

// Every epoch's runtime subscribes to the unit's status topic, so two
// epochs never share an MQTT client ID, even without a pod name.
func TestEachEpochHasItsOwnMQTTClientID(t *testing.T) {
	ids := map[string]bool{}
	for _, extra := range [][]string{{"--epoch", "1"}, {"--epoch", "2"}, {"--epoch", "2", "--pod-name", "kiln-1-runtime-e2"}} {
		args := append([]string{"--unit", "plant/kiln-1", "--mqtt-broker", "mqtt://127.0.0.1:1883", "--lease-tls-dir", "/run/lease"}, extra...)
		cfg, _, err := Parse(args, &bytes.Buffer{}, ktesting.NewLogger(t, ktesting.NewConfig()))
		if err != nil {
			t.Fatal(err)
		}
		ids[cfg.Telemetry.ClientID()] = true
	}
	for _, want := range []string{"holdfast-runtime-plant-kiln-1-e1", "holdfast-runtime-plant-kiln-1-e2", "holdfast-kiln-1-runtime-e2"} {
		if !ids[want] {
			t.Errorf("client IDs %v, want %s among them", ids, want)
		}
	}
}

// The controller's runtime pod passes the binding through the environment
// (api/v1alpha1 RuntimeEnv*); with no flags at all the runtime takes it
// from there, and a value that does not parse is refused naming both.
func TestTheRuntimePodsEnvironmentIsTheDefault(t *testing.T) {
	for k, v := range map[string]string{
		holdfastv1.RuntimeEnvNamespace: "plant", holdfastv1.RuntimeEnvUnitName: "kiln-1", holdfastv1.RuntimeEnvEpoch: "12",
		holdfastv1.RuntimeEnvMode: "Failover", holdfastv1.RuntimeEnvLeaseDuration: "45s", holdfastv1.RuntimeEnvLeasePort: "19443",
		holdfastv1.RuntimeEnvHealthPort: "19440", holdfastv1.RuntimeEnvPodUID: "uid-9", holdfastv1.RuntimeEnvPodName: "kiln-1-runtime-e12",
		holdfastv1.RuntimeEnvStateDir: t.TempDir(), holdfastv1.RuntimeEnvMetricsPort: "19441",
		holdfastv1.RuntimeEnvLeaseTLSDir: "/var/run/holdfast/lease-tls",
	} {
		t.Setenv(k, v)
	}
	cfg, o, err := Parse([]string{"--restart-count", "2"}, &bytes.Buffer{}, ktesting.NewLogger(t, ktesting.NewConfig()))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.StateDir != os.Getenv(holdfastv1.RuntimeEnvStateDir) {
		t.Fatalf("state dir %q, want the environment's", cfg.StateDir)
	}
	if cfg.Lease.Unit != "plant/kiln-1" || cfg.Lease.Epoch != 12 || cfg.Lease.Mode != holdfastv1.Failover ||
		cfg.Lease.LeaseDuration.String() != "45s" || cfg.LeaseAddr != ":19443" || cfg.HealthAddr != ":19440" || cfg.MetricsAddr != ":19441" ||
		cfg.Lease.Incarnation.PodUID != "uid-9" || cfg.Lease.Incarnation.RestartCount != 2 || o.PodName != "kiln-1-runtime-e12" ||
		cfg.LeaseTLSDir != "/var/run/holdfast/lease-tls" {
		t.Fatalf("config from the environment: %+v", cfg.Lease)
	}
	t.Setenv(holdfastv1.RuntimeEnvLeaseDuration, "thirty")
	t.Setenv(holdfastv1.RuntimeEnvEpoch, "twelve")
	_, _, err = Parse(nil, &bytes.Buffer{}, ktesting.NewLogger(t, ktesting.NewConfig()))
	for _, want := range []string{"--lease-duration (from HOLDFAST_LEASE_DURATION=thirty)", "--epoch (from HOLDFAST_EPOCH=twelve)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to name %q", err, want)
		}
	}
	// A flag still wins over the environment, even one that does not parse.
	t.Setenv(holdfastv1.RuntimeEnvLeaseDuration, "45s")
	cfg, _, err = Parse([]string{"--epoch", "13"}, &bytes.Buffer{}, ktesting.NewLogger(t, ktesting.NewConfig()))
	if err != nil || cfg.Lease.Epoch != 13 {
		t.Fatalf("--epoch 13 over the environment's 12: %v %v", cfg.Lease.Epoch, err)
	}
}

// L12: the lease endpoint is mutual TLS unless the unsafe flag says
// otherwise; without either the runtime does not start, and says which flag
// and why.
func TestTheLeaseChannelIsMutualTLSUnlessSaidUnsafe(t *testing.T) {
	log := ktesting.NewLogger(t, ktesting.NewConfig())
	base := []string{"--unit", "plant/kiln-1", "--epoch", "1", "--restart-count", "0"}
	_, _, err := Parse(base, &bytes.Buffer{}, log)
	if err == nil || !strings.Contains(err.Error(), "--lease-tls-dir=: required") || !strings.Contains(err.Error(), holdfastv1.RuntimeEnvLeaseTLSDir) ||
		!strings.Contains(err.Error(), "--insecure-plaintext-lease") {
		t.Fatalf("no lease credentials: %v, want --lease-tls-dir required, naming the environment and the unsafe way", err)
	}
	cfg, _, err := Parse(append(base, "--insecure-plaintext-lease"), &bytes.Buffer{}, log)
	if err != nil || !cfg.InsecurePlaintextLease || cfg.LeaseTLSDir != "" {
		t.Fatalf("--insecure-plaintext-lease: %+v %v", cfg, err)
	}
	t.Setenv(holdfastv1.RuntimeEnvInsecurePlaintextLease, "true")
	if cfg, _, err = Parse(base, &bytes.Buffer{}, log); err != nil || !cfg.InsecurePlaintextLease {
		t.Fatalf("%s=true: %+v %v", holdfastv1.RuntimeEnvInsecurePlaintextLease, cfg, err)
	}
	t.Setenv(holdfastv1.RuntimeEnvInsecurePlaintextLease, "yes please")
	if _, _, err = Parse(base, &bytes.Buffer{}, log); err == nil || !strings.Contains(err.Error(), "--insecure-plaintext-lease (from "+holdfastv1.RuntimeEnvInsecurePlaintextLease) {
		t.Fatalf("an unparseable %s: %v", holdfastv1.RuntimeEnvInsecurePlaintextLease, err)
	}
	var help bytes.Buffer
	_, _, _ = Parse([]string{"--help"}, &help, log)
	if !strings.Contains(help.String(), "UNSAFE") {
		t.Fatalf("--help does not say --insecure-plaintext-lease is unsafe:\n%s", help.String())
	}
}

// An opcua:// device builds the OPC UA driver with the URL's nodes and
// owner-epoch node; the outputs and inputs name its registers.
func TestTheOPCUADeviceFlagBuildsTheOPCUADriver(t *testing.T) {
	cfg, _, err := Parse([]string{"--unit", "plant/kiln-1", "--epoch", "2", "--lease-tls-dir", "/run/lease",
		"--device", "valve-1=opcua://127.0.0.1:4840?node.100=ns=2;s=Counter&node.101=ns=2;s=Valve&epochNode=ns=2;s=OwnerEpoch&timeout=2s",
		"--output", "counter=valve-1:100,step=1", "--output", "valve=valve-1:101,hold=0"},
		&bytes.Buffer{}, ktesting.NewLogger(t, ktesting.NewConfig()))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Drivers) != 1 || cfg.Drivers[0].Name() != "valve-1" {
		t.Fatalf("drivers %v, want valve-1", cfg.Drivers)
	}
	if _, ok := cfg.Drivers[0].(*opcua.Driver); !ok {
		t.Fatalf("driver %T, want the OPC UA driver", cfg.Drivers[0])
	}
	if len(cfg.Outputs) != 2 || cfg.Outputs[1].Register != 101 || *cfg.Outputs[1].Hold != 0 {
		t.Fatalf("outputs %+v", cfg.Outputs)
	}
}

// A warm standby's pod sets HOLDFAST_WARM_STANDBY and, until its promotion
// labels it, an empty HOLDFAST_EPOCH: the runtime starts bound to no epoch.
// Once labelled, a restarted container is that epoch's runtime. --warm is
// Failover only, and with telemetry needs a client ID it can call its own.
func TestWarmStartsBoundToNoEpochUntilThePodHasOne(t *testing.T) {
	log := ktesting.NewLogger(t, ktesting.NewConfig())
	t.Setenv(holdfastv1.RuntimeEnvWarmStandby, "true")
	t.Setenv(holdfastv1.RuntimeEnvEpoch, "")
	t.Setenv(holdfastv1.RuntimeEnvMode, "Failover")
	base := []string{"--unit", "plant/kiln-1", "--restart-count", "0", "--lease-tls-dir", "/var/run/holdfast/lease-tls"}
	cfg, _, err := Parse(base, &bytes.Buffer{}, log)
	if err != nil || !cfg.Lease.Warm || cfg.Lease.Epoch != 0 {
		t.Fatalf("a warm pod before its promotion: warm %v epoch %d, %v; want warm at no epoch", cfg.Lease.Warm, cfg.Lease.Epoch, err)
	}
	t.Setenv(holdfastv1.RuntimeEnvEpoch, "4")
	if cfg, _, err = Parse(base, &bytes.Buffer{}, log); err != nil || cfg.Lease.Warm || cfg.Lease.Epoch != 4 {
		t.Fatalf("a warm pod labelled epoch 4: warm %v epoch %d, %v; want the runtime of epoch 4", cfg.Lease.Warm, cfg.Lease.Epoch, err)
	}
	t.Setenv(holdfastv1.RuntimeEnvEpoch, "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mode", "Autonomy"}, "--mode=Autonomy: must be Failover with --warm"},
		{[]string{"--mqtt-broker", "mqtt://127.0.0.1:1883"}, "--mqtt-client-id=: required with --warm"},
		{[]string{"--warm=false"}, "--epoch=0: must be at least 1 (or absent with --warm"},
	} {
		if _, _, err := Parse(append(base, tc.args...), &bytes.Buffer{}, log); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	if cfg, _, err = Parse(append(base, "--mqtt-broker", "mqtt://127.0.0.1:1883", "--pod-name", "kiln-1-runtime-warm-a"), &bytes.Buffer{}, log); err != nil || !cfg.Lease.Warm {
		t.Fatalf("a warm pod with a pod name and a broker: %v", err)
	}
}
