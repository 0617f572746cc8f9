// Package leasetest renews one runtime's control lease over HTTP for tests
// and drills. It runs holdfast-controller's own renewal loop
// (controller/grantor) against one address, so the runtime's tests speak
// the protocol the controller speaks and nothing else: the anchor echoed
// with the age of the last acknowledged renewal (L1), the cadence against
// the anchor the runtime holds (L2). It can be stopped to cut the renewals.
//
// Only tests import this package: the runtime's own binary never depends
// on controller/ (TestTheRuntimeBinaryDoesNotImportTheController).
package leasetest

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	"github.com/holdfast-io/holdfast/controller/grantor"
)

// Grantor renews one runtime's lease until its context ends.
type Grantor struct {
	// URL of the runtime's lease endpoint (https://host:port/v1/lease, or
	// http:// without TLS).
	URL string
	// TLS are the grantor's credentials; nil speaks plain HTTP, as a
	// controller run with --insecure-plaintext-lease.
	TLS grantor.Credentials
	// Unit is the unit's namespace/name.
	Unit     string
	Epoch    int64
	Duration time.Duration
	Name     string

	mu   sync.Mutex
	g    *grantor.Grantor
	last grantor.Observation
	err  error
}

// Run renews until ctx ends.
func (g *Grantor) Run(ctx context.Context) {
	target, err := g.target()
	if err != nil {
		g.mu.Lock()
		g.err = err
		g.mu.Unlock()
		return
	}
	name := g.Name
	if name == "" {
		name = "leasetest"
	}
	rg := grantor.New(grantor.Options{Name: name, TLS: g.TLS})
	g.mu.Lock()
	g.g = rg
	g.mu.Unlock()
	rg.Ensure(target)
	<-ctx.Done()
	obs, _ := rg.Pause(target.Unit)
	rg.StopAll()
	g.mu.Lock()
	g.g, g.last = nil, obs
	g.mu.Unlock()
}

func (g *Grantor) target() (grantor.Target, error) {
	u, err := url.Parse(g.URL)
	scheme := "http"
	if g.TLS != nil {
		scheme = "https"
	}
	if err != nil || u.Host == "" || u.Path != leaseapi.Path || u.Scheme != scheme {
		return grantor.Target{}, fmt.Errorf("url %q: must be %s://host:port%s", g.URL, scheme, leaseapi.Path)
	}
	ns, name, ok := strings.Cut(g.Unit, "/")
	if !ok {
		return grantor.Target{}, fmt.Errorf("unit %q: must be namespace/name", g.Unit)
	}
	return grantor.Target{Unit: types.NamespacedName{Namespace: ns, Name: name}, Epoch: g.Epoch, Address: u.Host,
		Duration: g.Duration}, nil
}

func (g *Grantor) observe() grantor.Observation {
	g.mu.Lock()
	rg, last := g.g, g.last
	g.mu.Unlock()
	if rg == nil {
		return last
	}
	t, _ := g.target()
	if obs, ok := rg.Observe(t.Unit); ok {
		return obs
	}
	return last
}

// LastAck is when the last renewal was acknowledged; the grantor would
// declare Expired at LastAck + Duration.
func (g *Grantor) LastAck() (time.Time, bool) {
	o := g.observe()
	return o.LastAck, o.Acked()
}

// Acks counts acknowledged renewals.
func (g *Grantor) Acks() int { return int(g.observe().Acks) }

// Attempts counts renewal attempts, answered or not.
func (g *Grantor) Attempts() int { return int(g.observe().Attempts) }

// Last is the last acknowledged reply's state and incarnation, and the
// last attempt's error when it was not acknowledged.
func (g *Grantor) Last() (leaseapi.Reply, error) {
	g.mu.Lock()
	err := g.err
	g.mu.Unlock()
	if err != nil {
		return leaseapi.Reply{}, err
	}
	o := g.observe()
	r := leaseapi.Reply{Epoch: o.Target.Epoch, State: o.RuntimeState, Fenced: o.Fenced, Incarnation: o.Incarnation}
	if o.Attempts > 0 && o.LastAttempt.Outcome != grantor.Acknowledged {
		return r, fmt.Errorf("renewal %s: %s", o.LastAttempt.Outcome, o.LastAttempt.Message)
	}
	return r, nil
}
