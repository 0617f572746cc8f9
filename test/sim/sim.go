package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/leadership"
	"github.com/holdfast-io/holdfast/policy"
)

// Config is one simulated plant and what may happen to it.
type Config struct {
	// Horizon is how much true time a run simulates.
	Horizon time.Duration
	// Timings are the grantor's election timings; StandDown its
	// --lease-stand-down.
	Timings   policy.GrantorTimings
	StandDown time.Duration
	// Controllers is the number of holdfast-controller replicas.
	Controllers int
	// MaxRateError bounds every clock's rate error; MaxOffset its offset
	// from true time at T+0.
	MaxRateError float64
	MaxOffset    time.Duration
	// Noise is the network's ordinary behaviour.
	Noise Noise
	// OwnerEpochBlock: devices refuse an epoch below the highest seen.
	// Off: a real Modbus device, last write wins.
	OwnerEpochBlock bool
	// StartDelay bounds a runtime container's start (image, sandbox).
	StartDelay [2]time.Duration
	// ControllerRestart is how long an exited controller takes to come
	// back.
	ControllerRestart time.Duration
	// Faults is the schedule's mix; Gap the mean time between two actions.
	Faults Mix
	Gap    time.Duration
}

// Noise is the network's ordinary behaviour on every link.
type Noise struct {
	BaseDelay, Jitter time.Duration
	TailProb          float64
	TailMean          time.Duration
	LongTailProb      float64
	LongTailMean      time.Duration
	Loss, Dup         float64
}

// DefaultConfig is the plant the tests search.
func DefaultConfig() Config {
	return Config{
		Horizon:      30 * time.Minute,
		Timings:      policy.DefaultGrantorTimings(),
		StandDown:    leadership.DefaultLeaseStandDown,
		Controllers:  2,
		MaxRateError: 200e-6,
		MaxOffset:    500 * time.Millisecond,
		Noise: Noise{BaseDelay: 300 * time.Microsecond, Jitter: 2 * time.Millisecond,
			TailProb: 0.03, TailMean: 80 * time.Millisecond, LongTailProb: 0.003, LongTailMean: 1500 * time.Millisecond,
			Loss: 0.002, Dup: 0.002},
		StartDelay:        [2]time.Duration{500 * time.Millisecond, 4 * time.Second},
		ControllerRestart: 5 * time.Second,
		Faults:            DefaultMix(),
		Gap:               40 * time.Second,
	}
}

// Sim is one run.
type Sim struct {
	cfg   Config
	seed  uint64
	now   time.Duration
	seq   uint64
	queue eventHeap
	rng   *rand.Rand
	tl    *timeline
	net   *network

	hosts      []*host
	hostByName map[string]*host
	hostByIP   map[string]*host
	api        *apiserver
	ctrls      []*controller
	nodes      []*node
	devices    map[string]*device
	op         *operator
	fieldQueue []queuedField
	// rts are the runtime processes started, the dead pruned as they are
	// met.
	rts []*runtimeProc

	// violation is the first property broken; the run stops there.
	violation *Violation
	// held records, per unit, the instants a new epoch first held its
	// lease; acquired the instants a controller took the leadership
	// (liveness).
	held     map[string][]heldAt
	acquired []time.Duration
	// livenessPromise is the lease and margin the binding whose runtime
	// died was recorded under (L11: a margin or lease shortened since
	// waits for the next binding, so the spec's may be shorter).
	livenessPromise *holdfastv1.RuntimePromise
}

// heldAt is when an epoch's runtime first held its lease, by its clock.
type heldAt struct {
	epoch int64
	at    time.Duration
}

const (
	unitNS   = "plant"
	unitName = "kiln"
	unitKey_ = unitNS + "/" + unitName
	// primaryLabel marks the unit's primary node.
	primaryLabel = "plant.example/line"
)

