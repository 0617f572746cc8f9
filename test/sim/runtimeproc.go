package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"k8s.io/klog/v2"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/runtime"
	"github.com/holdfast-io/holdfast/runtime/driver"
	"github.com/holdfast-io/holdfast/runtime/lease"
)

// runtimeProc is one life of a runtime container: the real runtime.Runtime
// (its Keeper, scan and guarded write path) on its node's clock, stepped by
// the event loop, serving its real lease Handler on the node's port.
type runtimeProc struct {
	s     *Sim
	p     *proc
	n     *node
	c     *container
	rt    *runtime.Runtime
	k     *lease.Keeper
	drv   *fieldDriver
	port  int32
	unit  string
	epoch int64
	mode  holdfastv1.AvailabilityMode
	// id names this process on the timeline and in the device's log.
	id string
	// stepAt is when the Keeper's next transition is scheduled.
	stepAt time.Duration
	// seen is the last state logged.
	seen leaseapi.State
}

const holdValue = 0

var scanInterval = time.Second

// startRuntime starts a runtime process for container c on n, configured as
// the kubelet configures it: from the pod's environment (RuntimePod).
func (n *node) startRuntime(c *container) (*runtimeProc, error) {
	s := n.s
	env := map[string]string{}
	for _, e := range c.env {
		env[e.Name] = e.Value
	}
	leaseD, err := time.ParseDuration(env[holdfastv1.RuntimeEnvLeaseDuration])
	if err != nil {
		return nil, err
	}
	port64, _ := strconv.ParseInt(env[holdfastv1.RuntimeEnvLeasePort], 10, 32)
	port := int32(port64)
	if _, busy := n.host.ports[port]; busy {
		return nil, fmt.Errorf("lease endpoint: listen tcp :%d: bind: address already in use", port)
	}
	dev := s.devices[c.unit]
	if dev == nil {
		return nil, fmt.Errorf("no device for unit %s", c.unit)
	}
	p := &proc{name: fmt.Sprintf("%s/%s#%d", n.name, c.podName, c.restarts), host: n.host}
	s.revive(p)
	n.host.procs = append(n.host.procs, p)
	rp := &runtimeProc{s: s, p: p, n: n, c: c, port: port, unit: c.unit, epoch: c.epoch,
		mode: holdfastv1.AvailabilityMode(env[holdfastv1.RuntimeEnvMode]), id: p.name}
	rp.drv = &fieldDriver{rp: rp, dev: dev}
	hold := uint16(holdValue)
	outputs := []runtime.Output{{Name: "setpoint", Device: "plc", Register: 1, Hold: &hold}}
	rt, err := runtime.New(runtime.Config{
		Lease: lease.Config{Unit: c.unit, Epoch: c.epoch, Mode: rp.mode, LeaseDuration: leaseD,
			Incarnation: holdfastv1.RuntimeIncarnation{PodUID: c.podUID, RestartCount: c.restarts}, Clock: n.host.clock},
		Drivers:      []driver.Driver{rp.drv},
		Outputs:      outputs,
		Program:      runtime.StepProgram(outputs, map[string]uint16{"setpoint": 1}),
		ScanInterval: scanInterval,
		// The simulated network carries grants as messages between the
		// parts it runs; the lease channel's authentication (L12) is
		// not explored here (docs/safety.md).
		InsecurePlaintextLease: true,
	}, klog.Background())
	if err != nil {
		return nil, err
	}
	rp.rt, rp.k = rt, rt.Keeper()
	if err := rt.Prepare(); err != nil {
		return nil, err
	}
	_ = rp.drv.Connect(context.Background())
	n.host.ports[port] = rp
	s.rts = append(s.rts, rp)
	rp.seen = rp.k.State()
	rp.k.OnTransition(func(tr lease.Transition) {
		s.log(n.host, rp.unit, kState, "runtime %s epoch %d: %s -> %s", rp.id, rp.epoch, tr.From, tr.To)
		rp.seen = tr.To
		s.soon(p, rp.scan)
		rp.step()
	})
	s.log(n.host, rp.unit, kState, "runtime %s started: epoch %d, mode %s, lease %v, state %s", rp.id, rp.epoch, rp.mode, leaseD, rp.seen)
	s.after(p, scanInterval, rp.tick)
	s.soon(p, rp.scan)
	return rp, nil
}

