package modbus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-io/holdfast/runtime/driver"
	"github.com/holdfast-io/holdfast/runtime/driver/modbus"
	"github.com/holdfast-io/holdfast/runtime/internal/testutil"
	"github.com/holdfast-io/holdfast/runtime/lease"
	"github.com/holdfast-io/holdfast/test/devicesim"
)

func connect(t *testing.T, addr string) *modbus.Driver {
	t.Helper()
	cfg, err := modbus.ParseURL("coupler-1", "modbus://"+addr+"?unit=1&timeout=2s&epochRegister=9000")
	if err != nil {
		t.Fatal(err)
	}
	return testutil.Connected(t, modbus.New(cfg))
}

// L7: every write carries its epoch to the device, and a device that has
// seen a higher epoch refuses the lower one, which the driver reports as
// ErrStaleEpoch.
func TestModbusWritesCarryTheEpochAndAStaleEpochIsRefused(t *testing.T) {
	sim, err := devicesim.Start(devicesim.Config{Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	ctx := context.Background()
	old, cur := connect(t, sim.Addr()), connect(t, sim.Addr())

	if err := old.WriteRegisters(ctx, testutil.Permit(t, 2), 100, []uint16{7, 8}); err != nil {
		t.Fatal(err)
	}
	if err := cur.WriteRegisters(ctx, testutil.Permit(t, 3), 100, []uint16{9}); err != nil {
		t.Fatal(err)
	}
	err = old.WriteRegisters(ctx, testutil.Permit(t, 2), 100, []uint16{1})
	if !errors.Is(err, driver.ErrStaleEpoch) || driver.IsTransportError(err) {
		t.Fatalf("a write at epoch 2 after epoch 3 = %v, want ErrStaleEpoch", err)
	}
	if got := sim.Registers(100, 2); got[0] != 9 || got[1] != 8 {
		t.Fatalf("registers = %v, want [9 8]: the stale write must not land", got)
	}
	log := sim.Writes()
	if len(log) != 4 {
		t.Fatalf("write log %+v, want 4 entries", log)
	}
	want := []struct {
		epoch    int64
		reg, val uint16
		accepted bool
	}{{2, 100, 7, true}, {2, 101, 8, true}, {3, 100, 9, true}, {2, 100, 1, false}}
	for i, w := range want {
		if log[i].Epoch != w.epoch || log[i].Register != w.reg || log[i].Value != w.val || log[i].Accepted != w.accepted || log[i].Peer == "" {
			t.Fatalf("log[%d] = %+v, want %+v", i, log[i], w)
		}
	}
	if err := devicesim.CheckOneWriter(log); err != nil {
		t.Fatalf("the device let two writers overlap: %v", err)
	}
	v, err := cur.ReadRegisters(ctx, 100, 2)
	if err != nil || v[0] != 9 {
		t.Fatalf("read = %v, %v", v, err)
	}
}

// L13: the driver reads the owner-epoch block before its first write on a
// connection and, finding a later epoch, sends nothing, not even its own
// epoch: the device's log stays empty (a real device would take both).
func TestModbusWritesNothingToADeviceHoldingALaterEpoch(t *testing.T) {
	sim, err := devicesim.Start(devicesim.Config{Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	ctx := context.Background()
	later, old := connect(t, sim.Addr()), connect(t, sim.Addr())
	// The later owner declares and writes, then the device forgets nothing.
	if err := later.WriteRegisters(ctx, testutil.Permit(t, 9), 100, []uint16{4}); err != nil {
		t.Fatal(err)
	}
	before := len(sim.Writes())
	err = old.WriteRegisters(ctx, testutil.Permit(t, 5), 100, []uint16{1})
	var lo *driver.LaterOwnerError
	if !errors.As(err, &lo) || lo.OwnerEpoch != 9 || lo.Epoch != 5 || lo.Device != "coupler-1" || lo.Address != sim.Addr() ||
		!errors.Is(err, driver.ErrStaleEpoch) || driver.IsTransportError(err) {
		t.Fatalf("a write at epoch 5 to a device owned at 9 = %v, want a LaterOwnerError", err)
	}
	if log := sim.Writes(); len(log) != before {
		t.Fatalf("the device saw %+v from the runtime behind its owner", log[before:])
	}
	if got := sim.Registers(100, 1); got[0] != 4 {
		t.Fatalf("register 100 = %d", got[0])
	}
	// An owner no later than the permit's is written over.
	if err := old.WriteRegisters(ctx, testutil.Permit(t, 10), 100, []uint16{2}); err != nil {
		t.Fatal(err)
	}
	if sim.HighestEpoch() != 10 {
		t.Fatalf("owner epoch %d after epoch 10 wrote", sim.HighestEpoch())
	}
}

func TestModbusADeviceThatDoesNotAnswerFailsTheDial(t *testing.T) {
	sim, err := devicesim.Start(devicesim.Config{Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	l, err := devicesim.NewLink(sim.Addr(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg, _ := modbus.ParseURL("coupler-1", "modbus://"+l.Addr()+"?timeout=300ms&epochRegister=9000")
	d := modbus.New(cfg)
	start := time.Now()
	if err := d.Connect(context.Background()); err == nil || !driver.IsTransportError(err) {
		t.Fatalf("Connect to a coupler that never answers = %v, want a transport error", err)
	}
	if time.Since(start) < 300*time.Millisecond {
		t.Fatal("the dial gave up before its timeout")
	}
}

func TestModbusParseURLNamesEveryBadParameter(t *testing.T) {
	_, err := modbus.ParseURL("coupler-1", "modbus://10.0.0.1:502?unit=999&timeout=soon&epochRegister=70000&colour=blue")
	for _, want := range []string{"unit:", "timeout:", "epochRegister:", "colour: unknown parameter"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseURL error %v, want it to name %q", err, want)
		}
	}
	if _, err := modbus.ParseURL("x", "http://10.0.0.1:502"); err == nil {
		t.Error("a non-modbus scheme was accepted")
	}
	if _, err := modbus.ParseURL("x", "modbus://10.0.0.1"); err == nil {
		t.Error("a URL without a port was accepted")
	}
	cfg, err := modbus.ParseURL("x", "modbus://127.0.0.1:5020")
	if err != nil || cfg.EpochRegister != nil || cfg.UnitID != 1 || cfg.Timeout != modbus.DefaultTimeout {
		t.Errorf("defaults = %+v, %v", cfg, err)
	}
}

// L3: a write whose permit lapsed while it waited (behind a dial, or a read
// on a dead link) is not put on the wire: the fence does not wait for a
// write that has not started, so the driver asks the lease just before
// sending.
func TestHoldThenFence_AWriteThatWaitedPastTheFenceIsNotSent(t *testing.T) {
	sim, err := devicesim.Start(devicesim.Config{Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	testutil.WriteAfterTheFence(t, connect(t, sim.Addr()), 100)
	if log := sim.Writes(); len(log) != 0 {
		t.Fatalf("the device logged %+v, want nothing", log)
	}
}

func writeErr(k *lease.Keeper, d driver.Driver, addr, v uint16) error {
	p, err := k.Acquire(lease.WriteControl)
	if err != nil {
		return err
	}
	defer p.Release()
	return d.WriteRegisters(context.Background(), p, addr, []uint16{v})
}

func write(t *testing.T, k *lease.Keeper, d driver.Driver, addr, v uint16) {
	t.Helper()
	if err := writeErr(k, d, addr, v); err != nil {
		t.Fatal(err)
	}
}
