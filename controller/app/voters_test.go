package app

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestVotersRoleRefusesBadFlagsWithTheFlagNameAndNothingStarts(t *testing.T) {
	wantRefused(t, []refusal{
		{[]string{"--role=voters", "--voters-leader-election-lease-duration=5s"}, "--voters-leader-election-lease-duration (5s) must be greater than --voters-leader-election-renew-deadline (10s)"},
		{[]string{"--role=voters", "--voters-leader-election-retry-period=9s"}, "--voters-leader-election-renew-deadline (10s) must be greater than 1.2 x --voters-leader-election-retry-period (9s)"},
		{[]string{"--role=voters", "--voter-swap-lease-duration=5s"}, "--voter-swap-lease-duration (5s) must be at least 3 x --voter-swap-pass-interval (2s)"},
		{[]string{"--role=voters", "--voter-idle-pass-interval=30s"}, "--voter-idle-pass-interval (30s) must be at most 15s: the VoterPolicy status must be stamped that often or swaps are refused as stale"},
		{[]string{"--role=voters", "--etcd-peer-scheme=ftp"}, `--etcd-peer-scheme ("ftp") must be http or https`},
		{[]string{"--role=voters", "--etcd-peer-port=0"}, "--etcd-peer-port (0) must be between 1 and 65535"},
		{[]string{"--role=voters", "--snapshot-dir="}, "--snapshot-dir must not be empty"},
		{[]string{"--role=voters", "--keep-snapshots=0"}, "--keep-snapshots (0) must be at least 1"},
	})
}

func TestHelpListsTheVotersRole(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"--help"}, &out, &errOut); code != 0 {
		t.Fatalf("--help exited %d", code)
	}
	for _, want := range []string{"  voters           the etcd voter swap controller", "--voters-leader-election-id string (default holdfast-voters)",
		"--voter-swap-lease-duration duration (default 30s)", "--snapshot-dir string (default /var/lib/holdfast/snapshots)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

// TestSnapshotVolumeNamesWhatIsKnown: the snapshot location's volume part
// names the volume, the pod and its node, leaving out what is not known.
func TestSnapshotVolumeNamesWhatIsKnown(t *testing.T) {
	for _, tc := range []struct{ volume, ns, pod, node, want string }{
		{"persistentVolumeClaim/holdfast-snapshots", "holdfast", "holdfast-controller-voters-7d9-x2", "edge-a",
			"volume persistentVolumeClaim/holdfast-snapshots, pod holdfast/holdfast-controller-voters-7d9-x2, node edge-a"},
		{"emptyDir", "holdfast", "p", "", "volume emptyDir, pod holdfast/p"},
		{"", "", "", "", ""},
	} {
		if got := snapshotVolume(tc.volume, tc.ns, tc.pod, tc.node); got != tc.want {
			t.Errorf("snapshotVolume(%q, %q, %q, %q) = %q, want %q", tc.volume, tc.ns, tc.pod, tc.node, got, tc.want)
		}
	}
}
