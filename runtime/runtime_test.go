package runtime_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/leasetls/leasetlstest"
	"github.com/holdfast-io/holdfast/runtime"
	"github.com/holdfast-io/holdfast/runtime/driver"
	"github.com/holdfast-io/holdfast/runtime/driver/modbus"
	"github.com/holdfast-io/holdfast/runtime/internal/testutil"
	"github.com/holdfast-io/holdfast/runtime/lease"
	"github.com/holdfast-io/holdfast/runtime/state"
	"github.com/holdfast-io/holdfast/test/devicesim"
)

const (
	unit        = "plant/kiln-1"
	counterReg  = 100
	valveReg    = 101
	inputReg    = 200
	scanEvery   = time.Second
	leaseLength = 10 * time.Second
)

var t0 = time.Date(2026, 8, 24, 12, 0, 0, 0, time.UTC)

type fixture struct {
	rt    *runtime.Runtime
	sim   *devicesim.Sim
	clock *testingclock.FakeClock
	url   string
}

type opts struct {
	epoch    int64
	mode     holdfastv1.AvailabilityMode
	stateDir string
	sim      *devicesim.Sim
	clock    *testingclock.FakeClock
	program  runtime.Program
}

func modbusDriver(t testing.TB, name, addr string, timeout time.Duration) driver.Driver {
	t.Helper()
	cfg, err := modbus.ParseURL(name, "modbus://"+addr+"?epochRegister=9000&timeout="+timeout.String())
	if err != nil {
		t.Fatal(err)
	}
	return modbus.New(cfg)
}

// start runs a runtime on the fake clock against a device simulator over
// TCP: a counter output stepping by one and a valve output with a hold
// value of 0, and one input.
func start(t *testing.T, o opts) *fixture {
	t.Helper()
	if o.epoch == 0 {
		o.epoch = 1
	}
	if o.mode == "" {
		o.mode = holdfastv1.Failover
	}
	if o.sim == nil {
		sim, err := devicesim.Start(devicesim.Config{Address: "127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sim.Close() })
		o.sim = sim
	}
	if o.clock == nil {
		o.clock = testingclock.NewFakeClock(t0)
	}
	zero := uint16(0)
	outputs := []runtime.Output{
		{Name: "counter", Device: "coupler-1", Register: counterReg},
		{Name: "valve", Device: "coupler-1", Register: valveReg, Hold: &zero},
	}
	if o.program == nil {
		o.program = runtime.StepProgram(outputs, map[string]uint16{"counter": 1})
	}
	rt, err := runtime.New(runtime.Config{
		Lease: lease.Config{Unit: unit, Epoch: o.epoch, Mode: o.mode, LeaseDuration: leaseLength, Clock: o.clock,
			Incarnation: holdfastv1.RuntimeIncarnation{PodUID: "uid-" + t.Name(), RestartCount: 0}},
		LeaseAddr: "127.0.0.1:0", LeaseTLSDir: leaseTLSDir(t, o.epoch), HealthAddr: "127.0.0.1:0",
		Drivers:      []driver.Driver{modbusDriver(t, "coupler-1", o.sim.Addr(), 2*time.Second)},
		Outputs:      outputs,
		Inputs:       []runtime.Input{{Name: "level", Device: "coupler-1", Register: inputReg}},
		Program:      o.program,
		ScanInterval: scanEvery,
		StateDir:     o.stateDir,
	}, ktesting.NewLogger(t, ktesting.NewConfig()))
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Stop(context.Background()) })
	return &fixture{rt: rt, sim: o.sim, clock: o.clock, url: "https://" + rt.LeaseAddr() + leaseapi.Path}
}

var seq uint64

// testCA is the lease CA of this package's runtimes and their grantor.
func testCA(t testing.TB) *leasetlstest.CA { return leasetlstest.Shared(t) }

// leaseTLSDir is the lease credentials directory of the runtime of unit at
// epoch, as its pod mounts it.
func leaseTLSDir(t testing.TB, epoch int64) string { return testCA(t).RuntimeDir(t, unit, epoch) }

// grantorClient speaks to a runtime's lease endpoint as the grantor does:
// mutual TLS, HTTP/2, the runtime's certificate not judged here.
func grantorClient(t testing.TB) *http.Client {
	cert := testCA(t).GrantorCertificate(t)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{*cert}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}}} //nolint:gosec // the test's own server
}

// grantHTTP POSTs grants as the grantor does, the last one carrying the
// acknowledged age given and the anchor of the reply before it (fetched
// first by a grant that carries none), and returns the last reply.
func grantHTTP(t *testing.T, url string, epoch int64, ackAge time.Duration) leaseapi.Reply {
	t.Helper()
	first := postGrant(t, url, leaseapi.Grant{Unit: unit, Epoch: epoch, DurationMillis: leaseLength.Milliseconds()})
	ms := ackAge.Milliseconds()
	return postGrant(t, url, leaseapi.Grant{Unit: unit, Epoch: epoch, DurationMillis: leaseLength.Milliseconds(), AckAgeMillis: &ms,
		Anchor: first.Anchor})
}

