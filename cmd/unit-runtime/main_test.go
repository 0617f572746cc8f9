package main_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/leasetls/leasetlstest"
	"github.com/holdfast-io/holdfast/runtime/runtimetest"
	"github.com/holdfast-io/holdfast/test/devicesim"
	"github.com/holdfast-io/holdfast/test/leasetest"
	"github.com/holdfast-io/holdfast/test/poll"
)

const (
	unit      = "plant/kiln-1"
	counter   = 100
	valve     = 101
	leaseTime = 10 * time.Second
)

// proc wraps a runtimetest.Process with the checks these tests make.
type proc struct {
	*runtimetest.Process
	t *testing.T
}

func startRuntime(t *testing.T, sim *devicesim.Sim, epoch int64) *proc {
	t.Helper()
	return startRuntimeIn(t, t.TempDir(), sim, epoch)
}

// startRuntimeIn runs the real binary with its state in dir.
func startRuntimeIn(t *testing.T, dir string, sim *devicesim.Sim, epoch int64) *proc {
	t.Helper()
	return startRuntimeAt(t, dir, sim, epoch, nil)
}

// startRuntimeWith runs it with lease credentials from ca.
func startRuntimeWith(t *testing.T, sim *devicesim.Sim, epoch int64, ca *leasetlstest.CA) *proc {
	t.Helper()
	return startRuntimeAt(t, t.TempDir(), sim, epoch, ca)
}

func startRuntimeAt(t *testing.T, dir string, sim *devicesim.Sim, epoch int64, ca *leasetlstest.CA) *proc {
	t.Helper()
	p := runtimetest.Start(t, runtimetest.Build(t), runtimetest.Options{
		Unit: unit, Epoch: epoch, LeaseDuration: leaseTime, StateDir: filepath.Join(dir, "state"), CA: ca,
		Devices: []string{"coupler-1=modbus://" + sim.Addr() + "?epochRegister=9000&timeout=1s"},
		Outputs: []string{fmt.Sprintf("counter=coupler-1:%d,step=1", counter), fmt.Sprintf("valve=coupler-1:%d,hold=0", valve)},
		Inputs:  []string{"level=coupler-1:200"},
	})
	return &proc{Process: p, t: t}
}

func (p *proc) status() (leaseapi.Status, error) { return p.Status() }

func (p *proc) probe(t *testing.T, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	s, err := p.Probe(service)
	if err != nil {
		t.Fatalf("probe %s: %v", service, err)
	}
	return s
}

func (p *proc) metric(t *testing.T, name string) string {
	t.Helper()
	v, err := p.Metric(name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, timeout, what, poll.True(cond))
}

// deadlineNoLaterThan reports whether p's deadline is at or before limit,
// on this machine's monotonic clock. The status's wall-clock Deadline is for
// people: a step of the wall clock between the grant and the read moves it.
// Each answer's arrival plus the remaining time it reports bounds the
// deadline from above (the runtime measured the remaining time before the
// answer arrived; milliseconds are truncated toward zero, hence the 1 ms), so
// the tightest of up to 50 answers is compared: a slow answer under load
// loosens one bound, never all.
func deadlineNoLaterThan(p *proc, limit time.Time) bool {
	p.t.Helper()
	var tightest time.Time
	for range 50 {
		s, err := p.status()
		arrived := time.Now()
		if err != nil || s.RemainingMillis == nil {
			p.t.Fatalf("status of the runtime of %s: %+v, %v; want the time remaining", unit, s, err)
		}
		bound := arrived.Add(time.Duration(*s.RemainingMillis+1) * time.Millisecond)
		if tightest.IsZero() || bound.Before(tightest) {
			tightest = bound
		}
		if !tightest.After(limit) {
			return true
		}
	}
	p.t.Logf("the runtime's deadline is at most %v (the tightest of 50 status answers), after %v", tightest, limit)
	return false
}

// grantor is the authorised grantor of p: a client certificate of the CA
// that issued p's lease credentials.
func grantor(p *proc, epoch int64) *leasetest.Grantor {
	return &leasetest.Grantor{URL: p.LeaseURL, Unit: unit, Epoch: epoch, Duration: leaseTime, Name: fmt.Sprintf("test-grantor-e%d", epoch),
		TLS: p.CA.Grantor(p.t)}
}

