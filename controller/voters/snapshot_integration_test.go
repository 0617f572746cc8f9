//go:build integration

package voters_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

// TestARecordedSnapshotIsVerifiedBySizeHashAndRevision: VerifySnapshot
// accepts the file a swap's snapshot recorded, and refuses it when it is
// missing or when its size, sha256 or revision differ from the record.
func TestARecordedSnapshotIsVerifiedBySizeHashAndRevision(t *testing.T) {
	c := newCluster(t, []string{"s1", "s2", "s3"}, nil)
	cli := c.client("s1", "s2", "s3")
	for i := range 20 {
		if _, err := cli.Put(t.Context(), fmt.Sprintf("/plant/key-%02d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	path := filepath.Join(dir, voters.SnapshotFile("20260301T120000Z-s1-s4"))
	rec, err := (&voters.ClientEtcd{}).Snapshot(t.Context(), c.hosts["s2"].member.ClientURL, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := voters.VerifySnapshot(path, rec); err != nil {
		t.Fatalf("the snapshot as recorded: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(r *holdfastv1.SnapshotRecord) string
		says   string
	}{
		{"missing", func(*holdfastv1.SnapshotRecord) string { return filepath.Join(dir, "gone.db") }, "no such file"},
		{"size", func(r *holdfastv1.SnapshotRecord) string { r.SizeBytes++; return path }, "bytes"},
		{"sha256", func(r *holdfastv1.SnapshotRecord) string { r.SHA256 = strings.Repeat("0", 64); return path }, "sha256"},
		{"revision", func(r *holdfastv1.SnapshotRecord) string { r.Revision++; return path }, "revision"},
	} {
		r := rec.DeepCopy()
		p := tc.mutate(r)
		if err := voters.VerifySnapshot(p, r); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s differs: VerifySnapshot = %v, want an error saying %q", tc.name, err, tc.says)
		}
	}
}

// TestARestartedVotersRoleVerifiesItsSnapshotBeforeGoingOn: a voters role
// that restarts mid-swap (after the snapshot, before the candidate's
// learner) finds the recorded snapshot on its volume and verifies its size,
// sha256 and revision before any further step; a file that does not match
// its record is replaced by a new verified snapshot first. The swap then
// completes, and the record names the file on the volume.
func TestARestartedVotersRoleVerifiesItsSnapshotBeforeGoingOn(t *testing.T) {
	for _, tc := range []struct {
		name   string
		names  []string
		damage bool
	}{
		{"the file intact", []string{"g1", "g2", "g3", "g4"}, false},
		{"the file altered", []string{"h1", "h2", "h3", "h4"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, tc.names[:3], tc.names[3:])
			c.policy(t, nil)
			dir := t.TempDir()
			ctl := startController(t, ctrlOpts{snapshotDir: dir, crashAfter: func(a voters.Action) bool { return a.Kind == voters.Cordon }})
			waitHealthyStatus(t, tc.names[:3]...)
			name := createSwap(t, tc.names[0], tc.names[3])
			select {
			case <-ctl.crashed:
			case <-time.After(2 * time.Minute):
				t.Fatalf("no cordon within 2m: %s", describe(getSwap(t, name)))
			}
			ctl.stop()
			before := getSwap(t, name).Status.Snapshot
			if before == nil {
				t.Fatal("no snapshot recorded before the cordon")
			}
			if tc.damage {
				path := filepath.Join(dir, before.Name)
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				b[len(b)/2] ^= 0xff
				if err := os.WriteFile(path, b, 0o600); err != nil {
					t.Fatal(err)
				}
			}

			ctl = startController(t, ctrlOpts{snapshotDir: dir})
			s := waitPhase(t, name, holdfastv1.SwapSucceeded, 3*time.Minute)
			checkSnapshotAt(t, s.Status.Snapshot, dir)
			check, added := -1, -1
			var checks []string
			for i, h := range s.Status.History {
				switch h.Reason {
				case holdfastv1.SwapReasonSnapshotVerified, holdfastv1.SwapReasonSnapshotLost:
					checks = append(checks, h.Reason)
					check = i
				case holdfastv1.SwapReasonLearnerAdded:
					if added < 0 {
						added = i
					}
				}
			}
			want := holdfastv1.SwapReasonSnapshotVerified
			if tc.damage {
				want = holdfastv1.SwapReasonSnapshotLost
			}
			if !slices.Equal(checks, []string{want}) || added < check {
				t.Fatalf("snapshot checks %v (at %d, learner added at %d), want one %s before the learner:\n%s", checks, check, added, want, history(s))
			}
			same := s.Status.Snapshot.SHA256 == before.SHA256 && s.Status.Snapshot.TakenAt.Equal(before.TakenAt)
			if same == tc.damage {
				t.Errorf("snapshot record %+v after the restart, %+v before: want it kept when intact, replaced when altered", s.Status.Snapshot, before)
			}
		})
	}
}
