package runtime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	"github.com/holdfast-io/holdfast/runtime/driver"
	"github.com/holdfast-io/holdfast/runtime/lease"
	"github.com/holdfast-io/holdfast/runtime/state"
)

// restore reads the state file before anything is opened (L10). A snapshot
// of this binding (same unit and epoch) is a restart in place: its
// operating point is installed before the first scan. Anything else (no
// file, another epoch, an unreadable file) leaves the runtime to adopt the
// operating point from the device before its first write: a promotion
// must not remember.
func (r *Runtime) restore() error {
	if r.cfg.StateDir == "" {
		return nil
	}
	d, err := state.Open(r.cfg.StateDir)
	if err != nil {
		return err
	}
	r.state = d
	snap, ok, err := d.Load()
	switch {
	case err != nil:
		r.log.Error(err, "State file unreadable; the operating point will be adopted from the device")
	case !ok:
		r.log.Info("No state file; the operating point will be adopted from the device before the first write")
	case snap.Unit != r.cfg.Lease.Unit || snap.Epoch != r.cfg.Lease.Epoch:
		r.log.Info("State file is from another binding; a promotion adopts the operating point from the device",
			"stateUnit", snap.Unit, "stateEpoch", snap.Epoch)
	default:
		r.mu.Lock()
		for _, o := range r.cfg.Outputs {
			if v, ok := snap.Outputs[o.Name]; ok {
				r.op[o.Name] = v
			}
		}
		complete := len(r.op) == len(r.cfg.Outputs)
		r.ready, r.restored = complete, complete
		r.mu.Unlock()
		if !complete {
			r.log.Info("State file lacks some outputs; the operating point will be adopted from the device")
			return nil
		}
		r.metrics.Adoptions.WithLabelValues("restored").Inc()
		r.log.Info("Restored the operating point from the state file before the first scan",
			"savedAt", snap.SavedAt, "outputs", snap.Outputs)
	}
	return nil
}

func (r *Runtime) scanLoop(ctx context.Context) {
	t := r.clock.NewTicker(r.cfg.ScanInterval)
	defer t.Stop()
	for {
		changed := r.keeper.Changed()
		r.scan(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-changed:
			// a lease transition is acted on at once: the hold is written at
			// the deadline, not at the next tick
		}
	}
}

// scan reads the inputs, then according to the lease state writes the
// hold values, or adopts the operating point and runs the program, or
// writes nothing; reads go on in every state.
func (r *Runtime) scan(ctx context.Context) {
	start := time.Now()
	inputs := map[string]uint16{}
	for _, in := range r.cfg.Inputs {
		v, err := r.drivers[in.Device].ReadRegisters(ctx, in.Register, 1)
		if err == nil && len(v) == 1 {
			inputs[in.Name] = v[0]
		}
	}
	switch r.keeper.State() {
	case leaseapi.Holding:
		r.hold(ctx)
	case leaseapi.Held, leaseapi.Autonomous:
		r.mu.Lock()
		r.holdApplied = false
		ready := r.ready
		r.mu.Unlock()
		if ready || r.adopt(ctx) {
			r.control(ctx, inputs)
		}
	}
	r.mu.Lock()
	r.lastScan = r.clock.Now()
	r.lastInputs = inputs
	op := maps.Clone(r.op)
	r.mu.Unlock()
	r.metrics.ScanDuration.Observe(time.Since(start).Seconds())
	if t := r.telemetry(); t != nil {
		t.PublishValues(map[string]any{"outputs": op, "inputs": inputs})
	}
}

// adopt reads the operating point the device holds before the first write
// of a promoted runtime (L10, ADR 0082). Where the device cannot answer for
// every output it writes nothing, so the coupler goes on holding.
func (r *Runtime) adopt(ctx context.Context) bool {
	op := map[string]uint16{}
	for _, o := range r.cfg.Outputs {
		v, err := r.drivers[o.Device].ReadRegisters(ctx, o.Register, 1)
		if err != nil || len(v) != 1 {
			r.metrics.Adoptions.WithLabelValues("refused").Inc()
			r.log.Info("The device cannot answer its operating point; writing nothing until it can",
				"output", o.Name, "device", o.Device, "err", err)
			return false
		}
		op[o.Name] = v[0]
	}
	r.mu.Lock()
	r.op, r.ready = op, true
	r.mu.Unlock()
	r.metrics.Adoptions.WithLabelValues("adopted").Inc()
	r.log.Info("Adopted the operating point the device holds", "outputs", op)
	return true
}

// control runs the program and writes its outputs.
func (r *Runtime) control(ctx context.Context, inputs map[string]uint16) {
	next := r.cfg.Program.Scan(r.OperatingPoint(), inputs)
	changed := false
	for _, o := range r.cfg.Outputs {
		v, ok := next[o.Name]
		if !ok {
			continue
		}
		if err := r.write(ctx, lease.WriteControl, o, v, false); err != nil {
			if errors.Is(err, lease.ErrFenced) {
				return // the lease moved on under the scan; the next scan acts on it
			}
			continue
		}
		r.mu.Lock()
		if r.op[o.Name] != v {
			changed = true
		}
		r.op[o.Name] = v
		r.mu.Unlock()
	}
	if changed {
		r.save()
	}
}

