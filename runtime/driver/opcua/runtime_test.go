package opcua_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/runtime"
	"github.com/holdfast-io/holdfast/runtime/driver"
	"github.com/holdfast-io/holdfast/runtime/driver/opcua"
	"github.com/holdfast-io/holdfast/runtime/internal/testutil"
	"github.com/holdfast-io/holdfast/runtime/lease"
)

const (
	unit        = "plant/kiln-1"
	scanEvery   = time.Second
	leaseLength = 10 * time.Second
)

// unitRuntime is the library's runtime on a fake clock driving the plant
// through the OPC UA driver: Counter (register 100) steps by one every
// scan, Valve (101) holds at 0, Level (200) is read every scan.
type unitRuntime struct {
	rt    *runtime.Runtime
	clock *testingclock.FakeClock
	url   string
	plant *plant
}

func startRuntime(t *testing.T, p *plant, epoch int64) *unitRuntime {
	t.Helper()
	cfg, err := opcua.ParseURL("valve-1", p.url(p.query()))
	if err != nil {
		t.Fatal(err)
	}
	clk := testingclock.NewFakeClock(time.Now())
	zero := uint16(0)
	outputs := []runtime.Output{
		{Name: "counter", Device: "valve-1", Register: 100},
		{Name: "valve", Device: "valve-1", Register: 101, Hold: &zero},
	}
	rt, err := runtime.New(runtime.Config{
		Lease: lease.Config{Unit: unit, Epoch: epoch, Mode: holdfastv1.Failover, LeaseDuration: leaseLength, Clock: clk,
			Incarnation: holdfastv1.RuntimeIncarnation{PodUID: "uid-" + t.Name()}},
		LeaseAddr: "127.0.0.1:0", InsecurePlaintextLease: true, HealthAddr: "127.0.0.1:0",
		Drivers:      []driver.Driver{opcua.New(cfg)},
		Outputs:      outputs,
		Inputs:       []runtime.Input{{Name: "level", Device: "valve-1", Register: 200}},
		Program:      runtime.StepProgram(outputs, map[string]uint16{"counter": 1}),
		ScanInterval: scanEvery,
	}, ktesting.NewLogger(t, ktesting.NewConfig()))
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Stop(context.Background()) })
	u := &unitRuntime{rt: rt, clock: clk, url: "http://" + rt.LeaseAddr() + leaseapi.Path, plant: p}
	testutil.Eventually(t, 10*time.Second, "the driver to connect", func() bool {
		return rt.Driver("valve-1").(*driver.Reconnecting).Connected()
	})
	return u
}

// grant posts the grantor's two steps: a grant for an anchor, then one
// that echoes it with an acknowledged age of zero.
func (u *unitRuntime) grant(t *testing.T, epoch int64) leaseapi.Reply {
	t.Helper()
	first := u.post(t, leaseapi.Grant{Unit: unit, Epoch: epoch, DurationMillis: leaseLength.Milliseconds(), Grantor: "g", Seq: uint64(time.Now().UnixNano())})
	zero := int64(0)
	return u.post(t, leaseapi.Grant{Unit: unit, Epoch: epoch, DurationMillis: leaseLength.Milliseconds(), Grantor: "g",
		Seq: uint64(time.Now().UnixNano()), AckAgeMillis: &zero, Anchor: first.Anchor})
}

func (u *unitRuntime) post(t *testing.T, g leaseapi.Grant) leaseapi.Reply {
	t.Helper()
	return testutil.PostGrant(t, http.DefaultClient, u.url, g)
}

// tick runs one scan and waits until it has read the server.
func (u *unitRuntime) tick(t *testing.T) {
	t.Helper()
	before := u.plant.readsServed()
	u.clock.Step(scanEvery)
	testutil.Eventually(t, 10*time.Second, "a scan to read the server", func() bool { return u.plant.readsServed() > before })
}

// L10: a promoted runtime reads every output node's value before its first
// write and continues from it; where it cannot read an output node it
// writes nothing at all, to any node, until it can.
func TestOPCUAPromotionAdoptsTheOperatingPoint(t *testing.T) {
	p := startPlant(t, valves())
	p.set("Counter", int32(500))
	p.set("Valve", uint16(42))
	p.setFailReads("Valve", true)
	u := startRuntime(t, p, 2)
	u.grant(t, 2)
	u.tick(t)
	for range 3 {
		// Scans run one after another: once the next scan has read, the
		// writes of the one before it, if any, are in the log.
		u.tick(t)
		if got := p.log(); len(got) != 0 {
			t.Fatalf("the runtime wrote %+v while it could not read the Valve node", got)
		}
	}
	p.setFailReads("Valve", false)
	u.tick(t)
	testutil.Eventually(t, 10*time.Second, "the first writes", func() bool { return len(p.log()) >= 3 })
	want := []written{{"OwnerEpoch", 2}, {"Counter", 501}, {"Valve", 42}}
	if got := p.log()[:3]; !equal(got, want) {
		t.Fatalf("first writes %+v, want %+v: the epoch, then the adopted 500 stepped and the adopted 42", got, want)
	}
}

// L3 through the OPC UA driver: Held writes the program, Holding writes
// the hold values only, Fenced writes nothing while reads go on.
func TestOPCUAWriteGateHoldsThenFences(t *testing.T) {
	p := startPlant(t, valves())
	u := startRuntime(t, p, 1)
	if r := u.grant(t, 1); r.State != leaseapi.Held {
		t.Fatalf("grant answered %+v", r)
	}
	u.tick(t)
	testutil.Eventually(t, 10*time.Second, "control writes", func() bool { c, _ := p.value("Counter").(int32); return c > 7 })
	if v := p.value("Valve"); v != uint16(40) {
		t.Fatalf("Valve = %v, want the adopted 40", v)
	}

	u.clock.Step(leaseLength)
	testutil.Eventually(t, 10*time.Second, "the hold value", func() bool { return p.value("Valve") == uint16(0) })
	if s := u.rt.Keeper().State(); s != leaseapi.Holding {
		t.Fatalf("state %s at the deadline, want Holding", s)
	}
	counter := p.value("Counter")
	u.tick(t)
	if v := p.value("Counter"); v != counter {
		t.Fatalf("Counter moved from %v to %v during the hold", counter, v)
	}

	u.clock.Step(holdfastv1.HoldBound(leaseLength))
	testutil.Eventually(t, 10*time.Second, "the fence", func() bool { return u.rt.Keeper().State() == leaseapi.Fenced })
	writes, reads := len(p.log()), p.readsServed()
	for range 3 {
		u.tick(t)
	}
	if err := u.rt.WriteOutput(context.Background(), "valve", 5); !errors.Is(err, lease.ErrFenced) {
		t.Fatalf("a write through the guarded path while fenced = %v, want ErrFenced", err)
	}
	if got := p.log(); len(got) != writes {
		t.Fatalf("%d writes reached the server after the fence: %+v", len(got)-writes, got[writes:])
	}
	if p.readsServed() <= reads {
		t.Fatal("reads stopped with the fence")
	}
}
