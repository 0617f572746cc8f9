package grantor

import (
	"context"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/holdfast-io/holdfast/api/lease"
)

// Exchange is one renewal attempt of a stepped loop (Options.Stepped), from
// Begin to End: the grant the book stamped and the bound of its answer.
type Exchange struct {
	Target Target
	Grant  lease.Grant
	// Timeout bounds the answer on the grantor's clock: an attempt with no
	// answer by then is ended as timed out.
	Timeout time.Duration

	sent Sent
	ctx  context.Context
	l    *loop
}

// Request is the attempt's POST, as a running loop sends it.
func (x *Exchange) Request() (*http.Request, error) {
	return x.l.g.request(x.ctx, x.Target, &x.Grant)
}

// Begin starts the next attempt of unit's stepped loop: the grant stamped
// now from the book. False when the unit has no running loop, or the
// leadership lets this process grant no more (Options.GrantsUntil).
func (g *Grantor) Begin(unit types.NamespacedName) (*Exchange, bool) {
	g.mu.Lock()
	l := g.loops[unit]
	g.mu.Unlock()
	if l == nil {
		return nil, false
	}
	l.mu.Lock()
	ctx := l.ctx
	l.mu.Unlock()
	if ctx == nil || ctx.Err() != nil || !g.mayGrant() {
		return nil, false
	}
	return l.begin(ctx), true
}

// End records what x got back (the response, or err when none came;
// timedOut when it was abandoned at x.Timeout), tells Notify as a running
// loop does, and returns the wait before the next Begin. ok is false when
// the loop was paused or stopped since Begin: the attempt is then not an
// observation, and the loop's next start begins afresh.
func (g *Grantor) End(x *Exchange, resp *http.Response, err error, timedOut bool) (wait time.Duration, ok bool) {
	if x.ctx.Err() != nil {
		if resp != nil {
			_ = resp.Body.Close()
		}
		return 0, false
	}
	reply, outcome, msg, to := x.l.answer(resp, err, func() bool { return timedOut }, x.Timeout, x.Target)
	if x.l.record(x, reply, outcome, msg, to) {
		g.opts.Notify(x.Target.Unit)
	}
	return x.l.nextWait(), true
}