// hold drives every output that has a hold value to it, once per hold.
func (r *Runtime) hold(ctx context.Context) {
	r.mu.Lock()
	done := r.holdApplied
	r.mu.Unlock()
	if done {
		return
	}
	all := true
	for _, o := range r.cfg.Outputs {
		if o.Hold == nil {
			continue
		}
		if err := r.write(ctx, lease.WriteHold, o, *o.Hold, false); err != nil {
			all = false
			if errors.Is(err, lease.ErrFenced) {
				break
			}
		}
	}
	if all {
		r.log.Info("Outputs driven to their hold values")
	}
	r.mu.Lock()
	r.holdApplied = all
	r.mu.Unlock()
}

// write is the single guarded write path: a permit from the Keeper, read
// on the clock at this instant, or no write at all; the permit's epoch goes
// to the device with the write; the fence waits for the permit's release.
// needReady also refuses until the operating point is adopted or restored.
func (r *Runtime) write(ctx context.Context, kind lease.WriteKind, o Output, v uint16, needReady bool) error {
	p, err := r.keeper.Acquire(kind)
	if err != nil {
		r.metrics.Writes.WithLabelValues(kind.String(), "refused").Inc()
		return err
	}
	defer p.Release()
	if needReady {
		r.mu.Lock()
		ready := r.ready
		r.mu.Unlock()
		if !ready {
			return fmt.Errorf("output %s: the operating point has not been adopted yet", o.Name)
		}
	}
	err = r.drivers[o.Device].WriteRegisters(ctx, p, o.Register, []uint16{v})
	var later *driver.LaterOwnerError
	switch {
	case errors.As(err, &later):
		r.metrics.Writes.WithLabelValues(kind.String(), "later_owner").Inc()
		r.noteLaterOwner(o.Device, later)
		return err
	case err != nil:
		r.metrics.Writes.WithLabelValues(kind.String(), "failed").Inc()
		r.log.V(2).Info("Output write failed", "output", o.Name, "err", err)
		return err
	}
	r.noteLaterOwner(o.Device, nil)
	r.metrics.Writes.WithLabelValues(kind.String(), "written").Inc()
	return nil
}

// noteLaterOwner records what the last write attempt on device learnt of
// its owner epoch: later than this runtime's (it wrote nothing), or not
// (nil: it wrote). The lease endpoint reports the record (L13).
func (r *Runtime) noteLaterOwner(device string, e *driver.LaterOwnerError) {
	r.mu.Lock()
	prev, had := r.laterOwners[device]
	if e == nil {
		delete(r.laterOwners, device)
	} else {
		r.laterOwners[device] = leaseapi.LaterOwner{Device: device, Address: e.Address, OwnerEpoch: e.OwnerEpoch}
	}
	r.mu.Unlock()
	switch {
	case e != nil && (!had || prev.OwnerEpoch != e.OwnerEpoch):
		r.log.Info("The device holds a later owner epoch than this runtime's: writing nothing to it",
			"device", device, "address", e.Address, "ownerEpoch", e.OwnerEpoch)
	case e == nil && had:
		r.log.Info("The device's owner epoch is no longer later than this runtime's: writing to it again", "device", device)
	}
}

// LaterOwners lists the devices this runtime writes nothing to because
// their owner epoch is later than its own, by device name.
func (r *Runtime) LaterOwners() []leaseapi.LaterOwner {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]leaseapi.LaterOwner, 0, len(r.laterOwners))
	for _, d := range slices.Sorted(maps.Keys(r.laterOwners)) {
		out = append(out, r.laterOwners[d])
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// WriteOutput writes one output through the guarded path, for an embedder
// acting outside the program (an operator's command, say). It refuses
// until the operating point has been adopted or restored.
func (r *Runtime) WriteOutput(ctx context.Context, name string, v uint16) error {
	for _, o := range r.cfg.Outputs {
		if o.Name != name {
			continue
		}
		if err := r.write(ctx, lease.WriteControl, o, v, true); err != nil {
			return err
		}
		r.mu.Lock()
		r.op[name] = v
		r.mu.Unlock()
		r.save()
		return nil
	}
	return fmt.Errorf("output %s: no such output", name)
}

func (r *Runtime) save() {
	if r.state == nil {
		return
	}
	r.mu.Lock()
	snap := state.Snapshot{Unit: r.cfg.Lease.Unit, Epoch: r.keeper.Epoch(), PodUID: r.cfg.Lease.Incarnation.PodUID,
		Outputs: maps.Clone(r.op), SavedAt: time.Now().UTC()}
	r.mu.Unlock()
	if err := r.state.Save(snap); err != nil {
		r.log.Error(err, "Failed to save the state file")
	}
}
