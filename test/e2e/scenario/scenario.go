// Package scenario is what the drills (test/e2e) and the demo share: a
// holdfast installation on a test/cluster cluster (holdfast-webhook, two
// holdfast-controller --role units replicas, holdfast-scheduler with the
// shipped configuration, holdfast-node on every node), units each driving their own simulated
// device, and the outside observations a drill asserts on and the demo
// prints: the device's write log, the Unit's status and Events, the
// controllers' metrics and audit trails.
package scenario

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
	"github.com/holdfast-io/holdfast/test/cluster"
	"github.com/holdfast-io/holdfast/test/devicesim"
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
	// Grantor are the units role's timings, given to the webhook too, as
	// the chart renders controller.units.grantor into both (default: the
	// chart's, policy.DefaultGrantorTimings). The lease floor follows.
	Grantor *policy.GrantorTimings
	// EtcdMembers of the control plane (default 1).
	EtcdMembers int
	// Device is the mode of every unit's device unless its UnitOptions
	// say otherwise (default devicesim.OwnerEpoch).
	Device devicesim.Mode
	// EvictionSeconds is how long a pod without a toleration of its own
	// stays on a NotReady or unreachable node (default
	// cluster.DefaultEvictionSeconds).
	EvictionSeconds int
	// Install is how holdfast's components run (default Processes).
	Install Install
	// Voters, when set, puts the control plane's etcd on nodes and runs
	// holdfast-controller --role voters (voters.go).
	Voters *VotersOptions
	Logf   func(format string, args ...any)
}

// World is a running installation.
type World struct {
	*cluster.Cluster
	Webhook *cluster.Process
	// Scheduler is holdfast-scheduler, built from cmd/holdfast-scheduler;
	// kept running by a supervisor (supervise.go) as its Deployment's
	// restart policy would (kube-scheduler exits when it loses its
	// election).
	Scheduler   *cluster.Process
	NodePlugins []*NodePlugin
	// Controllers are the units role's replicas, each kept running by a
	// supervisor: the role exits by design when it loses its election (an
	// apiserver slower than its renew deadline), and its Deployment starts
	// it again. Read them with ControllerList while drills run.
	Controllers []*cluster.Controller
	// VotersController is holdfast-controller --role voters (Options.Voters).
	VotersController *cluster.Controller
	votersMu         sync.Mutex
	logf             func(string, ...any)
	plants           int
	controllers      int
	standDown        time.Duration
	device           devicesim.Mode
	install          Install
	grantor          policy.GrantorTimings

	mu                 sync.Mutex
	schedulerRestarts  int
	controllerRestarts int
	// ctlBusy marks a replica a drill (or the supervisor) is stopping or
	// starting: the supervisor leaves it alone.
	ctlBusy map[int]bool
	// killed are the chart's controller pods a drill killed, by index
	// (ArmControllerKill).
	killed map[int]killedPod
	// chartVoters: the chart's voters role is enabled.
	chartVoters bool
	// supervision ends (stopSupervising) before the cluster stops; the
	// supervisors' goroutines are counted in supervisors.
	supervision     context.Context
	stopSupervising context.CancelFunc
	supervisors     sync.WaitGroup
}

// RuntimeImage is the unit runtime's image on every node.
const RuntimeImage = "holdfast.test/unit-runtime:e2e"

// DefaultLeaseStandDown is the controllers' --lease-stand-down unless
// Options say otherwise.
const DefaultLeaseStandDown = 20 * time.Second

