package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/holdfast-io/holdfast/runtime/driver"
	"github.com/holdfast-io/holdfast/runtime/lease"
)

// device is one unit's plant device on the field network: last write wins
// (Config.OwnerEpochBlock makes it refuse an epoch below the highest seen,
// as the Modbus simulator's owner-epoch block does). It logs every write
// that reaches it, by true time, epoch and writer.
type device struct {
	s    *Sim
	unit string
	host *host
	regs map[uint16]uint16
	// highest is the highest epoch that wrote, and by whom.
	highest   int64
	highestBy string
	writes    int
	lastWrite map[string]time.Duration
}

// fieldWrite is one write on its way to the device.
type fieldWrite struct {
	from  *runtimeProc
	epoch int64
	kind  lease.WriteKind
	reg   uint16
	value uint16
}

// arrive applies a write that reached the device.
func (d *device) arrive(w fieldWrite) {
	s := d.s
	d.writes++
	d.lastWrite[w.from.id] = s.now
	if w.epoch < d.highest {
		s.violate(d.unit, fmt.Sprintf("a %s write of epoch %d from %s reached the device after epoch %d (%s) had written there",
			w.kind, w.epoch, w.from.id, d.highest, d.highestBy))
		if s.cfg.OwnerEpochBlock {
			return
		}
	}
	if w.epoch > d.highest {
		s.log(d.host, d.unit, kState, "device: first write of epoch %d, from %s", w.epoch, w.from.id)
		d.highest, d.highestBy = w.epoch, w.from.id
	}
	d.regs[w.reg] = w.value
}

// driverTimeout is the Modbus driver's request timeout: a write unanswered
// that long is given up and its connection reset (nothing late).
const driverTimeout = 5 * time.Second

// tcpGiveUp is how long the kernel retransmits what a dead process left in
// its socket.
const tcpGiveUp = 15 * time.Minute

// fieldDriver is the runtime's field driver on the simulated field network,
// with the Modbus driver's contract: the write path refuses a permit that
// lapsed before its bytes go out; a write on a cut link stays in the
// kernel, retransmitted, until the link heals, the driver's timeout resets
// the connection, or the fence aborts it (AbortWrites); a process that dies
// leaves it to the kernel.
type fieldDriver struct {
	rp        *runtimeProc
	dev       *device
	connected bool
	// queued is the write the device has not answered; one at a time, as
	// the scan waits on it.
	queued *queuedWrite
}

type queuedWrite struct {
	w     fieldWrite
	until time.Duration
	dead  bool
}

var (
	_ driver.Driver       = (*fieldDriver)(nil)
	_ driver.WriteAborter = (*fieldDriver)(nil)
)

func (f *fieldDriver) Name() string  { return "plc" }
func (f *fieldDriver) Network() bool { return false }
func (f *fieldDriver) Connect(context.Context) error {
	f.connected = true
	return nil
}
func (f *fieldDriver) Close() error {
	f.connected = false
	return nil
}
func (f *fieldDriver) Connected() bool { return f.connected }

func (f *fieldDriver) up() bool {
	s := f.rp.s
	return s.net.up(f.rp.n.host, f.dev.host, fieldNet) && s.net.up(f.dev.host, f.rp.n.host, fieldNet)
}

func (f *fieldDriver) ReadRegisters(_ context.Context, addr, count uint16) ([]uint16, error) {
	if !f.connected {
		return nil, driver.ErrNotConnected
	}
	if !f.up() {
		return nil, fmt.Errorf("modbus read: i/o timeout")
	}
	out := make([]uint16, count)
	for i := range out {
		out[i] = f.dev.regs[addr+uint16(i)]
	}
	return out, nil
}

func (f *fieldDriver) WriteRegisters(_ context.Context, p *lease.Permit, addr uint16, values []uint16) error {
	if !f.connected {
		return driver.ErrNotConnected
	}
	if f.queued != nil {
		return fmt.Errorf("modbus write: i/o timeout (a write is still unanswered)")
	}
	if !p.Valid() {
		return fmt.Errorf("modbus write at epoch %d: %w", p.Epoch(), lease.ErrFenced)
	}
	w := fieldWrite{from: f.rp, epoch: p.Epoch(), kind: p.Kind(), reg: addr, value: values[0]}
	f.rp.s.send(f, w)
	return nil
}

// AbortWrites resets the connection under an unanswered write: it never
// reaches the device.
func (f *fieldDriver) AbortWrites() {
	if q := f.queued; q != nil && !q.dead {
		f.queued = nil
		f.rp.s.log(f.rp.n.host, f.rp.unit, kState, "runtime %s: fence reset the field connection, an unanswered write discarded", f.rp.id)
	}
}

// send puts one write on the field network: at once when the link is up,
// otherwise into the kernel's queue.
func (s *Sim) send(f *fieldDriver, w fieldWrite) {
	n := f.rp.n.host
	if s.net.up(n, f.dev.host, fieldNet) {
		s.net.send(n, f.dev.host, fieldNet, func() { f.dev.arrive(w) })
		return
	}
	q := &queuedWrite{w: w, until: s.p(f.rp.p).trueAfter(s.now, driverTimeout)}
	f.queued = q
	s.fieldQueue = append(s.fieldQueue, queuedField{f: f, q: q})
}

// queuedField is a write left in a node's kernel.
type queuedField struct {
	f *fieldDriver
	q *queuedWrite
}

// flushField sends what the kernels hold on links that healed, and drops
// what was given up: the driver's timeout while its process lives, the
// kernel's retransmission limit after.
func (s *Sim) flushField() {
	kept := s.fieldQueue[:0]
	for _, e := range s.fieldQueue {
		f, q := e.f, e.q
		if !q.dead && !f.rp.p.alive {
			q.dead = true
			q.until = s.now + tcpGiveUp
		}
		switch {
		case f.queued != q && !q.dead:
			continue // aborted
		case s.now >= q.until:
			if f.queued == q {
				f.queued = nil
			}
			continue
		case s.net.up(f.rp.n.host, f.dev.host, fieldNet):
			if f.queued == q {
				f.queued = nil
			}
			w := q.w
			s.net.send(f.rp.n.host, f.dev.host, fieldNet, func() { f.dev.arrive(w) })
			if q.dead {
				s.log(f.rp.n.host, f.rp.unit, kState, "the kernel of %s delivered a write its dead runtime %s left (epoch %d)", f.rp.n.name, f.rp.id, w.epoch)
			}
			continue
		}
		kept = append(kept, e)
	}
	s.fieldQueue = kept
}

func (s *Sim) p(p *proc) *simClock { return p.clock() }