// post sends one raw grant to p's lease endpoint as the client holding cert
// (mutual TLS), and returns the status code and body.
func post(t *testing.T, p *proc, cert *tls.Certificate, body string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{*cert}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}}} //nolint:gosec // the test's own runtime
	resp, err := c.Post(p.LeaseURL, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func writesAt(sim *devicesim.Sim, epoch int64) []devicesim.Write {
	var out []devicesim.Write
	for _, w := range sim.Writes() {
		if w.Epoch == epoch {
			out = append(out, w)
		}
	}
	return out
}

// The real binary against the device simulator over TCP and a grantor over
// HTTP: renewals stop, the runtime holds for holdBound then fences, the
// device's log shows no write attempt after the fence, and a second runtime
// at a higher epoch adopts what the device holds and writes, with the two
// epochs never interleaved (L1, L3, L7, L10).
func TestRenewalsStopTheRuntimeHoldsThenFencesAndTheNextEpochTakesOver(t *testing.T) {
	sim, err := devicesim.Start(devicesim.Config{Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	sim.SetRegister(counter, 1000)
	sim.SetRegister(valve, 55)

	first := startRuntime(t, sim, 1)
	if s, _ := first.status(); s.State != leaseapi.Ungranted || !s.Fenced {
		t.Fatalf("a fresh Failover runtime reports %+v, want Ungranted and fenced", s)
	}
	if got := first.probe(t, holdfastv1.HealthServiceReadiness); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("readiness before the grant = %v", got)
	}
	ctx, stopRenewals := context.WithCancel(context.Background())
	g1 := grantor(first, 1)
	go g1.Run(ctx)
	eventually(t, 10*time.Second, "epoch 1 to write", func() bool { return len(writesAt(sim, 1)) >= 10 })
	if w := writesAt(sim, 1); w[0].Register != counter || w[0].Value != 1001 || w[1].Register != valve || w[1].Value != 55 {
		t.Fatalf("epoch 1's first writes %+v, want the adopted operating point (counter 1001, valve 55)", w[:2])
	}
	if r, _ := g1.Last(); r.Incarnation.PodUID != "uid-e1" || r.Incarnation.RestartCount != 0 || r.State != leaseapi.Held {
		t.Fatalf("reply %+v, want Held with incarnation uid-e1/0", r)
	}

	// Renewals stop.
	stopRenewals()
	lastAck, _ := g1.LastAck()
	var holding, fenced leaseapi.Status
	eventually(t, 2*leaseTime, "the runtime to hold", func() bool {
		holding, _ = first.status()
		return holding.State == leaseapi.Holding
	})
	eventually(t, 2*leaseTime, "the runtime to fence", func() bool {
		fenced, _ = first.status()
		return fenced.State == leaseapi.Fenced
	})
	fencedSeen := time.Now()
	hold := holdfastv1.HoldBound(leaseTime)
	if *holding.RemainingMillis > 0 || *holding.RemainingMillis <= -hold.Milliseconds() {
		t.Fatalf("Holding reported %dms from the deadline, want within the hold bound %v", *holding.RemainingMillis, hold)
	}
	if *fenced.RemainingMillis > -hold.Milliseconds() || !fenced.Fenced {
		t.Fatalf("Fenced reported %dms from the deadline, want at least the hold bound %v past it", *fenced.RemainingMillis, hold)
	}
	// L1: the runtime's deadline is no later than the grantor's Expired.
	if expired := lastAck.Add(leaseTime); !deadlineNoLaterThan(first, expired.Add(50*time.Millisecond)) {
		t.Fatalf("the runtime's deadline is after the grantor's Expired %v", expired)
	}
	if v := sim.Registers(valve, 1)[0]; v != 0 {
		t.Fatalf("valve = %d after the hold, want its hold value 0", v)
	}
	// Reads go on, writes do not, the process is alive and not ready.
	reads := sim.ReadsServed()
	eventually(t, 10*time.Second, "ten more reads by the fenced runtime", func() bool { return sim.ReadsServed() >= reads+10 })
	for _, w := range writesAt(sim, 1) {
		if w.Time.After(fencedSeen) {
			t.Fatalf("epoch 1 attempted a write after its fence was reported: %+v", w)
		}
	}
	if sim.ReadsServed() <= reads {
		t.Fatal("the fenced runtime stopped reading")
	}
	if got := first.probe(t, holdfastv1.HealthServiceLiveness); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("liveness of the fenced runtime = %v, want SERVING", got)
	}
	if got := first.probe(t, holdfastv1.HealthServiceReadiness); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("readiness of the fenced runtime = %v, want NOT_SERVING", got)
	}
	if got := first.metric(t, "holdfast_runtime_fenced"); got != "1" {
		t.Fatalf("holdfast_runtime_fenced = %q, want 1", got)
	}
	heldCounter := sim.Registers(counter, 1)[0]

	// The next binding takes over.
	second := startRuntime(t, sim, 2)
	ctx2, stop2 := context.WithCancel(context.Background())
	defer stop2()
	go grantor(second, 2).Run(ctx2)
	eventually(t, 10*time.Second, "epoch 2 to write", func() bool { return len(writesAt(sim, 2)) >= 10 })
	if w := writesAt(sim, 2); w[0].Register != counter || w[0].Value != heldCounter+1 || w[1].Register != valve || w[1].Value != 0 {
		t.Fatalf("epoch 2's first writes %+v, want the held operating point adopted (counter %d, valve 0)", w[:2], heldCounter+1)
	}
	// A grant for the old epoch reaching the new runtime is refused.
	if code, body := post(t, second, second.CA.GrantorCertificate(t),
		`{"unit":"plant/kiln-1","epoch":1,"durationMillis":10000,"ackAgeMillis":0,"grantor":"stale","seq":1}`); code != http.StatusConflict {
		t.Fatalf("a grant for epoch 1 at the epoch 2 runtime answered %d %s, want 409", code, body)
	}

	log := sim.Writes()
	if err := devicesim.CheckOneWriter(log); err != nil {
		t.Fatalf("two writers overlapped: %v", err)
	}
	last1, _ := devicesim.LastAttempt(log, 1)
	first2 := writesAt(sim, 2)[0].Time
	if !last1.Before(first2) {
		t.Fatalf("epoch 1's last attempt %v is not before epoch 2's first write %v", last1, first2)
	}
	t.Logf("epoch 1: %d writes, last at %v; fence reported by %v; epoch 2 first wrote at %v",
		len(writesAt(sim, 1)), last1.Format(time.StampMilli), fencedSeen.Format(time.StampMilli), first2.Format(time.StampMilli))
}

