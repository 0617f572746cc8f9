// Package atomicfile writes small state files so that a crash at any point
// leaves either the old content or the new, never a torn mix: the data goes
// to a temporary file in the same directory, is fsynced, renamed over the
// target, and the directory is fsynced so the rename itself survives.
// The node plugin's host files and the runtime's state file both rely on it.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write replaces dir/name with data, mode perm exactly (no umask). dir must
// exist: where it lives and its mode are the caller's. On an error before
// the rename the temporary file is removed and dir/name is untouched; every
// error names dir/name.
func Write(dir, name string, data []byte, perm os.FileMode) (err error) {
	target := filepath.Join(dir, name)
	defer func() {
		if err != nil {
			err = fmt.Errorf("writing %s: %w", target, err)
		}
	}()
	// A dot name keeps a leftover from a crash out of plain listings; it is
	// never read, as readers open the target only.
	f, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return err
	}
	renamed := false
	defer func() {
		if !renamed {
			_ = os.Remove(f.Name())
		}
	}()
	if err := writeSync(f, data, perm); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), target); err != nil {
		return err
	}
	renamed = true
	return SyncDir(dir)
}

// writeSync writes, sets the mode, fsyncs and closes f: the content must be
// on disk before the rename makes it the target.
func writeSync(f *os.File, data []byte, perm os.FileMode) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// SyncDir fsyncs a directory, so that a rename, creation or removal of an
// entry in it survives a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
