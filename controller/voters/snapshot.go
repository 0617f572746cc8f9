package voters

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/atomicfile"
)

// SnapshotFile is the file name of a swap's snapshot.
func SnapshotFile(swapID string) string { return "holdfast-" + swapID + ".db" }

// Snapshot implements Etcd: the member's Maintenance.Snapshot stream is
// written to path (through path.part, fsynced, then renamed) and verified
// before it is recorded: etcd's own digest at the end of the stream matches
// the data, etcdutl's snapshot status opens it as a bbolt store and checks
// it (revision, keys, hash), and its revision is not older than the
// member's own just before the stream began. The sha256 recorded is of the
// whole file.
func (e *ClientEtcd) Snapshot(ctx context.Context, endpoint, path string) (*holdfastv1.SnapshotRecord, error) {
	st, _ := e.timeouts()
	cli, err := e.client([]string{endpoint})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	sctx, cancel := context.WithTimeout(ctx, st)
	before, err := cli.Status(sctx, endpoint)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("status of %s before the snapshot: %w", endpoint, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	part := path + ".part"
	defer os.Remove(part)
	f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	resp, err := cli.SnapshotWithVersion(ctx)
	if err != nil {
		return nil, fmt.Errorf("snapshot stream from %s: %w", endpoint, err)
	}
	defer resp.Snapshot.Close()
	whole := sha256.New()
	tail := &digestTail{h: sha256.New()}
	size, err := io.Copy(io.MultiWriter(f, whole, tail), resp.Snapshot)
	if err != nil {
		return nil, fmt.Errorf("snapshot stream from %s: %w", endpoint, err)
	}
	if err := tail.verify(size); err != nil {
		return nil, fmt.Errorf("snapshot from %s: %w", endpoint, err)
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	if err := os.Rename(part, path); err != nil {
		return nil, err
	}
	// The snapshot is the swap's way back: its rename must survive a crash.
	if err := atomicfile.SyncDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("snapshot %s: syncing its directory: %w", path, err)
	}
	status, err := snapshot.NewV3(zap.NewNop()).Status(path)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s does not pass etcdutl's status check: %w", path, err)
	}
	// etcdutl reads the revision off the newest key: a store with no key
	// at all (a new cluster) reports 0 whatever its header says.
	if status.TotalKey > 0 && status.Revision < before.Header.Revision {
		return nil, fmt.Errorf("snapshot %s holds revision %d, older than the member's %d before it was taken", path, status.Revision, before.Header.Revision)
	}
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if info.Size() != size {
		return nil, fmt.Errorf("snapshot %s is %d bytes on disk, %d were streamed", path, info.Size(), size)
	}
	return &holdfastv1.SnapshotRecord{Name: filepath.Base(path), SizeBytes: size, SHA256: hex.EncodeToString(whole.Sum(nil)),
		Revision: status.Revision, TakenAt: &metav1.Time{Time: time.Now()}}, nil
}

// VerifySnapshot checks that the file at path is the snapshot rec records:
// its size, the sha256 of the whole file and, opened by etcdutl's snapshot
// status, its revision. A controller that restarted mid-swap runs it before
// going on: its volume may be another pod's, or new.
func VerifySnapshot(path string, rec *holdfastv1.SnapshotRecord) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("recorded snapshot %s: %w", rec.Name, err)
	}
	defer f.Close()
	h := sha256.New()
	size, err := io.Copy(h, f)
	if err != nil {
		return fmt.Errorf("recorded snapshot %s: reading %s: %w", rec.Name, path, err)
	}
	if size != rec.SizeBytes {
		return fmt.Errorf("recorded snapshot %s: %s is %d bytes, %d were recorded", rec.Name, path, size, rec.SizeBytes)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != rec.SHA256 {
		return fmt.Errorf("recorded snapshot %s: %s has sha256 %s, %s was recorded", rec.Name, path, sum, rec.SHA256)
	}
	status, err := snapshot.NewV3(zap.NewNop()).Status(path)
	if err != nil {
		return fmt.Errorf("recorded snapshot %s: %s does not pass etcdutl's status check: %w", rec.Name, path, err)
	}
	if status.Revision != rec.Revision {
		return fmt.Errorf("recorded snapshot %s: %s holds revision %d, %d was recorded", rec.Name, path, status.Revision, rec.Revision)
	}
	return nil
}

// SnapshotLocation is a snapshot's recorded location: its path, then what
// holds it (SnapshotVolume).
func SnapshotLocation(path, volume string) string {
	if volume == "" {
		volume = "volume not named (--snapshot-volume)"
	}
	return path + " (" + volume + ")"
}

// digestTail hashes all but the last sha256.Size bytes written to it and
// keeps those last bytes: etcd appends the sha256 of the store to the
// snapshot stream.
type digestTail struct {
	h    hash.Hash
	last []byte
}

func (d *digestTail) Write(p []byte) (int, error) {
	buf := append(d.last, p...)
	if len(buf) > sha256.Size {
		d.h.Write(buf[:len(buf)-sha256.Size])
		buf = buf[len(buf)-sha256.Size:]
	}
	d.last = append([]byte(nil), buf...)
	return len(p), nil
}

func (d *digestTail) verify(size int64) error {
	// etcd's own rule (etcdutl, client/v3/snapshot): a stream with a digest
	// is a whole number of 512-byte sectors plus the digest.
	if size%512 != sha256.Size {
		return fmt.Errorf("no sha256 digest at the end of the %d-byte stream", size)
	}
	if !bytes.Equal(d.h.Sum(nil), d.last) {
		return errors.New("the stream's sha256 digest does not match its data")
	}
	return nil
}

// PruneSnapshots keeps the newest keep snapshot files in dir.
func PruneSnapshots(dir string, keep int) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "holdfast-") && strings.HasSuffix(e.Name(), ".db") {
			names = append(names, e.Name())
		}
	}
	// Swap IDs start with their UTC time: name order is age order.
	sort.Strings(names)
	var errs []error
	for len(names) > keep {
		errs = append(errs, os.Remove(filepath.Join(dir, names[0])))
		names = names[1:]
	}
	return errors.Join(errs...)
}