// A bad flag exits 2 naming the flag and the reason, and starts nothing.
func TestBadFlagsExitWithTheFlagAndTheReason(t *testing.T) {
	binary := runtimetest.Build(t)
	out, err := exec.Command(binary, "--unit", "kiln-1", "--epoch", "0", "--output", "x=nowhere:1").CombinedOutput()
	var ee *exec.ExitError
	if err == nil || !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("bad flags: exit %v, want 2\n%s", err, out)
	}
	for _, want := range []string{"--unit=kiln-1: must be namespace/name", "--epoch=0: must be at least 1", `--output=x=nowhere:1: device "nowhere": no such --device`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, err = exec.Command(binary, "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "-lease-port") {
		t.Fatalf("--help: %v\n%s", err, out)
	}
}

// L10 at process level: a container restarted in place (SIGKILL, same pod
// and state dir) reports a new incarnation, starts fenced, and once granted
// writes from the operating point it saved, not from what the device holds.
func TestARestartInPlaceRestoresItsStateAndReportsANewIncarnation(t *testing.T) {
	sim, err := devicesim.Start(devicesim.Config{Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	sim.SetRegister(counter, 40)
	dir := t.TempDir()
	p := startRuntimeIn(t, dir, sim, 3)
	ctx, stop := context.WithCancel(context.Background())
	go grantor(p, 3).Run(ctx)
	eventually(t, 10*time.Second, "epoch 3 to write", func() bool { return len(writesAt(sim, 3)) >= 6 })
	stop()
	p.Kill()
	b, err := os.ReadFile(filepath.Join(dir, "state", "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var snap struct {
		Epoch   int64             `json:"epoch"`
		Outputs map[string]uint16 `json:"outputs"`
	}
	if err := json.Unmarshal(b, &snap); err != nil || snap.Epoch != 3 {
		t.Fatalf("state file %s: %v", b, err)
	}
	sim.SetRegister(counter, 9000) // the device drifted; a restart in place must not adopt it
	before := len(writesAt(sim, 3))

	again := startRuntimeIn(t, dir, sim, 3)
	s, err := again.status()
	if err != nil || s.State != leaseapi.Ungranted || s.Incarnation.PodUID != "uid-e3" || s.Incarnation.RestartCount != 1 {
		t.Fatalf("restarted runtime reports %+v (%v), want Ungranted with incarnation uid-e3/1", s, err)
	}
	reads := sim.ReadsServed()
	eventually(t, 10*time.Second, "three reads by the ungranted runtime", func() bool { return sim.ReadsServed() >= reads+3 })
	if n := len(writesAt(sim, 3)); n != before {
		t.Fatalf("the restarted runtime wrote %d times before it was granted", n-before)
	}
	ctx2, stop2 := context.WithCancel(context.Background())
	defer stop2()
	go grantor(again, 3).Run(ctx2)
	eventually(t, 10*time.Second, "the restarted runtime to write", func() bool { return len(writesAt(sim, 3)) > before })
	if w := writesAt(sim, 3)[before]; w.Register != counter || w.Value != snap.Outputs["counter"]+1 {
		t.Fatalf("first write after the restart %+v, want counter %d (restored %d)", w, snap.Outputs["counter"]+1, snap.Outputs["counter"])
	}
}
