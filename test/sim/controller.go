package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/grantor"
	"github.com/holdfast-io/holdfast/controller/leadership"
	"github.com/holdfast-io/holdfast/controller/units"
	"github.com/holdfast-io/holdfast/internal/audit"
)

// controller is one replica of holdfast-controller --role=units on its own
// machine: the real grantor (stepped), the real Reconciler and WarmStart,
// the real leadership.Run and Tenure, behind a simulated election and a
// controller-runtime manager's work queue.
type controller struct {
	s    *Sim
	name string
	p    *proc

	// One life of the process.
	cache    *cache
	g        *grantor.Grantor
	tenure   *leadership.Tenure
	audit    *audit.Logger
	rec      *units.Reconciler
	el       *elector
	mgr      *simManager
	run      *task
	cancel   context.CancelFunc
	killing  bool
	leading  bool
	loopGen  map[types.NamespacedName]int
	q        queue
	passTask *task
}

func (c *controller) identity() string { return fmt.Sprintf("%s_%d", c.name, c.p.life) }

// queue is controller-runtime's work queue with one worker: a unit queued
// while its pass runs is passed again after it; failures back off from 5ms,
// doubling.
type queue struct {
	ready    []types.NamespacedName
	queued   map[types.NamespacedName]bool
	dirty    map[types.NamespacedName]bool
	failures map[types.NamespacedName]int
	waiting  map[types.NamespacedName]time.Duration
	busy     *types.NamespacedName
}

// boot starts a new life of the process.
func (c *controller) boot() {
	s := c.s
	s.revive(c.p)
	c.killing, c.leading = false, false
	c.loopGen = map[types.NamespacedName]int{}
	c.q = queue{queued: map[types.NamespacedName]bool{}, dirty: map[types.NamespacedName]bool{}, failures: map[types.NamespacedName]int{},
		waiting: map[types.NamespacedName]time.Duration{}}
	clk := c.p.clock()
	c.cache = s.watch(c.p, c.onChange)
	gopts := grantor.Options{Name: c.name, Clock: clk, Notify: c.add,
		Rand: rand.New(rand.NewPCG(s.rng.Uint64(), s.rng.Uint64())), Stepped: c.stepped}
	if s.cfg.StandDown > 0 {
		// As controller/app wires it.
		gopts.GrantsUntil = func() time.Time { return c.el.gate.GrantsUntil(s.cfg.StandDown) }
	}
	c.g = grantor.New(gopts)
	c.tenure = leadership.NewTenure(clk, s.cfg.StandDown)
	c.audit = audit.New(auditWriter{c}, audit.ComponentUnits, clk)
	c.rec = &units.Reconciler{Recorder: recorder{c}, Grantor: c.g, HoldOff: c.tenure, Audit: c.audit, Clock: clk,
		Actor: "holdfast-controller/" + c.name, Timings: s.cfg.Timings,
		Epochs: &units.EpochRecord{Namespace: "holdfast-system"}}
	c.el = &elector{c: c, life: c.p.life, t: s.cfg.Timings}
	c.el.gate = &leadership.ReleaseGate{Interface: &simLock{e: c.el}, Clock: clk}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	life := c.p.life
	c.run = s.goTask("leadership.Run "+c.name, func(t *task) {
		c.mgr = &simManager{c: c, t: t, lost: make(chan struct{})}
		ending, err := leadership.Run(ctx, c.mgr, c.g, leadership.RunOptions{
			StandDown: s.cfg.StandDown, Clock: clockFor(c.p, t), Gate: c.el.gate, Audit: c.audit, Actor: "holdfast-controller/" + c.name,
		})
		s.soon(c.p, func() {
			if c.p.life == life {
				c.exited(ending, err)
			}
		})
	})
	s.log(c.p.host, "", kState, "%s started (election identity %s)", c.name, c.identity())
	s.soon(c.p, c.elect)
	s.at(s.now+livenessPeriod, nil, func() { c.probe(life, 0) })
}

// livenessPeriod and livenessFailures are the chart's liveness probe of
// the controller (/healthz every 10s, 3 failures): the kubelet of its
// machine restarts a process that stopped answering, unless the whole
// machine is frozen with it.
const (
	livenessPeriod   = 10 * time.Second
	livenessFailures = 3
)

func (c *controller) probe(life, failures int) {
	if c.p.life != life || !c.p.alive {
		return
	}
	switch {
	case c.p.host.frozen > 0:
	case c.p.running():
		failures = 0
	default:
		if failures++; failures >= livenessFailures {
			c.s.log(c.p.host, "", kState, "%s killed by its liveness probe", c.name)
			c.crash(true)
			return
		}
	}
	c.s.at(c.s.now+livenessPeriod, nil, func() { c.probe(life, failures) })
}

