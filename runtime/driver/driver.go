// Package driver is the runtime's field I/O: the Driver interface every
// device protocol implements, and Reconnecting, the wrapper that dials a
// network driver beside start-up and keeps watching it (L8).
//
// A driver write takes a *lease.Permit, which only the lease Keeper hands
// out, and carries the permit's epoch to the device where the device can
// check it (L7). There is no other way to write an output.
package driver

import (
	"context"
	"errors"
	"fmt"

	"github.com/holdfast-io/holdfast/runtime/lease"
)

// Driver is one connection to one field device.
type Driver interface {
	// Name identifies the driver in logs, metrics and health.
	Name() string
	// Connect dials the device and checks that it answers. It returns once
	// the device answered or the dial failed; it may outlast ctx by the
	// driver's own dial timeout when the protocol library cannot be
	// interrupted.
	Connect(ctx context.Context) error
	// Close ends the connection. A closed driver can be connected again;
	// Reconnecting is what retires one for good.
	Close() error
	// ReadRegisters reads count holding registers from addr.
	ReadRegisters(ctx context.Context, addr, count uint16) ([]uint16, error)
	// WriteRegisters writes values from addr under the permit, carrying the
	// permit's epoch to the device where it can check it.
	WriteRegisters(ctx context.Context, p *lease.Permit, addr uint16, values []uint16) error
}

// Network is implemented by drivers that reach their device over a
// network; Reconnecting wraps exactly those, and they are dialled beside
// start-up rather than before it.
type Network interface {
	Network() bool
}

// IsNetwork reports whether d reaches its device over a network.
func IsNetwork(d Driver) bool {
	n, ok := d.(Network)
	return ok && n.Network()
}

var (
	// ErrNotConnected: the driver has no connection to its device.
	ErrNotConnected = errors.New("driver not connected")
	// ErrDriverClosed: the driver was retired and dials nothing again.
	ErrDriverClosed = errors.New("driver closed")
	// ErrStaleEpoch: the device has seen a higher epoch than the write's,
	// so another runtime owns it now; the write was refused by the device.
	ErrStaleEpoch = errors.New("device refused the write: it has seen a higher epoch")
)

// LaterOwnerError is the runtime's own refusal to write (docs/design.md §3
// L13): the device's owner-epoch block, read before the first write on a
// connection, holds a later epoch than the permit's. Nothing was sent, not
// even the epoch: a real device accepts every write, so this read is what
// keeps a runtime whose epoch is behind the device's from writing under it.
// It matches ErrStaleEpoch.
type LaterOwnerError struct {
	Device     string
	Address    string
	OwnerEpoch int64
	Epoch      int64
}

func (e *LaterOwnerError) Error() string {
	return fmt.Sprintf("device %s at %s holds owner epoch %d, later than this runtime's %d: nothing written", e.Device, e.Address, e.OwnerEpoch, e.Epoch)
}

// Is makes a LaterOwnerError an ErrStaleEpoch: the connection is healthy.
func (e *LaterOwnerError) Is(target error) bool { return target == ErrStaleEpoch }

// DeviceError is an answer from the device refusing a request (a Modbus
// exception, for example). The connection is healthy: the device is there
// and talking.
type DeviceError struct {
	Op  string
	Err error
}

func (e *DeviceError) Error() string { return fmt.Sprintf("device refused %s: %v", e.Op, e.Err) }
func (e *DeviceError) Unwrap() error { return e.Err }

// IsTransportError reports whether err means the connection is unusable
// (as opposed to a device that answered with a refusal, or a write the
// lease no longer permitted and the driver did not send).
func IsTransportError(err error) bool {
	if err == nil {
		return false
	}
	var de *DeviceError
	return !errors.As(err, &de) && !errors.Is(err, ErrStaleEpoch) && !errors.Is(err, lease.ErrFenced)
}

// WriteAborter is implemented by drivers whose writes can still be queued
// in the kernel after they give up on them (a TCP send queue retransmits
// for minutes, and a healed link delivers the write late).
type WriteAborter interface {
	// AbortWrites resets the connection carrying a write that has not been
	// answered (close with SO_LINGER 0: an RST, the send queue discarded),
	// so the write fails now and none of its bytes is sent later. It must
	// not wait for the write.
	AbortWrites()
}

// AbortWritesOnFence makes k abort every unanswered write of drivers at the
// fence instant, before it waits for the writes in flight: a fenced runtime
// leaves nothing on the wire (L3).
func AbortWritesOnFence(k *lease.Keeper, drivers ...Driver) {
	var as []WriteAborter
	for _, d := range drivers {
		if a, ok := d.(WriteAborter); ok {
			as = append(as, a)
		}
	}
	if len(as) == 0 {
		return
	}
	k.OnFence(func() {
		for _, a := range as {
			a.AbortWrites()
		}
	})
}