// newSim builds the plant of cfg with seed's clocks and noise.
func newSim(cfg Config, seed uint64, noise bool) *Sim {
	s := &Sim{cfg: cfg, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		tl: &timeline{noise: noise}, hostByName: map[string]*host{}, hostByIP: map[string]*host{},
		devices: map[string]*device{}, held: map[string][]heldAt{}}
	s.net = &network{s: s, links: map[linkKey]*link{}}
	epoch := time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)
	mkHost := func(name string, i int) *host {
		off := time.Duration((s.rng.Float64()*2 - 1) * float64(cfg.MaxOffset))
		rate := 1 + (s.rng.Float64()*2-1)*cfg.MaxRateError
		h := &host{name: name, ip: fmt.Sprintf("10.0.0.%d", i), powered: true, ports: map[int32]*runtimeProc{}}
		h.clock = &simClock{s: s, base: epoch.Add(off), rate: rate}
		s.hosts = append(s.hosts, h)
		s.hostByName[name] = h
		s.hostByIP[h.ip] = h
		return h
	}
	mkProc := func(h *host, name string) *proc {
		p := &proc{name: name, host: h}
		h.procs = append(h.procs, p)
		return p
	}
	apiHost := mkHost("api", 1)
	s.api = &apiserver{s: s, p: mkProc(apiHost, "kube-apiserver")}
	s.revive(s.api.p)
	if err := s.api.init(); err != nil {
		panic(err)
	}
	for i := range cfg.Controllers {
		h := mkHost(fmt.Sprintf("cp%d", i+1), 10+i)
		c := &controller{s: s, name: fmt.Sprintf("ctl-%d", i), p: mkProc(h, fmt.Sprintf("holdfast-controller-%d", i))}
		s.ctrls = append(s.ctrls, c)
	}
	for i := range 3 {
		h := mkHost(fmt.Sprintf("n%d", i+1), 20+i)
		n := &node{s: s, name: h.name, host: h}
		n.kubelet = mkProc(h, "kubelet")
		n.plugin = mkProc(h, "holdfast-node")
		s.nodes = append(s.nodes, n)
		labels := map[string]string{"kubernetes.io/hostname": h.name}
		if i == 0 {
			labels[primaryLabel] = "1"
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h.name, Labels: labels},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
				Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: h.ip}}}}
		if _, err := s.api.create(user{name: "system:admin", groups: []string{"system:masters"}}, node); err != nil {
			panic(err)
		}
		s.api.heartbeats[h.name] = s.api.now()
	}
	devHost := mkHost("plc", 40)
	s.devices[unitKey_] = &device{s: s, unit: unitKey_, host: devHost, regs: map[uint16]uint16{}, lastWrite: map[string]time.Duration{}}
	opHost := mkHost("ops", 50)
	s.op = &operator{s: s, p: mkProc(opHost, "kubectl")}
	s.revive(s.op.p)
	return s
}

// start powers everything on and creates the unit.
func (s *Sim) start(spec holdfastv1.UnitSpec) {
	s.after(s.api.p, 5*time.Second, s.api.lifecycle)
	var sched func()
	sched = func() {
		s.api.schedule()
		s.after(s.api.p, time.Second, sched)
	}
	s.soon(s.api.p, sched)
	for _, n := range s.nodes {
		n.boot()
	}
	for _, c := range s.ctrls {
		c.boot()
	}
	s.op.create(spec)
}

// unitSpec is the unit's spec with availability a.
func unitSpec(a holdfastv1.Availability) holdfastv1.UnitSpec {
	return holdfastv1.UnitSpec{
		Runtime:      holdfastv1.UnitRuntime{Image: "registry.plant.example/kiln-runtime:1", LeasePort: 9443, HealthPort: 9444},
		NodeSelector: map[string]string{primaryLabel: "1"},
		Availability: a,
	}
}

// availability draws a unit's availability from r: admission refuses what
// breaks §3's inequalities, and the operator draws again.
func drawAvailability(r *rand.Rand) holdfastv1.Availability {
	lease := leases[r.IntN(len(leases))]
	hold := holdfastv1.HoldBound(time.Duration(lease) * time.Second)
	a := holdfastv1.Availability{
		Mode:                       holdfastv1.Failover,
		LeaseDurationSeconds:       lease,
		RuntimeStartupGraceSeconds: lease + int32(r.IntN(60)),
		RebindMarginSeconds:        ptr.To(int32(hold/time.Second) - 5 + int32(r.IntN(16))),
		Targets:                    &holdfastv1.FailoverTargets{Nodes: []string{"n2", "n3"}},
		Colocation:                 holdfastv1.ColocationRefuse,
	}
	if r.IntN(5) == 0 {
		a.Mode = holdfastv1.Autonomy
	}
	if *a.RebindMarginSeconds < 0 {
		a.RebindMarginSeconds = ptr.To(int32(0))
	}
	return a
}

var leases = []int32{10, 15, 20, 30, 45, 60}

// startDelay draws a runtime container's start-up.
func (s *Sim) startDelay() time.Duration {
	lo, hi := s.cfg.StartDelay[0], s.cfg.StartDelay[1]
	return lo + time.Duration(s.rng.Float64()*float64(hi-lo))
}
