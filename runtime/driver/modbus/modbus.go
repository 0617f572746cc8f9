// Package modbus is the Modbus TCP field driver (github.com/simonvetter/modbus).
//
// Epoch on the wire: a device that can check the writer's epoch exposes an
// owner-epoch block of four holding registers (a big-endian uint64). Before
// its first write on a connection the driver reads the block: a later epoch
// there than its permit's means another binding took the device (or the
// unit's epochs restarted), and the driver writes nothing at all
// (driver.LaterOwnerError, docs/design.md §3 L13). A real Modbus device
// accepts every write, so this read is the runtime's own check. Otherwise it
// writes its permit's epoch there; a device that checks refuses a lower
// epoch than the highest it has seen, and refuses every later write on a
// connection whose epoch is behind. The driver reads the block back after a
// refused write to tell a stale epoch (ErrStaleEpoch) from any other
// refusal.
//
// Nothing late (L3): a write the device has not answered is never left in
// the kernel. A write that fails on the transport (a timeout on a cut link)
// and every unanswered write at the fence (AbortWrites) reset the
// connection with SO_LINGER 0, which discards the socket's send queue; a
// graceful close would leave TCP retransmitting the write until the link
// heals, minutes after the fence. A write whose permit lapsed while it
// waited is not sent at all.
package modbus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	mb "github.com/simonvetter/modbus"

	"github.com/holdfast-io/holdfast/runtime/driver"
	"github.com/holdfast-io/holdfast/runtime/lease"
)

// Defaults of a Config.
const (
	DefaultTimeout = 5 * time.Second
	DefaultUnitID  = 1
)

// Config of one Modbus TCP device.
type Config struct {
	// Name of the driver.
	Name string
	// Address is host:port of the device.
	Address string
	// UnitID addressed on the device.
	UnitID uint8
	// Timeout of every request. The library's TCP dial has its own fixed
	// 5s timeout and cannot be interrupted.
	Timeout time.Duration
	// EpochRegister is the first of the four owner-epoch registers; nil
	// means the device cannot check epochs.
	EpochRegister *uint16
	// ProbeRegister is read by Connect to check that the device answers
	// when it has no owner-epoch block.
	ProbeRegister uint16
}

// ParseURL reads a device URL: modbus://host:port?unit=1&timeout=5s&epochRegister=9000&probe=0.
func ParseURL(name, raw string) (Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, fmt.Errorf("device %s: %w", name, err)
	}
	if u.Scheme != "modbus" && u.Scheme != "modbus+tcp" {
		return Config{}, fmt.Errorf("device %s: scheme %q: must be modbus", name, u.Scheme)
	}
	if u.Host == "" || u.Port() == "" {
		return Config{}, fmt.Errorf("device %s: %q: must name host:port", name, raw)
	}
	cfg := Config{Name: name, Address: u.Host, UnitID: DefaultUnitID, Timeout: DefaultTimeout}
	q := u.Query()
	var errs []error
	for key, vals := range q {
		v := vals[0]
		switch key {
		case "unit":
			n, err := strconv.ParseUint(v, 10, 8)
			if err != nil {
				errs = append(errs, fmt.Errorf("device %s: unit: %q: must be 0..255", name, v))
			}
			cfg.UnitID = uint8(n)
		case "timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				errs = append(errs, fmt.Errorf("device %s: timeout: %q: must be a positive duration", name, v))
			}
			cfg.Timeout = d
		case "epochRegister":
			if strings.EqualFold(v, "none") {
				cfg.EpochRegister = nil
				continue
			}
			n, err := strconv.ParseUint(v, 10, 16)
			if err != nil || n > 65532 {
				errs = append(errs, fmt.Errorf("device %s: epochRegister: %q: must be 0..65532 or none", name, v))
			}
			r := uint16(n)
			cfg.EpochRegister = &r
		case "probe":
			n, err := strconv.ParseUint(v, 10, 16)
			if err != nil {
				errs = append(errs, fmt.Errorf("device %s: probe: %q: must be 0..65535", name, v))
			}
			cfg.ProbeRegister = uint16(n)
		default:
			errs = append(errs, fmt.Errorf("device %s: %s: unknown parameter (known: unit, timeout, epochRegister, probe)", name, key))
		}
	}
	return cfg, errors.Join(errs...)
}

// Driver is a Modbus TCP client to one device.
type Driver struct {
	cfg Config

	mu       sync.Mutex // one request at a time
	client   *mb.ModbusClient
	declared int64 // the epoch declared on this connection; 0 = none

	// cmu guards the socket and whether a write is on it apart from mu, so
	// AbortWrites never waits behind the write it aborts.
	cmu     sync.Mutex
	conn    *net.TCPConn
	writing bool
}

