package sim

import (
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// cache is one process's informer cache: a list, then the stream of every
// change in order, late by the network. The stream breaks when the network
// or the apiserver does, and the process lists again once it can (a
// reflector's relist), so a partitioned process acts on what it last saw.
type cache struct {
	s     *Sim
	st    *store
	owner *proc
	life  int
	// gen counts the streams; a delivery of an earlier stream is dropped.
	gen       int
	streaming bool
	synced    bool
	last      time.Duration
	// onChange is told of each change as it lands ("" kind: everything
	// may have changed, after a list).
	onChange func(kind, ns, name string)
}

// watch gives p a cache that lists and follows the apiserver from now on.
func (s *Sim) watch(p *proc, onChange func(kind, ns, name string)) *cache {
	c := &cache{s: s, st: newStore(), owner: p, life: p.life, onChange: onChange}
	s.api.caches = append(s.api.caches, c)
	var poll func()
	poll = func() {
		if !c.streaming {
			s.call(p, func(a *apiserver) (_ client.Object, _ error) {
				if !c.streaming {
					a.watchRequest(c)
				}
				return nil, nil
			}, func(apiResult) {})
		}
		s.after(p, time.Second, poll)
	}
	s.soon(p, poll)
	return c
}

// deliver sends one message of the stream: in order, late by the network.
func (c *cache) deliver(apply func()) {
	s := c.s
	if !c.streaming {
		return
	}
	api := s.api.p.host
	if !s.net.up(api, c.owner.host, controlNet) {
		c.breakStream()
		return
	}
	gen := c.gen
	t := max(c.last, s.now+s.net.transit(s.net.link(api, c.owner.host, controlNet), controlNet))
	c.last = t
	s.at(t, nil, func() {
		if c.gen != gen {
			return
		}
		if !s.net.up(api, c.owner.host, controlNet) {
			c.breakStream()
			return
		}
		s.soon(c.owner, func() {
			if c.gen == gen {
				apply()
			}
		})
	})
}

func (c *cache) breakStream() {
	if c.streaming {
		c.streaming = false
		c.gen++
	}
}

// reader reads the cache at once, as a controller-runtime cache does.
func (c *cache) reader() storeReader { return storeReader{c.st} }
