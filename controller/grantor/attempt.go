package grantor

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/leasetls"
)

// attempt sends one grant and records what came back. It reports whether the
// reconciler must be told.
func (l *loop) attempt(ctx context.Context) bool {
	if !l.g.mayGrant() {
		return false
	}
	x := l.begin(ctx)
	reply, outcome, msg, timedOut := l.post(ctx, x.Target, &x.Grant, x.Timeout)
	if ctx.Err() != nil {
		// Paused or stopped mid-flight: the attempt is not an observation.
		return false
	}
	return l.record(x, reply, outcome, msg, timedOut)
}

// refusedRetry is how often a loop the leadership lets grant no more looks
// again.
const refusedRetry = time.Second

// mayGrant: the leadership still lets this process grant (GrantsUntil).
func (g *Grantor) mayGrant() bool {
	if g.opts.GrantsUntil == nil {
		return true
	}
	return g.opts.Clock.Now().Before(g.opts.GrantsUntil())
}

// begin stamps the next grant from the book.
func (l *loop) begin(ctx context.Context) *Exchange {
	clk := l.g.opts.Clock
	x := &Exchange{Grant: lease.Grant{Grantor: l.g.opts.Name, Seq: l.g.seq.Add(1)}, ctx: ctx, l: l}
	l.mu.Lock()
	t := l.obs.Target
	x.Target = t
	x.Grant.Unit, x.Grant.Epoch, x.Grant.DurationMillis = t.Unit.String(), t.Epoch, t.Duration.Milliseconds()
	start := clk.Now()
	x.sent = l.obs.Stamp(&x.Grant, start)
	x.Timeout = AttemptTimeout(t.Duration, l.obs.Timeouts, l.anchorLeft(start))
	l.mu.Unlock()
	return x
}

// record keeps what one attempt got back and reports whether the
// reconciler must be told.
func (l *loop) record(x *Exchange, reply lease.Reply, outcome Outcome, msg string, timedOut bool) bool {
	t, timeout := x.Target, x.Timeout
	now := l.g.opts.Clock.Now()
	renewals.WithLabelValues(string(outcome)).Inc()
	if timedOut {
		renewalTimeouts.Inc()
	}
	l.countBackoff(timedOut)

	l.mu.Lock()
	defer l.mu.Unlock()
	prev, prevOwners := l.obs.LastAttempt.Outcome, l.obs.LaterOwners
	firstAck := false
	l.obs.LastAttempt = Attempt{At: now, Outcome: outcome, Message: msg}
	l.obs.Attempts++
	if timedOut {
		if l.obs.Timeouts == 0 {
			klog.V(1).InfoS("Lease renewal got no answer in time; backing off", "unit", t.Unit, "epoch", t.Epoch, "bound", timeout)
		}
		l.obs.Timeouts++
	} else {
		l.obs.Timeouts = 0
	}
	if outcome == Acknowledged {
		firstAck = l.obs.Acknowledged(x.sent, reply, now)
	}
	if outcome != prev {
		klog.V(2).InfoS("Lease renewal outcome changed", "unit", t.Unit, "epoch", t.Epoch, "outcome", outcome, "message", msg)
	}
	return firstAck || outcome != prev || !slices.Equal(prevOwners, l.obs.LaterOwners)
}

// refreshCredentials closes the loop's idle connections when the
// grantor's certificate or the trusted CAs changed since they were made.
// Only the loop's goroutine calls it.
func (l *loop) refreshCredentials() {
	c := l.g.opts.TLS
	if c == nil {
		return
	}
	cert, roots := c.ClientCertificate(), c.RuntimeRoots()
	if l.cert != nil && (cert != l.cert || roots != l.roots) {
		l.transport.CloseIdleConnections()
	}
	l.cert, l.roots = cert, roots
}

// errNoAnswer is the cause of an attempt's cancellation at its bound.
var errNoAnswer = errors.New("no answer in time")

// post sends one grant and reads the answer within timeout, measured on the
// injected clock. timedOut reports an attempt abandoned at its bound.
func (l *loop) post(ctx context.Context, t Target, grant *lease.Grant, timeout time.Duration) (reply lease.Reply, outcome Outcome, msg string, timedOut bool) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer afterFunc(l.g.opts.Clock, timeout, func() { cancel(errNoAnswer) })()
	l.refreshCredentials()
	req, err := l.g.request(ctx, t, grant)
	if err != nil {
		return reply, Unreachable, err.Error(), false
	}
	resp, err := (&http.Client{Transport: l.transport}).Do(req)
	return l.answer(resp, err, func() bool { return errors.Is(context.Cause(ctx), errNoAnswer) }, timeout, t)
}

// request is the POST of one grant.
func (g *Grantor) request(ctx context.Context, t Target, grant *lease.Grant) (*http.Request, error) {
	body, err := json.Marshal(grant)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.scheme+"://"+t.Address+lease.Path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return req, nil
}

