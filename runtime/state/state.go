// Package state is the runtime's state file: the operating point a restart
// in place restores before its first scan (L10), and the count of starts
// that gives the runtime its incarnation when no restart count is passed.
// Every write is atomic: a temporary file, fsync, rename, fsync of the
// directory, so a crash leaves the old file or the new one, never half.
package state

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/holdfast-io/holdfast/internal/atomicfile"
)

// Snapshot is what a runtime saves after every scan that changed it.
type Snapshot struct {
	Unit  string `json:"unit"`
	Epoch int64  `json:"epoch"`
	// PodUID of the runtime that wrote it.
	PodUID string `json:"podUID,omitempty"`
	// Outputs is the operating point: the value each output commands.
	Outputs map[string]uint16 `json:"outputs"`
	SavedAt time.Time         `json:"savedAt"`
}

// Starts counts the starts of the runtime in one pod.
type Starts struct {
	PodUID string `json:"podUID"`
	Count  int32  `json:"count"`
}

const (
	snapshotFile = "state.json"
	startsFile   = "starts.json"
)

// Dir is a state directory.
type Dir struct{ path string }

// Open creates the directory if needed.
func Open(path string) (*Dir, error) {
	if err := os.MkdirAll(path, 0o750); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	return &Dir{path: path}, nil
}

// Path of the directory.
func (d *Dir) Path() string { return d.path }

// Load reads the snapshot; ok is false when there is none.
func (d *Dir) Load() (s Snapshot, ok bool, err error) {
	ok, err = d.read(snapshotFile, &s)
	return s, ok, err
}

// Save writes the snapshot atomically.
func (d *Dir) Save(s Snapshot) error { return d.write(snapshotFile, s) }

// CountStart records one start of the runtime in pod podUID and returns
// how many starts came before it in that pod: the container's restart
// count when the directory lives as long as the pod (an emptyDir) and the
// runtime is the container's process. A directory left by another pod
// starts the count again.
func (d *Dir) CountStart(podUID string) (int32, error) {
	var st Starts
	if _, err := d.read(startsFile, &st); err != nil {
		return 0, err
	}
	before := int32(0)
	if st.PodUID == podUID {
		before = st.Count
	}
	return before, d.write(startsFile, Starts{PodUID: podUID, Count: before + 1})
}

func (d *Dir) read(name string, v any) (bool, error) {
	return atomicfile.ReadJSON(d.path, name, v)
}

// write replaces a state file atomically; Open created the directory. The
// files are 0600, as only the runtime reads them.
func (d *Dir) write(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return atomicfile.Write(d.path, name, b, 0o600)
}