// elect starts the election once the cache has synced, as a manager does.
func (c *controller) elect() {
	if !c.cache.synced {
		c.s.after(c.p, 100*time.Millisecond, c.elect)
		return
	}
	c.el.tryAcquire()
}

// simManager is what leadership.Run starts: it returns when the election is
// lost, or when Run cancels it on a deliberate stop (after the release,
// which the gate then lets through).
type simManager struct {
	c    *controller
	t    *task
	lost chan struct{}
	// ctx is the manager's context while Start runs: Run's own goroutine
	// cancels it on a deliberate stop.
	ctx context.Context
}

func (m *simManager) Start(ctx context.Context) error {
	m.ctx = ctx
	defer func() { m.ctx = nil }()
	m.t.park()
	select {
	case <-ctx.Done():
		if !m.c.killing {
			m.c.el.stopped = true
			m.c.el.release()
		}
		return nil
	case <-m.lost:
		return errors.New("leader election lost")
	}
}

// startedLeading runs the leader's runnables: the warm start, then the
// controller with every unit queued.
func (c *controller) startedLeading() {
	c.leading = true
	c.s.acquired = append(c.s.acquired, c.s.now)
	ws := &units.WarmStart{Reader: c.cache.reader(), Grantor: c.g, Tenure: c.tenure}
	_ = ws.Start(klog.NewContext(context.Background(), klog.Background()))
	c.s.log(c.p.host, "", kState, "%s leads: hold-off until %s", c.name, c.tenure.Acquired().Add(c.s.cfg.StandDown).Format("15:04:05.000")+" + lease + margin")
	c.onChange("", "", "")
}

// stoppedLeading stops the manager unasked: Run then stands down.
func (c *controller) stoppedLeading() {
	c.leading = false
	c.s.abort(c.passTask)
	close(c.mgr.lost)
	c.s.wait(c.run)
}

// exited is the end of leadership.Run: the process exits and its pod
// restarts it.
func (c *controller) exited(ending leadership.Ending, err error) {
	c.s.log(c.p.host, "", kState, "%s exited: %s (%v)", c.name, ending, err)
	c.s.kill(c.p)
	c.s.at(c.s.now+c.s.cfg.ControllerRestart, nil, c.boot)
}

// stop is a deliberate stop (a rolling update, a drained node): Run
// releases the leadership and stops every loop at once.
func (c *controller) stop() {
	if !c.p.alive {
		return
	}
	c.s.abort(c.passTask)
	c.signal()
}

// signal cancels Run's context (SIGTERM) and lets Run finish: when it waits
// in the manager, Run's own goroutine first cancels the manager.
func (c *controller) signal() {
	c.cancel()
	if m := c.mgr; m != nil && m.ctx != nil {
		<-m.ctx.Done()
	}
	c.s.wait(c.run)
}

// crash kills the process (SIGKILL, a lost machine): nothing is released,
// nothing stands down; the pod restarts it.
func (c *controller) crash(restart bool) {
	if !c.p.alive {
		return
	}
	c.killing = true
	c.s.kill(c.p)
	c.s.abort(c.passTask)
	c.signal()
	if restart {
		c.s.at(c.s.now+c.s.cfg.ControllerRestart, nil, c.boot)
	}
}