// SchedulerPort is holdfast-scheduler's secure port on the hub's loopback.
const SchedulerPort = 10259

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
		o.LeaseStandDown = DefaultLeaseStandDown
	}
	if o.Device == "" {
		o.Device = devicesim.OwnerEpoch
	}
	if o.Install == "" {
		o.Install = Processes
	}
	grantor := policy.DefaultGrantorTimings()
	if o.Grantor != nil {
		grantor = *o.Grantor
	}
	if err := grantor.Validate(); err != nil {
		return nil, err
	}
	images := []cluster.Image{{Ref: RuntimeImage, Package: "cmd/unit-runtime"}, {Ref: NodePluginImage, Package: "cmd/holdfast-node"}}
	if o.Install == Chart {
		images = append(images, chartImages()...)
	}
	if o.Voters.staticPods() {
		// The chart's node.staticPod values are not rendered here yet.
		if o.Install == Chart {
			return nil, fmt.Errorf("%s=%s: only with holdfast installed as processes", VotersLayoutEnv, LayoutStaticPod)
		}
		images = append(images, cluster.KubeadmImages()...)
	}
	var specs []cluster.NodeSpec
	for i, n := range o.Nodes {
		spec := cluster.NodeSpec{Name: n, Etcd: o.Voters.etcdRole(n)}
		spec.StaticPods = spec.Etcd != "" && o.Voters.staticPods()
		if o.Install == Chart && i > 0 {
			spec.Labels = map[string]string{deploymentsLabel: "true"}
		}
		specs = append(specs, spec)
	}
	c, err := cluster.Start(ctx, cluster.Config{Nodes: specs, EtcdMembers: o.EtcdMembers, EvictionSeconds: o.EvictionSeconds, Logf: o.Logf,
		Images: images})
	if err != nil {
		return nil, err
	}
	w = &World{Cluster: c, logf: o.Logf, controllers: o.Controllers, standDown: o.LeaseStandDown, device: o.Device, install: o.Install, grantor: grantor, ctlBusy: map[int]bool{}}
	w.supervision, w.stopSupervising = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			w.stopSupervision()
			err = errors.Join(err, c.Stop())
			w.stopNodePlugins()
			w = nil
		}
	}()
	if o.Install == Chart {
		// The voters role and holdfast-node's voter-swap parts are in the
		// release from its install; startVoters gives them their policy.
		w.chartVoters = o.Voters != nil
		o.Logf("installing holdfast with its chart")
		if err = w.startNodeHosts(); err != nil {
			return w, err
		}
		if o.Voters != nil {
			if err = w.votersPolicy(ctx, *o.Voters); err != nil {
				return w, fmt.Errorf("voters role: %w", err)
			}
		}
		if err = w.installChart(ctx); err != nil {
			return w, err
		}
		if o.Voters != nil {
			if err = w.startVoters(ctx, *o.Voters); err != nil {
				return w, fmt.Errorf("voters role: %w", err)
			}
		}
		return w, nil
	}
	o.Logf("starting holdfast-webhook")
	if w.Webhook, err = c.StartWebhook(ctx, grantor.Args()...); err != nil {
		return w, fmt.Errorf("holdfast-webhook: %w", err)
	}
	if o.Voters != nil {
		// holdfast-node reads the policy's host settings (its actuator
		// among them) once, at start.
		if err = w.votersPolicy(ctx, *o.Voters); err != nil {
			return w, fmt.Errorf("voters role: %w", err)
		}
	}
	o.Logf("starting holdfast-node on every node")
	if err = w.startNodePlugins(ctx, o.Voters.staticPods()); err != nil {
		return w, fmt.Errorf("holdfast-node: %w", err)
	}
	o.Logf("starting holdfast-scheduler")
	if w.Scheduler, err = c.StartHoldfastScheduler(ctx, holdfastv1.SchedulerName, SchedulerPort); err != nil {
		return w, fmt.Errorf("holdfast-scheduler: %w", err)
	}
	w.superviseScheduler()
	for i := 0; i < o.Controllers; i++ {
		id := fmt.Sprintf("holdfast-controller-%d", i)
		o.Logf("starting %s", id)
		ctl, err := w.startUnitsReplica(ctx, i, id)
		if err != nil {
			return w, fmt.Errorf("%s: %w", id, err)
		}
		w.mu.Lock()
		w.Controllers = append(w.Controllers, ctl)
		w.mu.Unlock()
		w.superviseController(i, id)
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
	w.stopSupervision()
	err := w.Stop()
	w.stopNodePlugins()
	if left := w.LeftoversAfterExit(time.Minute); len(left) > 0 {
		err = errors.Join(err, fmt.Errorf("left behind: %v", left))
	}
	return err
}

// Device is the mode of the units' devices unless a unit says otherwise.
func (w *World) Device() devicesim.Mode { return w.device }

// Installed is how holdfast's components run.
func (w *World) Installed() Install { return w.install }

// ControllerList is the units role's replicas now. Installed by the chart
// they are its pods (Process nil): their identity is the pod's name, their
// endpoints the pod's address.
func (w *World) ControllerList() []*cluster.Controller {
	if w.install == Chart {
		return w.chartControllers()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.Controllers)
}