// New returns a driver for cfg; it dials nothing until Connect.
func New(cfg Config) *Driver {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	return &Driver{cfg: cfg}
}

// Name of the driver.
func (d *Driver) Name() string { return d.cfg.Name }

// Network is true: Modbus TCP reaches its device over the network.
func (d *Driver) Network() bool { return true }

// Connect opens the TCP connection and reads the owner-epoch block (or the
// probe register), so a device that accepts the connection but does not
// answer fails the dial after Timeout.
func (d *Driver) Connect(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.client != nil {
		_ = d.client.Close()
		d.client = nil
	}
	c, err := mb.NewClient(&mb.ClientConfiguration{URL: "tcp://" + d.cfg.Address, Timeout: d.cfg.Timeout})
	if err != nil {
		return fmt.Errorf("modbus %s: %w", d.cfg.Address, err)
	}
	if err := c.SetUnitId(d.cfg.UnitID); err != nil {
		return err
	}
	if err := c.Open(); err != nil {
		return fmt.Errorf("modbus %s: dial: %w", d.cfg.Address, err)
	}
	conn, err := socketOf(c)
	if err != nil {
		_ = c.Close()
		return fmt.Errorf("modbus %s: %w", d.cfg.Address, err)
	}
	probe, n := d.cfg.ProbeRegister, uint16(1)
	if d.cfg.EpochRegister != nil {
		probe, n = *d.cfg.EpochRegister, 4
	}
	if _, err := c.ReadRegisters(probe, n, mb.HOLDING_REGISTER); err != nil && isTransport(err) {
		_ = c.Close()
		return fmt.Errorf("modbus %s: device did not answer: %w", d.cfg.Address, err)
	}
	d.client, d.declared = c, 0
	d.cmu.Lock()
	d.conn = conn
	d.cmu.Unlock()
	return nil
}

// socketOf is the TCP socket under c. simonvetter/modbus v1.6.4 dials
// inside Open, offers no dialer hook, does not expose the connection, and
// closes gracefully; to abort a write (SO_LINGER 0) the driver reads the
// socket out of the client. TestASocketIsReachableToAbort holds the
// layout, and Connect fails rather than run a connection it cannot abort.
func socketOf(c *mb.ModbusClient) (*net.TCPConn, error) {
	errLayout := errors.New("cannot reach the client's TCP socket to abort it (simonvetter/modbus layout changed)")
	tr := reflect.ValueOf(c).Elem().FieldByName("transport")
	if !tr.IsValid() || tr.Kind() != reflect.Interface || tr.IsNil() || tr.Elem().Kind() != reflect.Pointer {
		return nil, errLayout
	}
	sock := tr.Elem().Elem().FieldByName("socket")
	if !sock.IsValid() || sock.Kind() != reflect.Interface {
		return nil, errLayout
	}
	sock = reflect.NewAt(sock.Type(), unsafe.Pointer(sock.UnsafeAddr())).Elem()
	conn, ok := sock.Interface().(*net.TCPConn)
	if !ok {
		return nil, errLayout
	}
	return conn, nil
}

// abort resets conn: SO_LINGER 0 makes close send an RST and discard the
// send queue, so nothing queued is retransmitted later.
func abort(conn *net.TCPConn) {
	_ = conn.SetLinger(0)
	_ = conn.Close()
}

// AbortWrites resets the connection when a write is on it that the device
// has not answered; the write returns an error at once. The fence calls it
// (driver.AbortWritesOnFence). A connection with no write on it is left
// alone: reads go on after the fence.
func (d *Driver) AbortWrites() {
	d.cmu.Lock()
	defer d.cmu.Unlock()
	if d.writing && d.conn != nil {
		abort(d.conn)
		d.conn = nil
	}
}

// abortLocked resets the connection and forgets it. Callers hold mu.
func (d *Driver) abortLocked() {
	d.cmu.Lock()
	if d.conn != nil {
		abort(d.conn)
		d.conn = nil
	}
	d.cmu.Unlock()
	d.client, d.declared = nil, 0
}

func (d *Driver) setWriting(w bool) {
	d.cmu.Lock()
	d.writing = w
	d.cmu.Unlock()
}

// Close closes the connection. Every write has been answered or aborted by
// then, so a graceful close leaves no write behind.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.client == nil {
		return nil
	}
	err := d.client.Close()
	d.client, d.declared = nil, 0
	d.cmu.Lock()
	d.conn = nil
	d.cmu.Unlock()
	return err
}

