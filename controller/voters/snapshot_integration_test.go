//go:build integration

package voters_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/voters"
	"github.com/holdfast-io/holdfast/test/etcdproc"
)

// testSnapshotVolume is what the test controllers are told holds their
// snapshot directory (--snapshot-volume).
const testSnapshotVolume = "volume persistentVolumeClaim/test-snapshots, pod holdfast-test/controller-0, node test-node"

// checkSnapshotAt: the record's location names the file in dir and what
// holds it, and the file there is the one recorded (size and sha256).
func checkSnapshotAt(t testing.TB, rec *holdfastv1.SnapshotRecord, dir string) {
	t.Helper()
	path := filepath.Join(dir, rec.Name)
	if want := voters.SnapshotLocation(path, testSnapshotVolume); rec.Location != want {
		t.Errorf("snapshot location %q, want %q", rec.Location, want)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the recorded snapshot: %v", err)
	}
	if sum := sha256.Sum256(b); int64(len(b)) != rec.SizeBytes || hex.EncodeToString(sum[:]) != rec.SHA256 {
		t.Errorf("the file at the recorded location is %d bytes, sha256 %x; the record says %d bytes, %s", len(b), sum, rec.SizeBytes, rec.SHA256)
	}
}

// TestTheSwapSnapshotRestoresAsDocumented follows docs/voter-swap.md's
// restore from a swap's snapshot on real etcd: the snapshot a swap takes
// (ClientEtcd.Snapshot from a voter, recorded with its location), its
// sha256 checked, restored with etcdutl's restore as a new single-member
// cluster, which starts and serves every key written before the snapshot
// at the recorded revision, as a cluster of its own (a new cluster ID).
func TestTheSwapSnapshotRestoresAsDocumented(t *testing.T) {
	c := newCluster(t, []string{"s1", "s2", "s3"}, nil)
	cli := c.client("s1", "s2", "s3")
	ctx := t.Context()
	for i := range 50 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/plant/key-%02d", i), fmt.Sprintf("value-%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	_, _, clusterID := etcdMembers(t, cli)

	dir := t.TempDir()
	e := &voters.ClientEtcd{}
	rec, err := e.Snapshot(ctx, c.hosts["s2"].member.ClientURL, filepath.Join(dir, voters.SnapshotFile("20260301T120000Z-s1-s4")))
	if err != nil {
		t.Fatal(err)
	}
	rec.Location = voters.SnapshotLocation(filepath.Join(dir, rec.Name), testSnapshotVolume)
	checkSnapshotAt(t, rec, dir)

	// The documented restore: the file at the location's path, its sha256
	// checked above, restored as a new single-member cluster.
	path, _, _ := strings.Cut(rec.Location, " (")
	ms, err := etcdproc.NewMembers("restored")
	if err != nil {
		t.Fatal(err)
	}
	m := ms[0]
	data := filepath.Join(t.TempDir(), "restored")
	if err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{SnapshotPath: path, Name: m.Name, OutputDataDir: data,
		PeerURLs: []string{m.PeerURL}, InitialCluster: etcdproc.InitialCluster(m), InitialClusterToken: "holdfast-restore"}); err != nil {
		t.Fatalf("restore: %v", err)
	}
	cmd := etcdproc.Command(c.bin, m, data, etcdproc.InitialCluster(m), "new")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	rcli, err := etcdproc.Client(m)
	if err != nil {
		t.Fatal(err)
	}
	defer rcli.Close()
	hctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := etcdproc.WaitHealthy(hctx, rcli); err != nil {
		t.Fatal(err)
	}
	resp, err := rcli.Get(ctx, "/plant/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 50 || string(resp.Kvs[49].Value) != "value-49" {
		t.Errorf("restored %d keys, want the 50 written", len(resp.Kvs))
	}
	if resp.Header.Revision < rec.Revision {
		t.Errorf("restored store at revision %d, older than the recorded %d", resp.Header.Revision, rec.Revision)
	}
	voterNames, _, id := etcdMembers(t, rcli)
	if len(voterNames) != 1 || id == clusterID {
		t.Errorf("restored cluster: voters %v, cluster %x; want one member in a new cluster (not %x)", voterNames, id, clusterID)
	}
}
