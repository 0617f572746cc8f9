package devicesim

import (
	"strings"
	"testing"
	"time"
)

// TestTurnsHoldOneWriterAtATime is the drills' one-writer judgement, on a
// log from each mode: an OwnerEpoch device tells writers by the epoch each
// request carries, a Plain device only by its connection and the true time. A
// fixture of two runtimes writing one after the other passes; each mutation
// is a stale writer the judgement must name.
func TestTurnsHoldOneWriterAtATime(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	a := Writer{Name: "epoch 1 on edge-a", Host: "198.18.1.11", Epoch: 1}
	b := Writer{Name: "epoch 2 on edge-b", Host: "198.18.1.12", Epoch: 2}
	writers := []Writer{a, b}
	// req is a request as each mode logs it: with the writer's epoch, or
	// none.
	req := func(mode Mode, s float64, who Writer, port string, accepted bool) Write {
		w := Write{Time: at(s), Peer: who.Host + ":" + port, Register: 100, Accepted: accepted}
		if mode == OwnerEpoch {
			w.Epoch = who.Epoch
		}
		return w
	}
	for _, mode := range Modes {
		for _, tc := range []struct {
			name string
			log  func() []Write
			want string // in the error; "" for none
		}{
			{"one runtime after the other", func() []Write {
				return []Write{req(mode, 0, a, "1", true), req(mode, 1, a, "1", true), req(mode, 20, b, "1", true), req(mode, 21, b, "1", true)}
			}, ""},
			{"the old runtime's connection dialled again before the new one wrote", func() []Write {
				return []Write{req(mode, 0, a, "1", true), req(mode, 5, a, "2", true), req(mode, 20, b, "1", true)}
			}, ""},
			{"logged out of time order", func() []Write {
				return []Write{req(mode, 20, b, "1", true), req(mode, 0, a, "1", true)}
			}, ""},
			{"interleaved", func() []Write {
				return []Write{req(mode, 0, a, "1", true), req(mode, 20, b, "1", true), req(mode, 21, a, "1", true)}
			}, "epoch 1 on edge-a wrote register 100"},
			{"a late request on the old connection", func() []Write {
				return []Write{req(mode, 0, a, "1", true), req(mode, 20, b, "1", true), req(mode, 90, a, "1", mode == Plain)}
			}, "after epoch 2 on edge-b had written at " + at(20).Format(time.RFC3339Nano)},
			{"a stale runtime dialling again", func() []Write {
				return []Write{req(mode, 0, a, "1", true), req(mode, 20, b, "1", true), req(mode, 40, a, "2", mode == Plain)}
			}, "from 198.18.1.11:2 after epoch 2"},
			{"a third writer nobody bound", func() []Write {
				c := Writer{Name: "epoch 3", Host: "198.18.1.13", Epoch: 3}
				return []Write{req(mode, 0, a, "1", true), req(mode, 20, b, "1", true), req(mode, 30, c, "1", true)}
			}, map[Mode]string{OwnerEpoch: "", Plain: "a request from 198.18.1.13:1"}[mode]},
		} {
			t.Run(string(mode)+"/"+tc.name, func(t *testing.T) {
				turns, err := Turns(tc.log(), writers, nil)
				switch {
				case tc.want == "" && err != nil:
					t.Fatalf("Turns: %v, want none", err)
				case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
					t.Fatalf("Turns: %v, want an error naming %q", err, tc.want)
				}
				if first, ok := Of(turns, 1); !ok || first.Writer != a || !first.First.Equal(at(0)) {
					t.Fatalf("epoch 1's turn %+v (found %v), want it from %s", first, ok, at(0))
				}
			})
		}
	}
	// Epoch 2's request from edge-a's address is no runtime's.
	if _, err := Turns([]Write{{Time: at(0), Peer: a.Host + ":1", Epoch: 2, Accepted: true}}, writers, nil); err == nil ||
		!strings.Contains(err.Error(), "came from 198.18.1.11:1, not from its runtime's 198.18.1.12") {
		t.Fatalf("Turns with an epoch from the wrong host: %v", err)
	}
	// Counts per writer.
	turns, err := Turns([]Write{req(Plain, 0, a, "1", true), req(Plain, 1, a, "1", true), req(Plain, 20, b, "1", true)}, writers, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := Of(turns, 1); got.Accepted != 2 || !got.Last.Equal(at(1)) {
		t.Fatalf("epoch 1's turn %+v, want 2 writes, the last at %s", got, at(1))
	}
	if _, ok := Of(turns, 3); ok {
		t.Fatalf("a turn of epoch 3, which never wrote")
	}
}