func postGrant(t *testing.T, url string, g leaseapi.Grant) leaseapi.Reply {
	t.Helper()
	seq++
	g.Grantor, g.Seq = "test-grantor", seq
	return testutil.PostGrant(t, grantorClient(t), url, g)
}

func (f *fixture) writesAt(epoch int64) []devicesim.Write {
	var out []devicesim.Write
	for _, w := range f.sim.Writes() {
		if w.Epoch == epoch {
			out = append(out, w)
		}
	}
	return out
}

// tick moves the fake clock one scan and waits for the scan to run.
func (f *fixture) tick(t *testing.T) {
	t.Helper()
	before := f.sim.ReadsServed()
	f.clock.Step(scanEvery)
	testutil.Eventually(t, 5*time.Second, "a scan to read the device", func() bool { return f.sim.ReadsServed() > before })
}

// L3: at the deadline the runtime drives the outputs to their hold values,
// for holdBound; then every write stops and reads go on.
func TestHoldThenFence_WritesStopAndReadsContinue(t *testing.T) {
	f := start(t, opts{})
	f.sim.SetRegister(counterReg, 10)
	f.sim.SetRegister(valveReg, 70)
	if r := grantHTTP(t, f.url, 1, 0); r.State != leaseapi.Held {
		t.Fatalf("grant answered %+v", r)
	}
	f.tick(t)
	testutil.Eventually(t, 5*time.Second, "control writes", func() bool { return f.sim.Registers(counterReg, 1)[0] >= 11 })
	if v := f.sim.Registers(valveReg, 1)[0]; v != 70 {
		t.Fatalf("valve = %d, want the adopted 70", v)
	}

	// Past the deadline: the hold value goes out, the counter stops.
	f.clock.Step(leaseLength)
	testutil.Eventually(t, 5*time.Second, "the hold value", func() bool { return f.sim.Registers(valveReg, 1)[0] == 0 })
	if s := f.rt.Keeper().State(); s != leaseapi.Holding {
		t.Fatalf("state %s at the deadline, want Holding", s)
	}
	counterAtHold := f.sim.Registers(counterReg, 1)[0]
	f.tick(t)
	if v := f.sim.Registers(counterReg, 1)[0]; v != counterAtHold {
		t.Fatalf("counter moved from %d to %d during the hold", counterAtHold, v)
	}

	// Past the hold bound: fenced; reads go on, nothing is written.
	f.clock.Step(holdfastv1.HoldBound(leaseLength))
	testutil.Eventually(t, 5*time.Second, "the fence", func() bool { return f.rt.Keeper().State() == leaseapi.Fenced })
	writes := len(f.sim.Writes())
	reads := f.sim.ReadsServed()
	for range 3 {
		f.tick(t)
	}
	if got := f.sim.Writes(); len(got) != writes {
		t.Fatalf("%d writes reached the device after the fence: %+v", len(got)-writes, got[writes:])
	}
	if f.sim.ReadsServed() <= reads {
		t.Fatal("reads stopped with the fence")
	}
	if err := f.rt.WriteOutput(context.Background(), "valve", 5); !errors.Is(err, lease.ErrFenced) {
		t.Fatalf("a write through the guarded path while fenced = %v, want ErrFenced", err)
	}
	if got := f.sim.Writes(); len(got) != writes {
		t.Fatalf("the guarded path let a write through while fenced: %+v", got[writes:])
	}
	if !f.rt.Driver("coupler-1").(*driver.Reconnecting).Connected() {
		t.Fatal("the fence disconnected the driver")
	}

	// A later grant for the same epoch un-fences; the operating point is
	// read again before the next control write.
	f.sim.SetRegister(counterReg, 300)
	grantHTTP(t, f.url, 1, 0)
	f.tick(t)
	testutil.Eventually(t, 5*time.Second, "writes after the new grant", func() bool { return len(f.sim.Writes()) > writes })
	if w := f.sim.Writes()[writes]; w.Register != counterReg || w.Value != 301 {
		t.Fatalf("first write after the new grant %+v, want counter 301 (re-adopted 300)", w)
	}
}