// answer reads the outcome of one POST: the response, or err when there was
// none; abandoned says whether the attempt was abandoned at its bound.
func (l *loop) answer(resp *http.Response, err error, abandoned func() bool, timeout time.Duration, t Target) (reply lease.Reply, outcome Outcome, msg string, timedOut bool) {
	noAnswer := func(err error) (lease.Reply, Outcome, string, bool) {
		if abandoned() {
			return reply, Unreachable, fmt.Sprintf("no answer within %v: %v", timeout, err), true
		}
		return reply, Unreachable, err.Error(), false
	}
	if err != nil {
		if o, m, ok := l.notAuthenticated(t, err); ok {
			return reply, o, m, false
		}
		return noAnswer(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		r, o, m, to := noAnswer(err)
		return r, o, "reading the answer: " + m, to
	}
	o, m := judge(resp.StatusCode, data, t, &reply)
	if resp.StatusCode == http.StatusForbidden && l.g.opts.TLS != nil {
		var e lease.Error
		if json.Unmarshal(data, &e) == nil && e.Reason == lease.ReasonUnauthenticated {
			authFailures.WithLabelValues(authRefusedByRuntime).Inc()
			m = "the runtime refused this grantor's certificate: " + e.Message
		}
	}
	return reply, o, m, false
}

// Why an attempt failed to authenticate (holdfast_grantor_renewal_authentication_failures_total).
const (
	// authRefusedByRuntime: the runtime answered 403, refusing the
	// grantor's certificate.
	authRefusedByRuntime = "refused_by_runtime"
	// authRuntimeUnverified: the endpoint's certificate did not prove it to
	// be the binding's runtime; no grant was sent.
	authRuntimeUnverified = "runtime_unverified"
	// authNotTLS: the endpoint answered the TLS handshake in plain HTTP.
	authNotTLS = "not_tls"
	// authHandshake: the TLS handshake failed otherwise (an alert from the
	// endpoint, a protocol it does not speak).
	authHandshake = "handshake_failed"
)

// notAuthenticated recognises an attempt that ended because the two ends
// did not authenticate each other. Nothing proved to be the binding's
// runtime answered, so it is Unreachable (the Unit's record says so, with
// the reason), never Refused, which says the runtime itself answered.
func (l *loop) notAuthenticated(t Target, err error) (Outcome, string, bool) {
	if l.g.opts.TLS == nil {
		return "", "", false
	}
	var (
		refusal *leasetls.Refusal
		header  tls.RecordHeaderError
		alert   tls.AlertError
		reason  string
		why     string
	)
	switch {
	case errors.As(err, &refusal):
		reason, why = authRuntimeUnverified, fmt.Sprintf("the endpoint is not the runtime of %s at epoch %d (%s): its %v", t.Unit, t.Epoch, t.identity(), refusal)
	case errors.As(err, &header), errors.Is(err, http.ErrSchemeMismatch):
		reason, why = authNotTLS, "the endpoint does not speak TLS (a runtime started with --insecure-plaintext-lease, or not a runtime)"
	case errors.As(err, &alert):
		reason, why = authHandshake, "the endpoint ended the TLS handshake: "+alert.Error()
	default:
		return "", "", false
	}
	authFailures.WithLabelValues(reason).Inc()
	return Unreachable, fmt.Sprintf("lease endpoint %s not authenticated, no grant sent: %s", t.Address, why), true
}

// afterFunc runs f after d on clk and returns its stop. Both clocks the
// grantor runs on (the real one, the tests' fake) have AfterFunc.
func afterFunc(clk clock.WithTicker, d time.Duration, f func()) (stop func()) {
	if c, ok := clk.(clock.WithDelayedExecution); ok {
		t := c.AfterFunc(d, f)
		return func() { t.Stop() }
	}
	t := clk.NewTimer(d)
	done := make(chan struct{})
	go func() {
		select {
		case <-t.C():
			f()
		case <-done:
			t.Stop()
		}
	}()
	return func() { close(done) }
}

// judge reads the runtime's answer.
func judge(code int, data []byte, t Target, reply *lease.Reply) (Outcome, string) {

	switch code {
	case http.StatusOK:
		if err := json.Unmarshal(data, reply); err != nil {
			return Refused, fmt.Sprintf("200 with an unreadable reply: %v", err)
		}
		if reply.Epoch != t.Epoch {
			return Refused, fmt.Sprintf("200 for epoch %d, the grant was for %d", reply.Epoch, t.Epoch)
		}
		if reply.State == lease.Autonomous {
			// L11: an Autonomy runtime takes no lease and never fences, so
			// its answer is no acknowledgement of one.
			return Refused, fmt.Sprintf("200 from a runtime in %s mode (state %s): it holds no lease and never fences itself, so its answer acknowledges nothing",
				holdfastv1.Autonomy, reply.State)
		}
		return Acknowledged, ""
	case http.StatusConflict:
		var c lease.Conflict
		if json.Unmarshal(data, &c) == nil && c.Message != "" {
			return Refused, fmt.Sprintf("409: %s (runtime epoch %d)", c.Message, c.RuntimeEpoch)
		}
	}
	var e lease.Error
	if json.Unmarshal(data, &e) == nil && e.Message != "" {
		return Refused, fmt.Sprintf("%d: %s", code, e.Message)
	}
	return Refused, fmt.Sprintf("%d: %.200s", code, bytes.TrimSpace(data))
}
