package etcdwatch

import (
	"strings"
	"testing"
	"time"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// swapHistory is the shape of the history a Writer records through a
// swap: each key put (a retry after an attempt with no answer), read back,
// and read again by the final read.
func swapHistory() History {
	return History{
		{Put: true, Key: "/w/1", Value: "v1", Call: ms(0), Return: ms(5)},
		{Key: "/w/1", Value: "v1", Found: true, Call: ms(6), Return: ms(8)},
		// The first attempt timed out in the middle of an election; its
		// retry was acknowledged.
		{Put: true, Key: "/w/2", Value: "v2", Unknown: true, Call: ms(50), Return: ms(2050)},
		{Put: true, Key: "/w/2", Value: "v2", Call: ms(2070), Return: ms(2090)},
		{Key: "/w/2", Value: "v2", Found: true, Call: ms(2091), Return: ms(2095)},
		// A put that never got an answer, and no retry found it either.
		{Put: true, Key: "/w/3", Value: "v3", Unknown: true, Call: ms(2100), Return: ms(4100)},
		{Key: "/w/1", Value: "v1", Found: true, Call: ms(9000), Return: ms(9010)},
		{Key: "/w/2", Value: "v2", Found: true, Call: ms(9000), Return: ms(9010)},
		{Key: "/w/3", Call: ms(9000), Return: ms(9010)},
	}
}

// TestEveryVoterSwapHistoryIsLinearizable holds the check every voter swap
// test and drill runs on the history its Writer recorded (Stop sets
// Report.NotLinearizable; controller/voters' checkWriter, the node
// plugin's real-etcd swap and test/e2e/voters' drills fail on it): the
// shape of a swap's history passes, with every way an unanswered put may
// have gone, and each way a key-value store can break linearizability is
// refused with the key to blame.
func TestEveryVoterSwapHistoryIsLinearizable(t *testing.T) {
	if err := Linearizable(swapHistory()); err != nil {
		t.Fatalf("the fixture: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(h History) History
		// bad: the key named when it is refused; "" when it must pass.
		bad string
	}{
		{"an unanswered put found by the final read", func(h History) History {
			h[8].Found, h[8].Value = true, "v3"
			return h
		}, ""},
		{"overlapping operations in either order", func(h History) History {
			// The read back starts before the put returns and sees it.
			h[1].Call = ms(3)
			return h
		}, ""},
		{"an acknowledged put lost by the final read", func(h History) History {
			h[7].Found, h[7].Value = false, ""
			return h
		}, "/w/2"},
		{"a read back that misses the acknowledged put before it", func(h History) History {
			h[1].Found, h[1].Value = false, ""
			return h
		}, "/w/1"},
		{"a read of a value nobody wrote", func(h History) History {
			h[6].Value = "v0"
			return h
		}, "/w/1"},
		{"a read that sees a put before it was made", func(h History) History {
			return append(h, Op{Key: "/w/4", Value: "v4", Found: true, Call: ms(10), Return: ms(20)},
				Op{Put: true, Key: "/w/4", Value: "v4", Call: ms(30), Return: ms(40)})
		}, "/w/4"},
		{"a stale read after a newer acknowledged put", func(h History) History {
			return append(h, Op{Put: true, Key: "/w/1", Value: "v1b", Call: ms(100), Return: ms(110)},
				Op{Key: "/w/1", Value: "v1", Found: true, Call: ms(120), Return: ms(130)})
		}, "/w/1"},
		{"a final read of a key that was never put", func(h History) History {
			return append(h, Op{Key: "/w/9", Value: "v9", Found: true, Call: ms(9000), Return: ms(9010)})
		}, "/w/9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Linearizable(tc.mutate(swapHistory()))
			switch {
			case tc.bad == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.bad != "" && err == nil:
				t.Fatal("not refused")
			case tc.bad != "" && !strings.Contains(err.Error(), "key "+tc.bad+":"):
				t.Fatalf("refused without naming key %s: %v", tc.bad, err)
			}
		})
	}
}
