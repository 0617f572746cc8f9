// Package scenario is what the drills (test/e2e) and the demo share: a
// holdfast installation on a test/cluster cluster (the webhook, both
// schedulers, two grantor replicas), units each driving their own simulated
// device, and the outside observations a drill asserts on and the demo
// prints: the device's write log, the Unit's status and Events, the
// controllers' metrics and audit trails.
package scenario

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/holdfast-io/holdfast/test/cluster"
)

// Options say what to start.
type Options struct {
	// Nodes are the node names; the first is every unit's primary.
	Nodes []string
	// Controllers is the number of holdfast-controller --role units
	// replicas (default 2).
	Controllers int
	// EtcdMembers of the control plane (default 1).
	EtcdMembers int
	Logf        func(format string, args ...any)
}

// World is a running installation.
type World struct {
	*cluster.Cluster
	Webhook     *cluster.Process
	Scheduler   *cluster.Process
	Controllers []*cluster.Controller
	logf        func(string, ...any)
	plants      int
}

// RuntimeImage is the unit runtime's image on every node.
const RuntimeImage = "holdfast.test/unit-runtime:e2e"

// DefaultNodes are the demo's and the drills' nodes: a primary and two
// standbys.
var DefaultNodes = []string{"edge-a", "edge-b", "edge-c"}

// Up starts the cluster and holdfast on it.
func Up(ctx context.Context, o Options) (w *World, err error) {
	if len(o.Nodes) == 0 {
		o.Nodes = DefaultNodes
	}
	if o.Controllers == 0 {
		o.Controllers = 2
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	var specs []cluster.NodeSpec
	for _, n := range o.Nodes {
		specs = append(specs, cluster.NodeSpec{Name: n})
	}
	c, err := cluster.Start(ctx, cluster.Config{Nodes: specs, EtcdMembers: o.EtcdMembers, Logf: o.Logf,
		Images: []cluster.Image{{Ref: RuntimeImage, Package: "cmd/unit-runtime"}}})
	if err != nil {
		return nil, err
	}
	w = &World{Cluster: c, logf: o.Logf}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Stop())
			w = nil
		}
	}()
	o.Logf("starting holdfast-webhook")
	if w.Webhook, err = c.StartWebhook(ctx); err != nil {
		return w, fmt.Errorf("holdfast-webhook: %w", err)
	}
	o.Logf("starting kube-scheduler and holdfast-scheduler")
	if _, err = c.StartDefaultScheduler(ctx); err != nil {
		return w, fmt.Errorf("kube-scheduler: %w", err)
	}
	if w.Scheduler, err = c.StartHoldfastScheduler(ctx, "holdfast-scheduler", 10269); err != nil {
		return w, fmt.Errorf("holdfast-scheduler: %w", err)
	}
	for i := 0; i < o.Controllers; i++ {
		id := fmt.Sprintf("holdfast-controller-%d", i)
		o.Logf("starting %s", id)
		ctl, err := c.StartController(ctx, "units", id, 8200+10*i)
		if err != nil {
			return w, fmt.Errorf("%s: %w", id, err)
		}
		w.Controllers = append(w.Controllers, ctl)
	}
	return w, nil
}

// Down stops everything and reports what was left behind.
func (w *World) Down() error {
	err := w.Stop()
	if left := w.Leftovers(); len(left) > 0 {
		err = errors.Join(err, fmt.Errorf("left behind: %v", left))
	}
	return err
}

// poll calls f until it is true, returns an error, or timeout passes.
func poll(ctx context.Context, timeout time.Duration, f func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, err := f()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
