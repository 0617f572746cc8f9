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

// Turn is one writer's uninterrupted run of requests on one connection in
// a device's log.
type Turn struct {
	Writer Writer
	// Peer is the connection the requests came on (the client's host:port
	// as the device saw it).
	Peer string
	// First and Last are the times of its first and last request,
	// accepted or refused.
	First, Last time.Time
	// Accepted and Refused count its requests, one per register.
	Accepted, Refused int
}

// Conns names the runtime behind each connection to a device, as the test
// saw it from outside the device: a connection's peer (host:port, as the
// device logs it) -> the epoch of the runtime process that held it.
type Conns map[string]int64

// Turns reads a device's write log by true time and connection and splits
// it into the writers' turns, in order. writers are the runtimes that may
// have written, in epoch order. A connection's requests are one writer's:
//   - by the epoch they carry (an OwnerEpoch device logs the epoch declared
//     on the connection; a writer named for that epoch must have sent it
//     from its Host);
//   - else, from a Plain device that logs no epoch, by conns, the runtime
//     process seen holding the connection;
//   - else by the peer's host when exactly one writer sends from it; a
//     connection from a host that served several epochs and that no
//     process was seen holding is an unidentified runtime's.
//
// Without writers requests are told apart by epoch alone, as on loopback
// where every peer has the same host.
//
// One writer at a time means two things. The connections take turns: no
// request, accepted or refused, comes on a connection after a connection
// opened later has sent its first, unless both are known to be one
// runtime's (two processes never share a connection, so this holds two
// runtimes on one host apart; a late segment of a runtime's own closed
// connection is no second writer). And the writers go forward: no request
// comes from a writer after a later one's first request (the runtime
// resets every device connection with an unanswered write when it fences,
// so nothing of a fenced runtime may reach the device afterwards), and none
// from an address that is no writer's. Turns returns every turn and the
// first violation.
func Turns(log []Write, writers []Writer, conns Conns) ([]Turn, error) {
	log = slices.Clone(log)
	slices.SortStableFunc(log, func(a, b Write) int { return a.Time.Compare(b.Time) })
	byEpoch := len(writers) == 0 || slices.ContainsFunc(log, func(w Write) bool { return w.Epoch != 0 })
	known := slices.Clone(writers)
	writerOf := func(epoch int64) Writer {
		i := slices.IndexFunc(known, func(k Writer) bool { return k.Epoch == epoch })
		if i < 0 {
			known = append(known, Writer{Name: fmt.Sprintf("epoch %d", epoch), Epoch: epoch})
			i = len(known) - 1
		}
		return known[i]
	}
	var (
		turns    []Turn
		errs     []string
		cur      = int64(-1) // the latest epoch to send
		latest   Turn        // its first turn
		lastConn Turn        // the first turn of the connection opened last
		lastID   bool        // whether its writer is identified
		seen     = map[string]bool{}
	)
	for _, w := range log {
		host := peerHost(w.Peer)
		var k Writer
		rank := int64(-1) // none: a request from an unidentified or unknown writer
		// identified: the request's runtime is known, not only its host; a
		// Plain device's epoch 0 names no runtime.
		identified := false
		e, held := conns[w.Peer]
		switch {
		case byEpoch:
			k, rank, identified = writerOf(w.Epoch), w.Epoch, w.Epoch != 0
			if k.Host != "" && k.Host != host {
				errs = append(errs, fmt.Sprintf("%s's request at %s came from %s, not from its runtime's %s", k.Name, stamp(w.Time), w.Peer, k.Host))
			}
			if held && e != w.Epoch {
				errs = append(errs, fmt.Sprintf("a request of epoch %d at %s came on %s, a connection of epoch %d's runtime", w.Epoch, stamp(w.Time), w.Peer, e))
			}
		case held:
			k, rank, identified = writerOf(e), e, true
			if k.Host != "" && k.Host != host {
				errs = append(errs, fmt.Sprintf("%s's connection %s is not from its runtime's %s", k.Name, w.Peer, k.Host))
			}
		default:
			switch at := slices.DeleteFunc(slices.Clone(known), func(k Writer) bool { return k.Host != host }); len(at) {
			case 1:
				k, rank, identified = at[0], at[0].Epoch, true
			case 0:
				k = Writer{Name: "an unknown writer at " + host, Host: host, Epoch: -1}
				errs = append(errs, fmt.Sprintf("a request from %s at %s, which is none of the writers %s", w.Peer, stamp(w.Time), names(writers)))
			default:
				k = Writer{Name: "an unidentified runtime at " + host, Host: host, Epoch: -1}
			}
		}
		verb := "tried to write"
		if w.Accepted {
			verb = "wrote"
		}
		switch {
		case rank >= 0 && rank < cur:
			errs = append(errs, fmt.Sprintf("%s %s register %d at %s from %s after %s had written at %s: a stale runtime's request reached the device",
				k.Name, verb, w.Register, stamp(w.Time), w.Peer, latest.Writer.Name, stamp(latest.First)))
		case seen[w.Peer] && w.Peer != lastConn.Peer && !(identified && lastID && k == lastConn.Writer):
			errs = append(errs, fmt.Sprintf("%s %s register %d at %s on connection %s after %s had opened connection %s at %s: two connections wrote in turn",
				k.Name, verb, w.Register, stamp(w.Time), w.Peer, lastConn.Writer.Name, lastConn.Peer, stamp(lastConn.First)))
		}
		if len(turns) == 0 || turns[len(turns)-1].Writer != k || turns[len(turns)-1].Peer != w.Peer {
			turns = append(turns, Turn{Writer: k, Peer: w.Peer, First: w.Time})
		}
		t := &turns[len(turns)-1]
		t.Last = w.Time
		if w.Accepted {
			t.Accepted++
		} else {
			t.Refused++
		}
		if !seen[w.Peer] {
			seen[w.Peer], lastConn, lastID = true, *t, identified
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
// (Turns without writers, on the accepted writes): by epoch and by connection. It returns the first
// violation.
func CheckOneWriter(log []Write) error {
	_, err := Turns(slices.DeleteFunc(slices.Clone(log), func(w Write) bool { return !w.Accepted }), nil, nil)
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
