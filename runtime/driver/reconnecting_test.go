package driver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/holdfast-io/holdfast/runtime/driver"
	"github.com/holdfast-io/holdfast/runtime/driver/modbus"
	"github.com/holdfast-io/holdfast/runtime/internal/testutil"
	"github.com/holdfast-io/holdfast/test/devicesim"
	"github.com/holdfast-io/holdfast/test/ports"
)

const healthInterval = 50 * time.Millisecond

func startSim(t *testing.T, addr string) *devicesim.Sim {
	t.Helper()
	sim, err := devicesim.Start(devicesim.Config{Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	return sim
}

func link(t *testing.T, target string, open bool) *devicesim.Link {
	t.Helper()
	l, err := devicesim.NewLink(target, open)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func reconnecting(t *testing.T, addr string, timeout time.Duration) *driver.Reconnecting {
	t.Helper()
	er := uint16(devicesim.DefaultEpochRegister)
	inner := modbus.New(modbus.Config{Name: "coupler-1", Address: addr, UnitID: 1, Timeout: timeout, EpochRegister: &er})
	r := driver.NewReconnecting(inner, driver.ReconnectingConfig{HealthInterval: healthInterval},
		ktesting.NewLogger(t, ktesting.NewConfig()))
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// #1936: a device that was down when the runtime started is dialled again
// by the health monitor, with nothing else dialling.
func TestReconnectingDriver_AFailedFirstDialIsStillWatched(t *testing.T) {
	addr := ports.Addr(t)
	r := reconnecting(t, addr, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.Start(ctx)
	// The first dial and one from the monitor have been refused.
	testutil.Eventually(t, 5*time.Second, "the monitor to dial after the first dial failed", func() bool { return r.Dials() >= 2 })
	if r.Connected() {
		t.Fatal("connected to a port nothing listens on")
	}
	if _, down := r.DownSince(); !down {
		t.Fatal("a driver whose first dial failed does not report itself down")
	}
	startSim(t, addr)
	testutil.Eventually(t, 5*time.Second, "the health monitor to bring the driver up", r.Connected)
	if r.Dials() < 2 {
		t.Fatalf("connected after %d dials; the monitor should have dialled again", r.Dials())
	}
}

// #1936: a read that arrives while the first dial is on the wire waits for
// it and finds the driver connected: one dial, not two.
func TestReconnectingDriver_AReadDuringTheFirstDialWaitsForIt(t *testing.T) {
	sim := startSim(t, "127.0.0.1:0")
	sim.SetRegister(40, 1234)
	l := link(t, sim.Addr(), false) // the coupler takes the connection and does not answer yet
	r := reconnecting(t, l.Addr(), 10*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.Start(ctx)
	testutil.Eventually(t, 5*time.Second, "the first dial to reach the coupler", func() bool { return l.Accepted() == 1 })

	type result struct {
		v   []uint16
		err error
	}
	got := make(chan result, 1)
	go func() {
		v, err := r.ReadRegisters(ctx, 40, 1)
		got <- result{v, err}
	}()
	select {
	case res := <-got:
		t.Fatalf("the read returned %v, %v while the first dial was still on the wire", res.v, res.err)
	case <-time.After(200 * time.Millisecond):
	}
	l.Open()
	res := <-got
	if res.err != nil || len(res.v) != 1 || res.v[0] != 1234 {
		t.Fatalf("read after the dial = %v, %v; want [1234]", res.v, res.err)
	}
	if r.Dials() != 1 || l.Accepted() != 1 {
		t.Fatalf("%d dials and %d connections; the read should have waited for the first dial", r.Dials(), l.Accepted())
	}
}

// #1936: a retired driver never dials again, whether it was retired before
// its first dial started or while it was on the wire.
func TestReconnectingDriver_ARetiredDriverDoesNotDial(t *testing.T) {
	t.Run("retired before the first dial", func(t *testing.T) {
		sim := startSim(t, "127.0.0.1:0")
		l := link(t, sim.Addr(), true)
		r := reconnecting(t, l.Addr(), time.Second)
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r.Start(ctx)
		if err := r.Connect(ctx); !errors.Is(err, driver.ErrDriverClosed) {
			t.Fatalf("Connect on a retired driver = %v, want ErrDriverClosed", err)
		}
		if _, err := r.ReadRegisters(ctx, 0, 1); !errors.Is(err, driver.ErrDriverClosed) {
			t.Fatalf("a late reader's lazy reconnect = %v, want ErrDriverClosed", err)
		}
		time.Sleep(10 * healthInterval) // an absence of dials: only a window can show it
		if l.Accepted() != 0 || r.Dials() != 0 {
			t.Fatalf("a driver retired before its first dial dialled %d times (%d connections)", r.Dials(), l.Accepted())
		}
	})
	t.Run("retired during the first dial", func(t *testing.T) {
		sim := startSim(t, "127.0.0.1:0")
		l := link(t, sim.Addr(), false)
		r := reconnecting(t, l.Addr(), 10*time.Second)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r.Start(ctx)
		testutil.Eventually(t, 5*time.Second, "the first dial to reach the coupler", func() bool { return l.Accepted() == 1 })
		closed := make(chan error, 1)
		go func() { closed <- r.Close() }()
		select {
		case err := <-closed:
			t.Fatalf("Close returned (%v) while a dial was on the wire; it must wait for it", err)
		case <-time.After(200 * time.Millisecond):
		}
		l.Open()
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		if r.Connected() {
			t.Fatal("a retired driver reports itself connected")
		}
		time.Sleep(10 * healthInterval) // an absence of further dials: only a window can show it
		if l.Accepted() != 1 || r.Dials() != 1 {
			t.Fatalf("after retirement: %d dials, %d connections; want the one dial that was in flight", r.Dials(), l.Accepted())
		}
	})
}

// A connection that drops after a good start is found by the next I/O and
// re-dialled by the monitor.
func TestReconnectingDriver_ADroppedConnectionIsRedialled(t *testing.T) {
	sim := startSim(t, "127.0.0.1:0")
	l := link(t, sim.Addr(), true)
	r := reconnecting(t, l.Addr(), time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.Start(ctx)
	testutil.Eventually(t, 5*time.Second, "the driver to connect", r.Connected)
	l.Cut()
	if _, err := r.ReadRegisters(ctx, 0, 1); err == nil {
		t.Fatal("a read over a cut link succeeded")
	}
	if r.Connected() {
		t.Fatal("the driver still reports connected after its connection was cut")
	}
	l.Open()
	testutil.Eventually(t, 5*time.Second, "the monitor to re-dial", r.Connected)
}
