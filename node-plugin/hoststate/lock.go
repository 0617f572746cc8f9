package hoststate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// LockFile under Dir is flocked by Lock.
const LockFile = ".lock"

// Lock takes the host's member lock and returns its release. The tombstone
// check (read the member, ask etcd, write the tombstone) and finish-demote /
// rollback (move the data aside, retire the tombstone, clear the member)
// each hold it from start to end, so a check that read the member before a
// finish-demote can never write its tombstone after it (a live tombstone
// on a host finished to an agent refuses every later promote). It is an
// flock on Dir/.lock, so it also holds across two holdfast-node processes
// on one host (a DaemonSet rollout with surge).
func (s State) Lock() (func(), error) {
	unlock, _, err := s.lock(true)
	return unlock, err
}

// TryLock takes the member lock only if it is free: ok is false, and
// nothing is held, when another holder has it.
func (s State) TryLock() (unlock func(), ok bool, err error) { return s.lock(false) }

func (s State) lock(wait bool) (func(), bool, error) {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return nil, false, err
	}
	f, err := os.OpenFile(filepath.Join(s.Dir, LockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, false, err
	}
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) && !wait {
		f.Close()
		return nil, false, nil
	}
	if errors.Is(err, unix.EWOULDBLOCK) {
		if s.OnLockWait != nil {
			s.OnLockWait()
		}
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
	}
	if err != nil {
		f.Close()
		return nil, false, fmt.Errorf("locking %s: %w", f.Name(), err)
	}
	return func() { _ = f.Close() }, true, nil // closing the descriptor releases the flock
}

// LockAsAgent takes the host's member lock and writes the role file agent,
// and returns the lock's release: how finish-demote and rollback begin,
// whichever actuator runs them, so the role file says agent before any
// server is stopped or any member data moved.
func (s State) LockAsAgent() (func(), error) {
	unlock, err := s.Lock()
	if err != nil {
		return nil, err
	}
	if err := s.SetRole(holdfastv1.RoleAgent); err != nil {
		unlock()
		return nil, err
	}
	return unlock, nil
}