// L7: the device refuses a runtime whose epoch is behind, and the one-writer
// check over its log holds.
func TestAStaleEpochIsRefusedAtTheDevice(t *testing.T) {
	sim, err := devicesim.Start(devicesim.Config{Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	clk := testingclock.NewFakeClock(t0)
	old := start(t, opts{epoch: 1, mode: holdfastv1.Autonomy, sim: sim, clock: clk})
	old.tick(t)
	testutil.Eventually(t, 5*time.Second, "epoch 1 writes", func() bool { return len(old.writesAt(1)) > 0 })
	newer := start(t, opts{epoch: 2, mode: holdfastv1.Autonomy, sim: sim, clock: clk})
	newer.tick(t)
	testutil.Eventually(t, 5*time.Second, "epoch 2 writes", func() bool { return len(newer.writesAt(2)) > 0 })
	old.tick(t)
	testutil.Eventually(t, 5*time.Second, "epoch 1 refused", func() bool {
		for _, w := range sim.Writes() {
			if w.Epoch == 1 && !w.Accepted {
				return true
			}
		}
		return false
	})
	if err := devicesim.CheckOneWriter(sim.Writes()); err != nil {
		t.Fatal(err)
	}
}

// L10: a promoted runtime reads the operating point the device holds and
// adopts it before its first write.
func TestPromotionAdoptsTheHeldOperatingPoint(t *testing.T) {
	f := start(t, opts{epoch: 2})
	f.sim.SetRegister(counterReg, 500)
	f.sim.SetRegister(valveReg, 42)
	grantHTTP(t, f.url, 2, 0)
	f.tick(t)
	testutil.Eventually(t, 5*time.Second, "the first writes", func() bool { return len(f.writesAt(2)) >= 2 })
	first := f.writesAt(2)
	if first[0].Register != counterReg || first[0].Value != 501 || first[1].Register != valveReg || first[1].Value != 42 {
		t.Fatalf("first writes %+v, want counter 501 and valve 42 (adopted 500 and 42)", first[:2])
	}
}

// L10: where the device cannot answer for its operating point the promoted
// runtime writes nothing at all.
func TestPromotionWritesNothingWhereTheDeviceCannotAnswer(t *testing.T) {
	f := start(t, opts{epoch: 2})
	f.sim.SetRegister(counterReg, 500)
	f.sim.SetReadsFailing(true)
	grantHTTP(t, f.url, 2, 0)
	before := len(f.sim.Writes())
	// A scan's writes land before the next scan reads, so the fourth
	// scan's read shows that the three before it wrote nothing.
	for range 4 {
		asked := f.sim.ReadsRefused()
		f.clock.Step(scanEvery)
		testutil.Eventually(t, 5*time.Second, "a scan to ask the device", func() bool { return f.sim.ReadsRefused() > asked })
		if len(f.sim.Writes()) != before {
			t.Fatalf("writes reached a device that could not answer for its operating point: %+v", f.sim.Writes())
		}
	}
	f.sim.SetReadsFailing(false)
	f.tick(t)
	testutil.Eventually(t, 5*time.Second, "writes once the device answers", func() bool { return len(f.writesAt(2)) > 0 })
	if w := f.writesAt(2)[0]; w.Value != 501 {
		t.Fatalf("first write %+v, want 501", w)
	}
}

// L10: a restart in place restores the operating point from its state file
// before the first scan; a state file of another binding is not restored.
func TestRestartRestoresStateBeforeTheFirstScan(t *testing.T) {
	for _, tc := range []struct {
		name       string
		stateEpoch int64
		want       uint16
		restored   bool
	}{
		{"a restart in place remembers", 3, 43, true},
		{"a promotion does not", 2, 8, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			d, err := state.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Save(state.Snapshot{Unit: unit, Epoch: tc.stateEpoch, Outputs: map[string]uint16{"counter": 42, "valve": 9}}); err != nil {
				t.Fatal(err)
			}
			sim, err := devicesim.Start(devicesim.Config{Address: "127.0.0.1:0"})
			if err != nil {
				t.Fatal(err)
			}
			defer sim.Close()
			sim.SetRegister(counterReg, 7)
			f := start(t, opts{epoch: 3, stateDir: dir, sim: sim})
			if f.rt.Restored() != tc.restored {
				t.Fatalf("Restored() = %v, want %v", f.rt.Restored(), tc.restored)
			}
			if tc.restored {
				if op := f.rt.OperatingPoint(); op["counter"] != 42 || op["valve"] != 9 {
					t.Fatalf("operating point before the first scan = %v, want the saved one", op)
				}
			}
			grantHTTP(t, f.url, 3, 0)
			f.tick(t)
			testutil.Eventually(t, 5*time.Second, "the first write", func() bool { return len(f.writesAt(3)) > 0 })
			if w := f.writesAt(3)[0]; w.Register != counterReg || w.Value != tc.want {
				t.Fatalf("first write %+v, want counter %d", w, tc.want)
			}
			testutil.Eventually(t, 5*time.Second, "the state file saved at epoch 3", func() bool {
				snap, ok, err := d.Load()
				return err == nil && ok && snap.Epoch == 3 && snap.Outputs["counter"] >= tc.want
			})
		})
	}
}