func (rp *runtimeProc) tick() {
	rp.scan()
	rp.s.after(rp.p, scanInterval, rp.tick)
}

func (rp *runtimeProc) scan() { rp.rt.Step(context.Background()) }

// step runs the Keeper's due transitions and schedules the next one.
func (rp *runtimeProc) step() {
	s := rp.s
	s.soon(rp.p, func() {
		wait := rp.k.Step()
		if wait < 0 {
			return
		}
		at := rp.p.clock().trueAfter(s.now, wait)
		if rp.stepAt > s.now && rp.stepAt <= at {
			return
		}
		rp.stepAt = at
		s.at(at, rp.p, rp.step)
	})
}

// serve answers one request on the lease endpoint through the real
// Handler.
func (rp *runtimeProc) serve(method string, body []byte) *http.Response {
	rec := httptest.NewRecorder()
	var r *http.Request
	if body != nil {
		r = httptest.NewRequest(method, leaseapi.Path, bytes.NewReader(body))
	} else {
		r = httptest.NewRequest(method, leaseapi.Path, nil)
	}
	r.Header.Set("Content-Type", "application/json")
	rp.rt.Handler().ServeHTTP(rec, r)
	rp.step()
	return rec.Result()
}

// mayWrite says whether the Keeper, read on its clock now, permits a write
// of some kind (Held, Holding, Autonomous).
func (rp *runtimeProc) mayWrite() bool {
	p, err := rp.k.Acquire(lease.WriteHold)
	if err != nil {
		return false
	}
	p.Release()
	return true
}

// leaseAnswer is what a grantor got back for one grant.
type leaseAnswer struct {
	resp     *http.Response
	err      error
	timedOut bool
	code     int
}

func (a *leaseAnswer) String() string {
	switch {
	case a.resp != nil:
		return fmt.Sprintf("answered %d", a.code)
	case a.timedOut:
		return "no answer in time"
	}
	return a.err.Error()
}

var errRefused = errors.New("dial tcp: connect: connection refused")

func readAll(r io.Reader) ([]byte, error) {
	if r == nil {
		return nil, nil
	}
	return io.ReadAll(r)
}

// postLease carries one grant to the lease endpoint at addr and its answer
// back; done runs on from. Nothing listening answers with a reset.
func (s *Sim) postLease(from *proc, addr string, body []byte, done func(*leaseAnswer)) {
	ip, portS, _ := net.SplitHostPort(addr)
	h := s.hostByIP[ip]
	port64, _ := strconv.ParseInt(portS, 10, 32)
	if h == nil {
		return
	}
	back := func(a *leaseAnswer) {
		s.net.send(h, from.host, controlNet, func() { s.soon(from, func() { done(a) }) })
	}
	s.net.send(from.host, h, controlNet, func() {
		rp := h.ports[int32(port64)]
		if rp == nil || !rp.p.alive || !h.powered {
			if h.powered {
				back(&leaseAnswer{err: errRefused})
			}
			return
		}
		s.soon(rp.p, func() {
			resp := rp.serve(http.MethodPost, body)
			data, _ := io.ReadAll(resp.Body)
			mk := func() *http.Response {
				r := *resp
				r.Body = io.NopCloser(bytes.NewReader(data))
				return &r
			}
			var reply leaseapi.Reply
			_ = json.Unmarshal(data, &reply)
			s.log(h, rp.unit, kNoise, "runtime %s answered a grant: %d, state %s", rp.id, resp.StatusCode, reply.State)
			back(&leaseAnswer{resp: mk(), code: resp.StatusCode})
		})
	})
}

// status reads the runtime's GET /v1/lease through its Handler.
func (rp *runtimeProc) status() (*leaseapi.Status, error) {
	resp := rp.serve(http.MethodGet, nil)
	defer resp.Body.Close()
	var st leaseapi.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, err
	}
	return &st, nil
}
