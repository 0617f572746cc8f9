// Package runtimetest builds and runs the real unit-runtime binary for
// tests in any package (the runtime's own process-level tests, the
// controller's, the e2e drills): Build compiles cmd/unit-runtime once per
// test process, Start runs it on loopback ports it picks and waits for the
// lease endpoint, and Process reads its status, probes and metrics.
package runtimetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	"github.com/holdfast-io/holdfast/internal/leasetls/leasetlstest"
	"github.com/holdfast-io/holdfast/test/ports"
	"github.com/holdfast-io/holdfast/test/proc"
)

const pkg = "github.com/holdfast-io/holdfast/cmd/unit-runtime"

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// Build compiles cmd/unit-runtime (through the build cache) into a
// temporary directory once per test process and returns its path.
func Build(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "unit-runtime-bin")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "unit-runtime")
		out, err := exec.Command("go", "build", "-o", binary, pkg).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// Options of one runtime process. Unset fields take the defaults noted.
type Options struct {
	Unit  string // required
	Epoch int64  // required
	// Warm runs a warm standby: --warm and no epoch. Epoch then names only
	// the binding its lease certificate is issued for, the one a grantor
	// checks before it grants.
	Warm          bool
	Mode          string        // default Failover
	LeaseDuration time.Duration // default 10s
	// Devices, Outputs and Inputs are the --device, --output and --input
	// values, e.g. "coupler-1=modbus://127.0.0.1:5020?epochRegister=9000".
	Devices, Outputs, Inputs []string
	ScanInterval             time.Duration // default 100ms
	// StateDir default: a new temporary directory.
	StateDir string
	PodUID   string // default "uid-e<epoch>"
	// CA issues the runtime's lease credentials (its --lease-tls-dir, as
	// the lease signer and the kubelet would); default: a new CA. A
	// grantor of the same CA (Process.CA.Grantor) is the authorised one.
	CA *leasetlstest.CA
	// InsecurePlaintextLease runs the runtime with
	// --insecure-plaintext-lease instead.
	InsecurePlaintextLease bool
	// Extra flags appended as given.
	Extra []string
}

// Process is a running unit-runtime.
type Process struct {
	Cmd *exec.Cmd
	// LeaseURL is https://127.0.0.1:PORT/v1/lease (http:// with
	// InsecurePlaintextLease).
	LeaseURL string
	// CA issued the runtime's lease credentials, in LeaseTLSDir (nil with
	// InsecurePlaintextLease).
	CA          *leasetlstest.CA
	LeaseTLSDir string
	LeasePort   int
	HealthAddr  string
	MetricsURL  string
	StateDir    string
	LogPath     string

	done chan struct{}
	err  error
}

// Args are the flags Start passes for o, the ports and the lease TLS
// directory (none with InsecurePlaintextLease).
func (o Options) Args(leasePort, healthPort, metricsPort int, leaseTLSDir string) []string {
	epoch := o.Epoch
	if o.Warm {
		epoch = 0
	}
	args := []string{
		"--unit", o.Unit, "--epoch", fmt.Sprint(epoch), "--mode", o.Mode,
		"--lease-duration", o.LeaseDuration.String(), "--bind-address", "127.0.0.1",
		"--lease-port", fmt.Sprint(leasePort), "--health-port", fmt.Sprint(healthPort), "--metrics-port", fmt.Sprint(metricsPort),
		"--scan-interval", o.ScanInterval.String(), "--driver-health-interval", "200ms",
		"--state-dir", o.StateDir, "--pod-uid", o.PodUID,
	}
	if o.Warm {
		args = append(args, "--warm")
	}
	if o.InsecurePlaintextLease {
		args = append(args, "--insecure-plaintext-lease")
	} else {
		args = append(args, "--lease-tls-dir", leaseTLSDir)
	}
	for _, d := range o.Devices {
		args = append(args, "--device", d)
	}
	for _, out := range o.Outputs {
		args = append(args, "--output", out)
	}
	for _, in := range o.Inputs {
		args = append(args, "--input", in)
	}
	return append(args, o.Extra...)
}

