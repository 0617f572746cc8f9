package opcua_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/holdfast-io/holdfast/runtime/driver"
	"github.com/holdfast-io/holdfast/runtime/driver/opcua"
	"github.com/holdfast-io/holdfast/runtime/internal/testutil"
)

// L8: the OPC UA driver under driver.Reconnecting keeps the Modbus
// driver's rules: a failed first dial is still watched, a session lost
// with its server is dialled again every health interval, the new session
// declares its epoch again before its first write, and a retired driver
// never dials.
func TestOPCUAReconnectsAfterTheServerRestarts(t *testing.T) {
	p := startPlant(t, valves())
	p.stop() // the server is down when the runtime starts
	cfg, err := opcua.ParseURL("valve-1", p.url(p.query()))
	if err != nil {
		t.Fatal(err)
	}
	clk := testingclock.NewFakeClock(time.Now())
	r := driver.NewReconnecting(opcua.New(cfg), driver.ReconnectingConfig{HealthInterval: time.Second, Clock: clk},
		ktesting.NewLogger(t, ktesting.NewConfig()))
	ctx := context.Background()
	r.Start(ctx)
	testutil.Eventually(t, 10*time.Second, "the first dial to fail", func() bool { return r.Dials() >= 1 && clk.HasWaiters() })
	if r.Connected() {
		t.Fatal("connected to a server that is down")
	}

	p.start(t)
	awaitReconnect(t, r, clk)
	if err := r.WriteRegisters(ctx, testutil.Permit(t, 2), 101, []uint16{41}); err != nil {
		t.Fatal(err)
	}

	// The server restarts: the next I/O finds the session gone, and the
	// monitor dials the new server.
	p.stop()
	if _, err := r.ReadRegisters(ctx, 101, 1); err == nil || !driver.IsTransportError(err) {
		t.Fatalf("a read from a stopped server = %v, want a transport error", err)
	}
	if r.Connected() {
		t.Fatal("still connected after the server stopped")
	}
	p.start(t)
	awaitReconnect(t, r, clk)
	if v, err := r.ReadRegisters(ctx, 101, 1); err != nil || v[0] != 41 {
		t.Fatalf("read after the restart = %v, %v; want the 41 written before it", v, err)
	}
	before := len(p.log())
	if err := r.WriteRegisters(ctx, testutil.Permit(t, 2), 101, []uint16{42}); err != nil {
		t.Fatal(err)
	}
	if got, want := p.log()[before:], []written{{"OwnerEpoch", 2}, {"Valve", 42}}; !equal(got, want) {
		t.Fatalf("writes on the new session %+v, want %+v (the epoch declared again first)", got, want)
	}

	// Retired: the server going away and coming back dials nothing.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	dials := r.Dials()
	p.stop()
	p.start(t)
	clk.Step(5 * time.Second)
	if _, err := r.ReadRegisters(ctx, 101, 1); err == nil {
		t.Fatal("a retired driver read")
	}
	if r.Dials() != dials {
		t.Fatalf("a retired driver dialled %d times", r.Dials()-dials)
	}
}

// awaitReconnect steps the health interval until the monitor has dialled
// the driver back up, each step once the last dial has returned.
func awaitReconnect(t *testing.T, r *driver.Reconnecting, clk *testingclock.FakeClock) {
	t.Helper()
	for !r.Connected() {
		dials := r.Dials()
		clk.Step(time.Second)
		testutil.Eventually(t, 20*time.Second, "the monitor to dial", func() bool {
			return r.Connected() || (r.Dials() > dials && clk.HasWaiters())
		})
	}
}
