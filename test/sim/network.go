package sim

import (
	"math"
	"time"
)

// netKind names one of the plant's two networks: the control network
// (apiserver, controllers, the lease channel) and the field network (a
// node's runtimes to the devices). A partition of one leaves the other.
type netKind int

const (
	controlNet netKind = iota
	fieldNet
)

func (n netKind) String() string {
	if n == fieldNet {
		return "field"
	}
	return "control"
}

type linkKey struct {
	from, to string
	net      netKind
}

// link is one direction between two machines on one network. Faults add to
// it and take away again: a link is cut while any cut is in force.
type link struct {
	cuts  int
	delay time.Duration // added to every message while a degradation lasts
	loss  float64
	dup   float64
}

// network carries messages between machines. Every message may be delayed
// (a heavy tail), lost, duplicated and thereby reordered; a cut link drops
// what is sent on it and what is in flight when it arrives.
type network struct {
	s     *Sim
	links map[linkKey]*link
}

func (n *network) link(from, to *host, k netKind) *link {
	key := linkKey{from.name, to.name, k}
	l := n.links[key]
	if l == nil {
		l = &link{}
		n.links[key] = l
	}
	return l
}

// up says whether from reaches to on k now.
func (n *network) up(from, to *host, k netKind) bool {
	if from == to {
		return true
	}
	return n.link(from, to, k).cuts == 0
}

// transit draws one message's transit time on l.
func (n *network) transit(l *link, k netKind) time.Duration {
	cfg := n.s.cfg.Noise
	r := n.s.rng
	d := cfg.BaseDelay + time.Duration(r.Float64()*float64(cfg.Jitter))
	if k == fieldNet {
		d /= 4
	}
	if r.Float64() < cfg.TailProb {
		d += time.Duration(r.ExpFloat64() * float64(cfg.TailMean))
	}
	if r.Float64() < cfg.LongTailProb {
		d += time.Duration(math.Min(r.ExpFloat64()*float64(cfg.LongTailMean), float64(10*cfg.LongTailMean)))
	}
	return d + l.delay
}

// send carries one message from one machine to another; arrive runs on the
// event loop when (and each time) it arrives. It reports whether the message
// left at all (the link was up).
func (n *network) send(from, to *host, k netKind, arrive func()) bool {
	if from == to {
		n.s.at(n.s.now, nil, arrive)
		return true
	}
	l := n.link(from, to, k)
	if l.cuts > 0 {
		return false
	}
	r := n.s.rng
	copies := 1
	if r.Float64() < n.s.cfg.Noise.Dup+l.dup {
		copies = 2
	}
	for range copies {
		if r.Float64() < n.s.cfg.Noise.Loss+l.loss {
			continue
		}
		n.s.at(n.s.now+n.transit(l, k), nil, func() {
			if l.cuts == 0 {
				arrive()
			}
		})
	}
	return true
}
