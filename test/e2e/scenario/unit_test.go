package scenario

import (
	"strings"
	"testing"
	"time"

	"github.com/holdfast-io/holdfast/test/devicesim"
)

// TestCheckNoTwoWriters holds the drills' one-writer judgement: with the
// runtime's reset-on-fence (L3) nothing of a fenced epoch reaches the device
// after the next epoch wrote, so any such request is a stale writer, even
// one the device's owner-epoch block refused on a connection it saw before.
func TestCheckNoTwoWriters(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	w := func(s float64, peer string, epoch int64, accepted bool) devicesim.Write {
		return devicesim.Write{Time: at(s), Peer: peer, Epoch: epoch, Register: 100, Accepted: accepted}
	}
	for _, tc := range []struct {
		name string
		log  []devicesim.Write
		want string // in the error; "" for none
	}{
		{"one epoch after the other", []devicesim.Write{w(0, "a:1", 1, true), w(1, "a:1", 1, true), w(20, "b:1", 2, true), w(21, "b:1", 2, true)}, ""},
		{"the new epoch refused before it declared", []devicesim.Write{w(0, "a:1", 1, true), w(20, "b:1", 2, false), w(21, "b:1", 2, true)}, ""},
		{"interleaved", []devicesim.Write{w(0, "a:1", 1, true), w(20, "b:1", 2, true), w(21, "a:1", 1, true)}, "epoch 1 wrote"},
		{"a late request on the old connection, refused", []devicesim.Write{w(0, "a:1", 1, true), w(20, "b:1", 2, true), w(90, "a:1", 1, false)}, "epoch 1 tried to write register 100"},
		{"a stale runtime dialling again, refused", []devicesim.Write{w(0, "a:1", 1, true), w(20, "b:1", 2, true), w(40, "a:2", 1, false)}, "from a:2 after epoch 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckNoTwoWriters(tc.log)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("CheckNoTwoWriters: %v, want none", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("CheckNoTwoWriters: %v, want an error naming %q", err, tc.want)
			}
		})
	}
}