// Start runs the binary, waits until its lease endpoint answers, and stops
// it (SIGTERM, then SIGKILL after 10s) when the test ends; a failed test
// gets the runtime's log.
func Start(t testing.TB, bin string, o Options) *Process {
	t.Helper()
	if o.Mode == "" {
		o.Mode = "Failover"
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = 10 * time.Second
	}
	if o.ScanInterval == 0 {
		o.ScanInterval = 100 * time.Millisecond
	}
	if o.StateDir == "" {
		o.StateDir = t.TempDir()
	}
	if o.PodUID == "" {
		o.PodUID = fmt.Sprintf("uid-e%d", o.Epoch)
	}
	ps := ports.Free(t, 3)
	logDir := t.TempDir()
	scheme := "http"
	if !o.InsecurePlaintextLease {
		scheme = "https"
		if o.CA == nil {
			o.CA = leasetlstest.NewCA(t, "runtimetest-lease-ca")
		}
	}
	p := &Process{
		LeaseURL:   fmt.Sprintf("%s://127.0.0.1:%d%s", scheme, ps[0], leaseapi.Path),
		CA:         o.CA,
		LeasePort:  ps[0],
		HealthAddr: fmt.Sprintf("127.0.0.1:%d", ps[1]),
		MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", ps[2]),
		StateDir:   o.StateDir,
		LogPath:    filepath.Join(logDir, "unit-runtime.log"),
		done:       make(chan struct{}),
	}
	logf, err := os.Create(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if p.CA != nil {
		p.LeaseTLSDir = p.CA.RuntimeDir(t, o.Unit, o.Epoch)
	}
	p.Cmd = exec.Command(bin, o.Args(ps[0], ps[1], ps[2], p.LeaseTLSDir)...)
	p.Cmd.Stdout, p.Cmd.Stderr = logf, logf
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.Cmd.Wait(); logf.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.Stop(10 * time.Second)
		if t.Failed() {
			b, _ := os.ReadFile(p.LogPath)
			t.Logf("unit-runtime %s epoch %d log:\n%s", o.Unit, o.Epoch, b)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := p.listening()
		if err == nil {
			return p
		}
		select {
		case <-p.done:
			b, _ := os.ReadFile(p.LogPath)
			t.Fatalf("unit-runtime exited before its endpoints answered (%v): %v\n%s", err, p.err, b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("unit-runtime's endpoints did not all answer within 10s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// listening reports the first of the lease, health and metrics endpoints
// that does not answer yet. The runtime opens them one after another and
// the lease endpoint serves as soon as it is open, so its answer alone does
// not say the other two are.
func (p *Process) listening() error {
	if _, err := p.Status(); err != nil {
		return err
	}
	for _, addr := range []string{p.HealthAddr, strings.TrimSuffix(strings.TrimPrefix(p.MetricsURL, "http://"), "/metrics")} {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		c.Close()
	}
	return nil
}

// Stop sends SIGTERM and waits up to grace before SIGKILL.
func (p *Process) Stop(grace time.Duration) error {
	proc.Stop(p.Cmd.Process, p.done, grace)
	return p.err
}

// Kill ends the process with SIGKILL (a crash) and waits for it.
func (p *Process) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.done
}

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Status is GET /v1/lease, in plain HTTP as the node plugin's watchdog
// reads it (a status read grants nothing and needs no certificate).
func (p *Process) Status() (leaseapi.Status, error) {
	var s leaseapi.Status
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + strings.TrimPrefix(strings.TrimPrefix(p.LeaseURL, "https://"), "http://"))
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// Probe asks the gRPC health service (holdfast.readiness or
// holdfast.liveness) what the kubelet would.
func (p *Process) Probe(service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	conn, err := grpc.NewClient(p.HealthAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return 0, err
	}
	return resp.Status, nil
}

// Metric returns the value of an unlabelled metric line (or the line with
// the given labels, e.g. `holdfast_runtime_lease_state{state="Held"}`), or
// "" when absent.
func (p *Process) Metric(name string) (string, error) {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(p.MetricsURL)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+" ") {
			return strings.TrimPrefix(line, name+" "), nil
		}
	}
	return "", nil
}
