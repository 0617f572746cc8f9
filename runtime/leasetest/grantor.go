// Package leasetest is a grantor for tests and drills: it renews one
// runtime's control lease over HTTP the way DESIGN §3 describes the real
// grantor (the acknowledged age of its last acknowledged renewal, the L2
// cadence against the anchor the runtime holds), and can be stopped to cut
// the renewals. It is not the holdfast-controller's grantor.
package leasetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
)

// Grantor renews one runtime's lease until its context ends.
type Grantor struct {
	// URL of the runtime's lease endpoint (http://host:port/v1/lease).
	URL      string
	Unit     string
	Epoch    int64
	Duration time.Duration
	Name     string
	Client   *http.Client

	mu        sync.Mutex
	seq       uint64
	hasAck    bool
	lastAck   time.Time
	anchor    time.Time
	hasAnchor bool
	last      leaseapi.Reply
	lastErr   error
	acks      int
}

// Run renews until ctx ends.
func (g *Grantor) Run(ctx context.Context) {
	if g.Client == nil {
		g.Client = &http.Client{Timeout: 2 * time.Second}
	}
	if g.Name == "" {
		g.Name = "leasetest"
	}
	for {
		wait := g.next()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		g.renew(ctx)
	}
}

func (g *Grantor) next() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.seq == 0:
		return 0
	case !g.hasAck:
		return 500 * time.Millisecond
	case !g.hasAnchor:
		return 0 // the first acknowledged renewal is followed at once by a second
	default:
		return leaseapi.RenewInterval(g.Duration, time.Since(g.anchor))
	}
}

func (g *Grantor) renew(ctx context.Context) {
	g.mu.Lock()
	g.seq++
	gr := leaseapi.Grant{Unit: g.Unit, Epoch: g.Epoch, DurationMillis: g.Duration.Milliseconds(), Grantor: g.Name, Seq: g.seq}
	var carried time.Time
	if g.hasAck {
		carried = g.lastAck
		age := time.Since(g.lastAck).Milliseconds()
		gr.AckAgeMillis = &age
	}
	hadAck := g.hasAck
	g.mu.Unlock()

	b, _ := json.Marshal(gr)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.URL, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.Client.Do(req)
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		g.lastErr = err
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		g.lastErr = fmt.Errorf("renewal %d answered %s", gr.Seq, resp.Status)
		return
	}
	var r leaseapi.Reply
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		g.lastErr = err
		return
	}
	g.last, g.lastErr = r, nil
	g.acks++
	if hadAck {
		g.anchor, g.hasAnchor = carried, true
	}
	g.hasAck, g.lastAck = true, time.Now()
}

// LastAck is when the last renewal was acknowledged; the grantor would
// declare Expired at LastAck + Duration.
func (g *Grantor) LastAck() (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lastAck, g.hasAck
}

// Acks counts acknowledged renewals.
func (g *Grantor) Acks() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.acks
}

// Last is the last reply and the last error.
func (g *Grantor) Last() (leaseapi.Reply, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last, g.lastErr
}
