package chart

import (
	"slices"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestTheVotersRoleNamesItsSnapshotVolume: the voters role is told what
// holds its snapshots (--snapshot-volume), which each VoterSwap records
// with the pod and its node (NODE_NAME) as status.snapshot.location.
func TestTheVotersRoleNamesItsSnapshotVolume(t *testing.T) {
	ch, err := Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		values string
		want   string
	}{
		{"controller: {voters: {enabled: true}}", "--snapshot-volume=emptyDir"},
		{"controller: {voters: {enabled: true, snapshotVolume: {persistentVolumeClaim: {claimName: holdfast-snapshots}}}}",
			"--snapshot-volume=persistentVolumeClaim/holdfast-snapshots"},
		{"controller: {voters: {enabled: true, snapshotVolume: {nfs: {server: nas.plant, path: /snapshots}}}}", "--snapshot-volume=nfs"},
	} {
		var v map[string]any
		if err := yaml.Unmarshal([]byte(tc.values), &v); err != nil {
			t.Fatal(err)
		}
		ms, _, err := Render(ch, v)
		if err != nil {
			t.Fatalf("%s: %v", tc.values, err)
		}
		if args := containerArgs(t, ms, "controller-voters"); !slices.Contains(args, tc.want) {
			t.Errorf("%s: voters args %v lack %s", tc.values, args, tc.want)
		}
	}
}
