package devicesim

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"time"
)

// Writer is one runtime as a device knows it.
type Writer struct {
	// Name says who it is in a finding ("epoch 1 on edge-a").
	Name string
	// Host is the address its requests come from (its node's field
	// address); empty when unknown.
	Host string
	// Epoch is its runtime's epoch. An OwnerEpoch device logs it with
	// every request; a Plain device logs none.
	Epoch int64
}

// Turn is one writer's uninterrupted run of requests in a device's log.
type Turn struct {
	Writer Writer
	// First and Last are the times of its first and last request,
	// accepted or refused.
	First, Last time.Time
	// Accepted and Refused count its requests, one per register.
	Accepted, Refused int
}

// Turns reads a device's write log by true time and peer and splits it
// into the writers' turns, in order. writers are the runtimes that may
// have written, in epoch order. A request is its writer's by the epoch it
// carries (an OwnerEpoch device; a writer named for that epoch must have
// sent it from its Host) or, from a Plain device that logs no epoch, by its
// peer's host (a host that served two epochs is the earlier's until a
// writer after it has sent, then the later's). Without writers requests
// are told apart by epoch alone, as on loopback where every peer has the
// same host.
//
// One writer at a time means the turns go forward: no request, accepted
// or refused, comes from a writer after a later one's first request (the
// runtime resets every device connection with an unanswered write when it
// fences, so nothing of a fenced runtime may reach the device afterwards),
// and none from an address that is no writer's. Turns returns every turn
// and the first violation.
func Turns(log []Write, writers []Writer) ([]Turn, error) {
	log = slices.Clone(log)
	slices.SortStableFunc(log, func(a, b Write) int { return a.Time.Compare(b.Time) })
	byHost := len(writers) > 0 && !slices.ContainsFunc(log, func(w Write) bool { return w.Epoch != 0 })
	known := slices.Clone(writers)
	var (
		turns  []Turn
		errs   []string
		cur    = -1 // the rank of the latest writer to send: its index (byHost) or its epoch
		latest Turn
	)
	for _, w := range log {
		host := peerHost(w.Peer)
		var k Writer
		rank := -1 // none: a request from no writer
		if byHost {
			from := max(cur, 0)
			if i := slices.IndexFunc(known[from:], func(k Writer) bool { return k.Host == host }); i >= 0 {
				k, rank = known[from+i], from+i
			} else if i := slices.IndexFunc(known, func(k Writer) bool { return k.Host == host }); i >= 0 {
				k, rank = known[i], i
			} else {
				k = Writer{Name: "an unknown writer at " + host, Host: host, Epoch: -1}
				errs = append(errs, fmt.Sprintf("a request from %s at %s, which is none of the writers %s", w.Peer, stamp(w.Time), names(writers)))
			}
		} else {
			i := slices.IndexFunc(known, func(k Writer) bool { return k.Epoch == w.Epoch })
			if i < 0 {
				known = append(known, Writer{Name: fmt.Sprintf("epoch %d", w.Epoch), Epoch: w.Epoch})
				i = len(known) - 1
			}
			k, rank = known[i], int(w.Epoch)
			if k.Host != "" && k.Host != host {
				errs = append(errs, fmt.Sprintf("%s's request at %s came from %s, not from its runtime's %s", k.Name, stamp(w.Time), w.Peer, k.Host))
			}
		}
		if rank >= 0 && rank < cur {
			verb := "tried to write"
			if w.Accepted {
				verb = "wrote"
			}
			errs = append(errs, fmt.Sprintf("%s %s register %d at %s from %s after %s had written at %s: a stale runtime's request reached the device",
				k.Name, verb, w.Register, stamp(w.Time), w.Peer, latest.Writer.Name, stamp(latest.First)))
		}
		if len(turns) == 0 || turns[len(turns)-1].Writer != k {
			turns = append(turns, Turn{Writer: k, First: w.Time})
		}
		t := &turns[len(turns)-1]
		t.Last = w.Time
		if w.Accepted {
			t.Accepted++
		} else {
			t.Refused++
		}
		if rank > cur {
			cur, latest = rank, *t
		}
	}
	if len(errs) > 0 {
		return turns, fmt.Errorf("%s", errs[0])
	}
	return turns, nil
}

// CheckOneWriter proves from a write log that no two writers' accepted
// writes overlapped: by epoch, in the device's order, they never go back
// (Turns without writers, on the accepted writes). It returns the first
// violation.
func CheckOneWriter(log []Write) error {
	_, err := Turns(slices.DeleteFunc(slices.Clone(log), func(w Write) bool { return !w.Accepted }), nil)
	return err
}

// Of sums the turns of the writer of epoch: its first and last request and
// its counts; ok is false when it sent none.
func Of(turns []Turn, epoch int64) (t Turn, ok bool) {
	for _, x := range turns {
		if x.Writer.Epoch != epoch {
			continue
		}
		if !ok {
			t, ok = x, true
			continue
		}
		t.Last = x.Last
		t.Accepted += x.Accepted
		t.Refused += x.Refused
	}
	return t, ok
}

func peerHost(peer string) string {
	if h, _, err := net.SplitHostPort(peer); err == nil {
		return h
	}
	return peer
}

func names(ws []Writer) string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Name)
	}
	return "[" + strings.Join(out, ", ") + "]"
}

func stamp(t time.Time) string { return t.Format(time.RFC3339Nano) }