// ControllerRestarts is how often the supervisor started a units-role
// replica again (installed by the chart: its containers' restarts).
func (w *World) ControllerRestarts() int {
	if w.install == Chart {
		return w.chartRestarts(chartUnitsComponent)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.controllerRestarts
}

// RestartController starts the i-th holdfast-controller again (after a
// drill killed or stopped it), with the same identity and ports, and hands
// it back to the supervisor. The processes install only: the chart's
// replicas are started again by their Deployment (RestartAsCandidate).
func (w *World) RestartController(ctx context.Context, i int) error {
	if w.install == Chart {
		return fmt.Errorf("the chart's Deployment starts its replicas again")
	}
	w.mu.Lock()
	w.ctlBusy[i] = true
	old := w.Controllers[i]
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.ctlBusy, i)
		w.mu.Unlock()
	}()
	if !old.Exited() {
		return fmt.Errorf("%s is running", old.Identity)
	}
	return w.startControllerAgain(ctx, i, old)
}

// startUnitsReplica starts the i-th units-role replica: its ports by its
// index, the World's lease stand-down.
func (w *World) startUnitsReplica(ctx context.Context, i int, id string) (*cluster.Controller, error) {
	return w.StartController(ctx, "units", id, 8200+10*i, append([]string{"--lease-stand-down=" + w.standDown.String()}, w.grantor.Args()...)...)
}

// LeaseFloor is the shortest lease the installed grantor keeps through a
// leader change, which the webhook enforces (docs/design.md §3 L14), in
// seconds.
func (w *World) LeaseFloor() int32 {
	floor, _ := w.grantor.LeaseFloor()
	return int32(floor / time.Second)
}

// Grantor is the installed grantor's timings.
func (w *World) Grantor() policy.GrantorTimings { return w.grantor }

// startControllerAgain starts the i-th replica in old's place. A replica
// that started but did not turn healthy still takes the place: it holds
// the ports, and its supervisor watches it.
func (w *World) startControllerAgain(ctx context.Context, i int, old *cluster.Controller) error {
	ctl, err := w.startUnitsReplica(ctx, i, old.Identity)
	if ctl != nil {
		w.mu.Lock()
		w.Controllers[i] = ctl
		w.mu.Unlock()
	}
	return err
}

// superviseController keeps the i-th units-role replica running, except
// while a drill holds it (ArmControllerKill until RestartController).
func (w *World) superviseController(i int, id string) {
	w.keepRunning(id, func() (supervised, bool) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.Controllers[i], w.ctlBusy[i]
	}, func(ctx context.Context) error {
		w.mu.Lock()
		if w.ctlBusy[i] {
			w.mu.Unlock()
			return nil
		}
		w.ctlBusy[i] = true
		old := w.Controllers[i]
		w.mu.Unlock()
		err := w.startControllerAgain(ctx, i, old)
		w.mu.Lock()
		if err == nil {
			w.controllerRestarts++
		}
		delete(w.ctlBusy, i)
		w.mu.Unlock()
		return err
	})
}

// superviseScheduler keeps holdfast-scheduler running: it ends itself when
// it loses its leader election, for one when the apiserver is away or
// slower than its renew deadline.
func (w *World) superviseScheduler() {
	w.keepRunning("holdfast-scheduler", func() (supervised, bool) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.Scheduler, false
	}, func(ctx context.Context) error {
		np, err := w.StartHoldfastScheduler(ctx, holdfastv1.SchedulerName, SchedulerPort)
		if np != nil {
			w.mu.Lock()
			w.Scheduler = np
			w.schedulerRestarts++
			w.mu.Unlock()
		}
		return err
	})
}

// SchedulerRestarts is how often the supervisor started holdfast-scheduler
// again (installed by the chart: its containers' restarts).
func (w *World) SchedulerRestarts() int {
	if w.install == Chart {
		return w.chartRestarts(chartSchedulerComponent)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.schedulerRestarts
}

// SchedulerLog is the end of holdfast-scheduler's current log (installed
// by the chart: of each of its pods).
func (w *World) SchedulerLog(lines int) string {
	if w.install == Chart {
		return w.chartLogs(chartSchedulerComponent, lines)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.Scheduler.Tail(lines)
}

// SetLeaseStandDown restarts every holdfast-controller, one at a time, with
// --lease-stand-down=d (each is stopped with SIGTERM: a deliberate stop
// releases its leadership at once, and the other replica takes over from
// its cache; installed by the chart, helm upgrade rolls the Deployment). A
// new leader holds off re-binds for d + lease + margin after its election.
func (w *World) SetLeaseStandDown(ctx context.Context, d time.Duration) error {
	w.standDown = d
	if w.install == Chart {
		return w.upgradeChart(ctx, func(map[string]any) {})
	}
	for i, c := range w.ControllerList() {
		w.mu.Lock()
		w.ctlBusy[i] = true
		w.mu.Unlock()
		c.Stop(30 * time.Second)
		if err := w.RestartController(ctx, i); err != nil {
			return err
		}
	}
	return nil
}