// ReadRegisters reads count holding registers from addr.
func (d *Driver) ReadRegisters(_ context.Context, addr, count uint16) ([]uint16, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.client == nil {
		return nil, driver.ErrNotConnected
	}
	v, err := d.client.ReadRegisters(addr, count, mb.HOLDING_REGISTER)
	return v, wrap("read", err)
}

// WriteRegisters declares the permit's epoch on this connection when it has
// not yet, then writes values from addr in one request.
func (d *Driver) WriteRegisters(_ context.Context, p *lease.Permit, addr uint16, values []uint16) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.client == nil {
		return driver.ErrNotConnected
	}
	d.setWriting(true)
	defer d.setWriting(false)
	if d.cfg.EpochRegister != nil && d.declared != p.Epoch() {
		if err := d.checkOwner(p.Epoch()); err != nil {
			return err
		}
		if err := d.send(p, "declare epoch", *d.cfg.EpochRegister, EncodeEpoch(p.Epoch())); err != nil {
			return err
		}
		d.declared = p.Epoch()
	}
	return d.send(p, "write", addr, values)
}

// checkOwner reads the owner-epoch block before the first write on a
// connection and refuses, sending nothing, when it holds a later epoch
// than epoch, or cannot be read: a block the runtime cannot read is an
// owner it cannot rule out. Callers hold mu.
func (d *Driver) checkOwner(epoch int64) error {
	words, err := d.client.ReadRegisters(*d.cfg.EpochRegister, 4, mb.HOLDING_REGISTER)
	if err != nil {
		if isTransport(err) {
			d.abortLocked()
		}
		return wrap("read the owner epoch", err)
	}
	if owner := DecodeEpoch(words); owner > epoch {
		return &driver.LaterOwnerError{Device: d.cfg.Name, Address: d.cfg.Address, OwnerEpoch: owner, Epoch: epoch}
	}
	return nil
}

// send puts one write request on the wire if the permit still holds, and
// resets the connection when the request fails on the transport: an
// unanswered write is never left queued behind (L3).
func (d *Driver) send(p *lease.Permit, op string, addr uint16, values []uint16) error {
	if !p.Valid() {
		return fmt.Errorf("modbus %s at epoch %d: %w", op, p.Epoch(), lease.ErrFenced)
	}
	err := d.client.WriteRegisters(addr, values)
	if err == nil {
		return nil
	}
	if isTransport(err) {
		d.abortLocked()
		return wrap(op, err)
	}
	return d.refusal(op, p.Epoch(), err)
}

// refusal turns a refused write into ErrStaleEpoch when the device's
// owner-epoch block is ahead of ours.
func (d *Driver) refusal(op string, epoch int64, err error) error {
	if isTransport(err) || d.cfg.EpochRegister == nil {
		return wrap(op, err)
	}
	if words, rerr := d.client.ReadRegisters(*d.cfg.EpochRegister, 4, mb.HOLDING_REGISTER); rerr == nil {
		if owner := DecodeEpoch(words); owner > epoch {
			return fmt.Errorf("%w: %s at epoch %d, device owner epoch %d", driver.ErrStaleEpoch, op, epoch, owner)
		}
	}
	return wrap(op, err)
}

// EncodeEpoch is the four big-endian registers of an epoch.
func EncodeEpoch(e int64) []uint16 {
	u := uint64(e)
	return []uint16{uint16(u >> 48), uint16(u >> 32), uint16(u >> 16), uint16(u)}
}

// DecodeEpoch reads four big-endian registers.
func DecodeEpoch(w []uint16) int64 {
	if len(w) != 4 {
		return 0
	}
	return int64(uint64(w[0])<<48 | uint64(w[1])<<32 | uint64(w[2])<<16 | uint64(w[3]))
}

// isTransport is true for errors that are not a Modbus exception answer.
func isTransport(err error) bool {
	var me mb.Error
	if !errors.As(err, &me) {
		return true
	}
	switch me {
	case mb.ErrIllegalFunction, mb.ErrIllegalDataAddress, mb.ErrIllegalDataValue, mb.ErrServerDeviceFailure,
		mb.ErrAcknowledge, mb.ErrServerDeviceBusy, mb.ErrMemoryParityError, mb.ErrGWPathUnavailable,
		mb.ErrGWTargetFailedToRespond:
		return false
	}
	return true
}

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if !isTransport(err) {
		return &driver.DeviceError{Op: op, Err: err}
	}
	return fmt.Errorf("modbus %s: %w", op, err)
}
