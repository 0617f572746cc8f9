package lease

// A warm standby (docs/design.md §3, Warm standby) is a runtime started
// with Config.Warm: it connects and reads like any, in the state Warm, and
// permits no write until the authorised grantor's first grant for its unit
// binds it to an epoch.

// Warm reports whether this runtime is a warm standby bound to no epoch
// yet.
func (k *Keeper) Warm() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.warm
}

// Bind checks a grant's unit and epoch against this runtime's binding,
// and returns the epoch it is bound to and whether the grant is for it. A
// warm runtime is bound to none: the first grant for its unit, at an epoch
// of at least 1, binds it to that epoch for good, and from then on it is an
// ordinary runtime of that epoch, Ungranted until a grant extends its lease
// (the binding grant carries no anchor this runtime issued, so it anchors
// and extends nothing, L1). The handler calls Bind only for a grant from
// the authorised grantor (L12), so nothing else chooses a warm runtime's
// epoch.
func (k *Keeper) Bind(unit string, epoch int64) (int64, bool) {
	k.mu.Lock()
	if unit != k.cfg.Unit || !k.warm || epoch < 1 {
		cur := k.epoch
		k.mu.Unlock()
		return cur, unit == k.cfg.Unit && epoch == cur && cur >= 1
	}
	// Warm permits no write, so none is in flight and the move to
	// Ungranted needs no draining.
	now := k.clock.Now()
	k.warm, k.epoch = false, epoch
	tr := k.setLocked(k.stateAt(now), now)
	k.mu.Unlock()
	k.log.Info("Warm standby bound to its epoch by the grantor's first grant: Ungranted until a grant extends its lease", "boundEpoch", epoch)
	k.notify(*tr)
	return epoch, true
}
