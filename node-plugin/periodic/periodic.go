// Package periodic is holdfast-node's one pass loop: a pass at once and then
// one on every tick of an injected clock, so that tests step a fake clock
// instead of waiting on a real ticker.
package periodic

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// Run calls pass now and again on every tick of every on clk until ctx ends
// (the body of a manager Runnable's Start). A nil clk is the real clock.
func Run(ctx context.Context, clk clock.WithTicker, every time.Duration, pass func(context.Context)) error {
	return RunKicked(ctx, clk, every, nil, pass)
}

// RunKicked is Run, with a pass also on every receive from kick (nil: none):
// a pass as soon as something it reports changed, the ticks catching the
// rest.
func RunKicked(ctx context.Context, clk clock.WithTicker, every time.Duration, kick <-chan struct{}, pass func(context.Context)) error {
	if clk == nil {
		clk = clock.RealClock{}
	}
	t := clk.NewTicker(every)
	defer t.Stop()
	for {
		pass(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		case <-kick:
		}
	}
}