func unitKey(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

// onChange queues what a change of the cache concerns, as the Reconciler's
// watches do.
func (c *controller) onChange(kind, ns, name string) {
	switch kind {
	case "Unit":
		c.add(unitKey(ns, name))
	case "Pod":
		if o, ok := c.cache.st.get("Pod", ns, name); ok {
			if u := o.GetLabels()[holdfastv1.LabelUnit]; u != "" {
				c.add(unitKey(ns, u))
			}
		}
	default:
		for _, o := range c.cache.st.sorted("Unit", "", nil) {
			c.add(unitKey(o.GetNamespace(), o.GetName()))
		}
	}
}

func (c *controller) add(u types.NamespacedName) {
	if !c.leading || !c.p.alive {
		return
	}
	q := &c.q
	if q.busy != nil && *q.busy == u {
		q.dirty[u] = true
		return
	}
	if q.queued[u] {
		return
	}
	q.queued[u] = true
	q.ready = append(q.ready, u)
	c.s.soon(c.p, c.work)
}

// addAfter queues u after d; a unit already waiting keeps the earlier of
// its two instants (the delaying queue's one entry per item).
func (c *controller) addAfter(u types.NamespacedName, d time.Duration) {
	at := c.p.clock().trueAfter(c.s.now, d)
	if w, ok := c.q.waiting[u]; ok && w <= at && w >= c.s.now {
		return
	}
	c.q.waiting[u] = at
	c.s.at(at, c.p, func() {
		if w, ok := c.q.waiting[u]; ok && w == at {
			delete(c.q.waiting, u)
			c.add(u)
		}
	})
}

// work runs the next pass when none runs.
func (c *controller) work() {
	q := &c.q
	if !c.leading || q.busy != nil || len(q.ready) == 0 {
		return
	}
	u := q.ready[0]
	q.ready = q.ready[1:]
	delete(q.queued, u)
	q.busy = &u
	life := c.p.life
	var res reconcile.Result
	var err error
	c.passTask = c.s.goTask("reconcile "+u.String(), func(t *task) {
		cl := &taskClient{s: c.s, p: c.p, t: t, cache: c.cache, u: user{name: c.s.api.opts.Controller}}
		// One pass at a time: the record's reads and writes are this pass's.
		c.rec.Epochs.Reader, c.rec.Epochs.Writer = liveReader{cl}, cl
		r := *c.rec
		r.Client, r.APIReader = cl, liveReader{cl}
		res, err = r.Reconcile(klog.NewContext(context.Background(), klog.Background()), reconcile.Request{NamespacedName: u})
		c.s.soon(c.p, func() {
			if c.p.life == life {
				c.passed(u, res, err)
			}
		})
	})
}

// passed requeues as controller-runtime does.
func (c *controller) passed(u types.NamespacedName, res reconcile.Result, err error) {
	q := &c.q
	q.busy = nil
	c.passTask = nil
	switch {
	case err != nil:
		q.failures[u]++
		c.addAfter(u, min(5*time.Millisecond<<min(q.failures[u]-1, 30), 1000*time.Second))
	case res.RequeueAfter > 0:
		q.failures[u] = 0
		c.addAfter(u, res.RequeueAfter)
	case res.Requeue:
		q.failures[u]++
		c.addAfter(u, min(5*time.Millisecond<<min(q.failures[u]-1, 30), 1000*time.Second))
	default:
		q.failures[u] = 0
	}
	if q.dirty[u] {
		delete(q.dirty, u)
		c.add(u)
	}
	c.s.soon(c.p, c.work)
}

// stepped starts driving a renewal loop the grantor started.
func (c *controller) stepped(u types.NamespacedName) {
	c.loopGen[u]++
	gen := c.loopGen[u]
	c.s.soon(c.p, func() { c.begin(u, gen) })
}

// begin sends the loop's next grant to the runtime's lease endpoint and
// ends the attempt with what comes back, or nothing by its timeout.
func (c *controller) begin(u types.NamespacedName, gen int) {
	s := c.s
	if c.loopGen[u] != gen {
		return
	}
	x, ok := c.g.Begin(u)
	if !ok {
		return
	}
	req, err := x.Request()
	if err != nil {
		panic(err)
	}
	body, _ := readAll(req.Body)
	done := false
	end := func(r *leaseAnswer) {
		if done {
			return
		}
		done = true
		var wait time.Duration
		var ok bool
		if r.resp != nil {
			wait, ok = c.g.End(x, r.resp, nil, false)
		} else {
			wait, ok = c.g.End(x, nil, r.err, r.timedOut)
		}
		if ok && c.loopGen[u] == gen {
			k := kNoise
			if !c.leading && r.code == http.StatusOK {
				k = kState // a grantor that lost its leadership renews: say so
			}
			s.log(c.p.host, u.String(), k, "%s grant seq %d to epoch %d: %s", c.name, x.Grant.Seq, x.Grant.Epoch, r)
			s.after(c.p, wait, func() { c.begin(u, gen) })
		}
	}
	s.after(c.p, x.Timeout, func() { end(&leaseAnswer{err: context.DeadlineExceeded, timedOut: true}) })
	s.postLease(c.p, x.Target.Address, body, func(r *leaseAnswer) { end(r) })
}

// recorder is the Reconciler's event recorder: every Event on the timeline.
type recorder struct{ c *controller }

func (r recorder) Eventf(regarding runtime.Object, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	c := r.c
	unit := ""
	if u, ok := regarding.(*holdfastv1.Unit); ok {
		unit = u.Namespace + "/" + u.Name
	}
	c.s.log(c.p.host, unit, kDecision, "%s Event %s %s: %s", c.name, eventtype, reason, fmt.Sprintf(note, args...))
}

// auditWriter puts the controller's audit lines on the timeline.
type auditWriter struct{ c *controller }

func (w auditWriter) Write(b []byte) (int, error) {
	c := w.c
	if !c.p.alive && !c.killing {
		return len(b), nil
	}
	var r audit.Record
	if json.Unmarshal(b, &r) == nil && r.Object == nil {
		c.s.log(c.p.host, "", kDecision, "%s audit %s: %s", c.name, r.Reason, strings.TrimSpace(r.Message))
	}
	return len(b), nil
}
