// Package scenario is what the drills (test/e2e) and the demo share: a
// holdfast installation on a test/cluster cluster (the webhook, two
// holdfast-controller --role units replicas, and the test-only binder in
// place of holdfast-scheduler until it lands), units each driving their own simulated
// device, and the outside observations a drill asserts on and the demo
// prints: the device's write log, the Unit's status and Events, the
// controllers' metrics and audit trails.
package scenario

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/cluster"
)

// Options say what to start.
type Options struct {
	// Nodes are the node names; the first is every unit's primary.
	Nodes []string
	// Controllers is the number of holdfast-controller --role units
	// replicas (default 2).
	Controllers int
	// LeaseStandDown is the controllers' --lease-stand-down (default 20s;
	// the binary's 90s is sized for a control-plane VIP move, which this
	// cluster has none of). A new leader holds off re-binds for this + the
	// unit's lease + its margin after acquiring, so a drill right after
	// start-up waits that long for its Hold.
	LeaseStandDown time.Duration
	// EtcdMembers of the control plane (default 1).
	EtcdMembers int
	// Voters, when set, puts the control plane's etcd on nodes and runs
	// holdfast-controller --role voters (voters.go).
	Voters *VotersOptions
	Logf   func(format string, args ...any)
}

// World is a running installation.
type World struct {
	*cluster.Cluster
	Webhook     *cluster.Process
	Binder      *TestOnlyBinder
	NodePlugins []*NodePlugin
	Controllers []*cluster.Controller
	// VotersController is holdfast-controller --role voters (Options.Voters).
	VotersController *cluster.Controller
	votersMu         sync.Mutex
	logf             func(string, ...any)
	plants           int
	standDown        time.Duration
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
	if o.LeaseStandDown == 0 {
		o.LeaseStandDown = 20 * time.Second
	}
	var specs []cluster.NodeSpec
	for _, n := range o.Nodes {
		specs = append(specs, cluster.NodeSpec{Name: n, Etcd: o.Voters.etcdRole(n)})
	}
	c, err := cluster.Start(ctx, cluster.Config{Nodes: specs, EtcdMembers: o.EtcdMembers, Logf: o.Logf,
		Images: []cluster.Image{{Ref: RuntimeImage, Package: "cmd/unit-runtime"}, {Ref: NodePluginImage, Package: "cmd/holdfast-node"}}})
	if err != nil {
		return nil, err
	}
	w = &World{Cluster: c, logf: o.Logf, standDown: o.LeaseStandDown}
	defer func() {
		if err != nil {
			if w.Binder != nil {
				w.Binder.Stop()
			}
			err = errors.Join(err, c.Stop())
			w.stopNodePlugins()
			w = nil
		}
	}()
	o.Logf("starting holdfast-webhook")
	if w.Webhook, err = c.StartWebhook(ctx); err != nil {
		return w, fmt.Errorf("holdfast-webhook: %w", err)
	}
	o.Logf("starting holdfast-node on every node")
	if err = w.startNodePlugins(ctx); err != nil {
		return w, fmt.Errorf("holdfast-node: %w", err)
	}
	// The binder acts as holdfast-scheduler's service account: the webhook
	// lets no one else bind a runtime pod.
	kc, err := c.UserKubeconfig("test-only-binder", cluster.ServiceAccountUser(holdfastv1.SchedulerName), "system:masters")
	if err != nil {
		return w, err
	}
	cfg, err := c.RESTConfigFor(kc)
	if err != nil {
		return w, err
	}
	bc, err := client.New(cfg, client.Options{Scheme: c.Scheme})
	if err != nil {
		return w, err
	}
	w.Binder = StartTestOnlyBinder(bc, c.NodeNames, o.Logf)
	for i := 0; i < o.Controllers; i++ {
		id := fmt.Sprintf("holdfast-controller-%d", i)
		o.Logf("starting %s", id)
		ctl, err := c.StartController(ctx, "units", id, 8200+10*i, "--lease-stand-down="+o.LeaseStandDown.String())
		if err != nil {
			return w, fmt.Errorf("%s: %w", id, err)
		}
		w.Controllers = append(w.Controllers, ctl)
	}
	if o.Voters != nil {
		if err = w.startVoters(ctx, *o.Voters); err != nil {
			return w, fmt.Errorf("voters role: %w", err)
		}
	}
	return w, nil
}

// Down stops everything and reports what was left behind.
func (w *World) Down() error {
	if w.Binder != nil {
		w.Binder.Stop()
	}
	err := w.Stop()
	w.stopNodePlugins()
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

// RestartController starts the i-th holdfast-controller again (after a
// drill killed it), with the same identity and ports.
func (w *World) RestartController(ctx context.Context, i int) error {
	old := w.Controllers[i]
	if !old.Exited() {
		return fmt.Errorf("%s is running", old.Identity)
	}
	ctl, err := w.StartController(ctx, "units", old.Identity, 8200+10*i, "--lease-stand-down="+w.standDown.String())
	if err != nil {
		return err
	}
	w.Controllers[i] = ctl
	return nil
}
