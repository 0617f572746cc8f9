// Package simdriver is the simulation driver: an in-process device for a
// runtime with no field I/O (the demo, a bench without a coupler). It
// touches no wire, so it is connected before start-up returns and nothing
// re-dials it; its reads refuse until it is connected; its writes are
// checked against the highest epoch it has seen, as a device with an
// owner-epoch block would.
package simdriver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/holdfast-io/holdfast/runtime/driver"
	"github.com/holdfast-io/holdfast/runtime/lease"
)

// Driver is a simulated device held in memory.
type Driver struct {
	name         string
	connectDelay time.Duration

	mu        sync.Mutex
	connected bool
	regs      [65536]uint16
	highest   int64
	writes    int
}

// New returns a simulation driver whose Connect takes connectDelay (a
// device that needs time to load, for tests of the start path).
func New(name string, connectDelay time.Duration) *Driver {
	return &Driver{name: name, connectDelay: connectDelay}
}

// Name of the driver.
func (d *Driver) Name() string { return d.name }

// Network is false: the simulation driver is connected before start-up
// returns.
func (d *Driver) Network() bool { return false }

// Connect makes the device answer after the connect delay.
func (d *Driver) Connect(ctx context.Context) error {
	if d.connectDelay > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d.connectDelay):
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.connected = true
	return nil
}

// Close disconnects the device.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.connected = false
	return nil
}

// Connected reports whether Connect completed.
func (d *Driver) Connected() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.connected
}

// ReadRegisters reads count registers from addr.
func (d *Driver) ReadRegisters(_ context.Context, addr, count uint16) ([]uint16, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.connected {
		return nil, driver.ErrNotConnected
	}
	if int(addr)+int(count) > len(d.regs) {
		return nil, &driver.DeviceError{Op: "read", Err: fmt.Errorf("registers %d+%d out of range", addr, count)}
	}
	return append([]uint16(nil), d.regs[addr:int(addr)+int(count)]...), nil
}

// WriteRegisters writes under the permit, refusing an epoch behind the
// highest seen.
func (d *Driver) WriteRegisters(_ context.Context, p *lease.Permit, addr uint16, values []uint16) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.connected {
		return driver.ErrNotConnected
	}
	if p.Epoch() < d.highest {
		return fmt.Errorf("%w: epoch %d, owner epoch %d", driver.ErrStaleEpoch, p.Epoch(), d.highest)
	}
	if int(addr)+len(values) > len(d.regs) {
		return &driver.DeviceError{Op: "write", Err: fmt.Errorf("registers %d+%d out of range", addr, len(values))}
	}
	d.highest = p.Epoch()
	copy(d.regs[addr:], values)
	d.writes++
	return nil
}

// Writes counts accepted writes.
func (d *Driver) Writes() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.writes
}

// Register reads one register without a connection (for tests).
func (d *Driver) Register(addr uint16) uint16 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.regs[addr]
}
