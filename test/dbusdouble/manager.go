package dbusdouble

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"
)

const (
	busName     = "org.freedesktop.systemd1"
	managerPath = dbus.ObjectPath("/org/freedesktop/systemd1")
	managerIf   = "org.freedesktop.systemd1.Manager"
	unitPrefix  = "/org/freedesktop/systemd1/unit"
	jobPrefix   = "/org/freedesktop/systemd1/job/"
	unitIf      = "org.freedesktop.systemd1.Unit"
	propsIf     = "org.freedesktop.DBus.Properties"
)

// Process is what a unit's ExecStart started.
type Process interface {
	// Stop ends the process and waits for it.
	Stop() error
	// Exited is closed when the process ends by itself or by Stop.
	Exited() <-chan struct{}
}

// Unit is a unit the double knows (its unit file is "installed").
type Unit struct {
	// Name, e.g. k3s.service.
	Name string
	// ExecCondition is a command run before the start with the unit's
	// environment; exit 1..254 skips the start, as systemd does.
	ExecCondition []string
	// Start is the unit's ExecStart. Nil starts nothing and the unit is
	// active until stopped.
	Start func(ctx context.Context, env map[string]string) (Process, error)
	// RestartAlways restarts the unit after RestartSec when its process
	// exits by itself (Restart=always).
	RestartAlways bool
	RestartSec    time.Duration
	// Enabled is the unit's enablement at start.
	Enabled bool
	// Active starts the unit active (no process).
	Active bool
}

// Config configures a Manager.
type Config struct {
	// DropInDir is the systemd configuration directory whose
	// <unit>.d/*.conf drop-ins are read on Reload (the real one is
	// /etc/systemd/system).
	DropInDir string
	Units     []Unit
	// DropInCommand, when set, is how a drop-in's ExecCondition command
	// line is run: its paths are the host's, e.g. inside a node's mount
	// namespace (nil: as written).
	DropInCommand func(argv ...string) []string
}

// Call is one method call the double received.
type Call struct {
	Method string
	// Units the call named.
	Units []string
	// Runtime is the runtime flag of the unit-file calls.
	Runtime bool
}

func (c Call) String() string {
	s := c.Method + "(" + strings.Join(c.Units, ",")
	if c.Runtime {
		s += ",runtime"
	}
	return s + ")"
}

type unitState struct {
	Unit
	active        string // active, inactive, failed, activating, deactivating
	enabled       bool
	maskedRuntime bool
	maskedPersist bool
	env           map[string]string
	dropInConds   [][]string // ExecCondition lines of the drop-ins
	proc          Process
	stopping      bool
	gen           int
	conditionFail int // how many starts ExecCondition skipped
}

// Manager is the systemd1.Manager double.
type Manager struct {
	conn   *dbus.Conn
	config Config

	mu    sync.Mutex
	units map[string]*unitState
	calls []Call
	jobID uint32
	// jobs runs unit jobs one at a time, like systemd's job queue.
	jobs   chan func()
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// Serve owns org.freedesktop.systemd1 on the bus and serves the Manager.
func Serve(b *Bus, cfg Config) (*Manager, error) {
	conn, err := b.Dial()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{conn: conn, config: cfg, units: map[string]*unitState{}, jobs: make(chan func(), 64),
		ctx: ctx, cancel: cancel, done: make(chan struct{})}
	for _, u := range cfg.Units {
		st := &unitState{Unit: u, active: "inactive", enabled: u.Enabled}
		if u.Active {
			st.active = "active"
		}
		m.units[u.Name] = st
	}
	m.reloadLocked()
	if err := conn.Export(managerObject{m}, managerPath, managerIf); err != nil {
		conn.Close()
		return nil, err
	}
	if err := conn.ExportSubtree(unitProperties{m}, unitPrefix, propsIf); err != nil {
		conn.Close()
		return nil, err
	}
	reply, err := conn.RequestName(busName, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		conn.Close()
		return nil, fmt.Errorf("owning %s on the bus: reply %v: %v", busName, reply, err)
	}
	go func() {
		defer close(m.done)
		for {
			select {
			case <-ctx.Done():
				return
			case job := <-m.jobs:
				job()
			}
		}
	}()
	return m, nil
}

// Close stops every unit process and leaves the bus.
func (m *Manager) Close() {
	m.cancel()
	<-m.done
	m.mu.Lock()
	var procs []Process
	for _, u := range m.units {
		if u.proc != nil {
			u.stopping = true
			procs = append(procs, u.proc)
			u.proc = nil
		}
	}
	m.mu.Unlock()
	for _, p := range procs {
		_ = p.Stop()
	}
	m.conn.Close()
}

// Calls returns the calls received so far, in order.
func (m *Manager) Calls() []Call {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Call(nil), m.calls...)
}

// ResetCalls forgets the calls received so far.
func (m *Manager) ResetCalls() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = nil
}

// ActiveState is a unit's ActiveState.
func (m *Manager) ActiveState(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if u, ok := m.units[name]; ok {
		return u.active
	}
	return "inactive"
}

// Enabled says whether a unit is enabled.
func (m *Manager) Enabled(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.units[name]
	return ok && u.enabled
}

// Masked says whether a unit is masked at runtime and persistently.
func (m *Manager) Masked(name string) (runtime, persistent bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if u, ok := m.units[name]; ok {
		return u.maskedRuntime, u.maskedPersist
	}
	return false, false
}

// ConditionSkips is how many starts of a unit its ExecCondition skipped.
func (m *Manager) ConditionSkips(name string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if u, ok := m.units[name]; ok {
		return u.conditionFail
	}
	return 0
}

// Env is the environment a unit's drop-ins gave it at the last Reload.
func (m *Manager) Env(name string) map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]string{}
	if u, ok := m.units[name]; ok {
		for k, v := range u.env {
			out[k] = v
		}
	}
	return out
}

// StartDirect starts a unit as systemd would on its own (boot, a timer, a
// person's systemctl), outside any D-Bus caller, and waits for the job.
func (m *Manager) StartDirect(name string) (string, error) {
	m.mu.Lock()
	u, ok := m.units[name]
	if !ok {
		m.mu.Unlock()
		return "", fmt.Errorf("unit %s not found", name)
	}
	if u.maskedRuntime || u.maskedPersist {
		m.mu.Unlock()
		return "", fmt.Errorf("unit %s is masked", name)
	}
	m.mu.Unlock()
	res := make(chan string, 1)
	m.jobs <- func() { res <- m.start(name) }
	return <-res, nil
}

func (m *Manager) record(c Call) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, c)
}

// reloadLocked re-reads every unit's drop-ins, as daemon-reload does.
func (m *Manager) reloadLocked() {
	for name, u := range m.units {
		u.env, u.dropInConds = readDropIns(filepath.Join(m.config.DropInDir, name+".d"))
	}
}

// newJob allocates a job path and queues run, which returns the job result;
// JobRemoved is emitted when it finishes.
func (m *Manager) newJob(unit string, run func() string) dbus.ObjectPath {
	m.mu.Lock()
	m.jobID++
	id := m.jobID
	m.mu.Unlock()
	p := dbus.ObjectPath(jobPrefix + strconv.FormatUint(uint64(id), 10))
	m.jobs <- func() {
		result := run()
		_ = m.conn.Emit(managerPath, managerIf+".JobRemoved", id, p, unit, result)
	}
	return p
}

// start runs on the job goroutine.
func (m *Manager) start(name string) string {
	m.mu.Lock()
	u := m.units[name]
	if u.active == "active" {
		m.mu.Unlock()
		return "done"
	}
	env := map[string]string{}
	for k, v := range u.env {
		env[k] = v
	}
	var conds [][]string
	if len(u.ExecCondition) > 0 {
		conds = append(conds, u.ExecCondition)
	}
	for _, c := range u.dropInConds {
		if m.config.DropInCommand != nil {
			c = m.config.DropInCommand(c...)
		}
		conds = append(conds, c)
	}
	startFn := u.Start
	u.active = "activating"
	m.mu.Unlock()

	// Every ExecCondition, the unit's and its drop-ins', must pass.
	for _, cond := range conds {
		cmd := exec.CommandContext(m.ctx, cond[0], cond[1:]...)
		cmd.Env = os.Environ()
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() >= 1 && exit.ExitCode() <= 254 {
			m.mu.Lock()
			u.active = "inactive"
			u.conditionFail++
			m.mu.Unlock()
			fmt.Fprintf(os.Stderr, "dbusdouble: %s: ExecCondition skipped the start: %s", name, out)
			return "done"
		}
		if err != nil {
			m.setActive(u, "failed")
			return "failed"
		}
	}
	var proc Process
	if startFn != nil {
		p, err := startFn(m.ctx, env)
		if err != nil {
			fmt.Fprintf(os.Stderr, "dbusdouble: %s: ExecStart: %v\n", name, err)
			m.setActive(u, "failed")
			return "failed"
		}
		proc = p
	}
	m.mu.Lock()
	u.active = "active"
	u.proc = proc
	u.stopping = false
	u.gen++
	gen := u.gen
	m.mu.Unlock()
	if proc != nil {
		go m.watch(name, u, proc, gen)
	}
	return "done"
}

// watch notices a process that exits by itself and applies Restart=always.
func (m *Manager) watch(name string, u *unitState, proc Process, gen int) {
	select {
	case <-m.ctx.Done():
		return
	case <-proc.Exited():
	}
	m.mu.Lock()
	if u.gen != gen || u.stopping {
		m.mu.Unlock()
		return
	}
	u.active = "failed"
	u.proc = nil
	restart := u.RestartAlways && !u.maskedRuntime && !u.maskedPersist
	delay := u.RestartSec
	m.mu.Unlock()
	if !restart {
		return
	}
	select {
	case <-m.ctx.Done():
		return
	case <-time.After(delay):
	}
	m.mu.Lock()
	again := u.gen == gen && u.active == "failed" && !u.maskedRuntime && !u.maskedPersist
	m.mu.Unlock()
	if again {
		select {
		case m.jobs <- func() { m.start(name) }:
		case <-m.ctx.Done():
		}
	}
}

func (m *Manager) stop(name string) string {
	m.mu.Lock()
	u := m.units[name]
	proc := u.proc
	u.proc = nil
	u.stopping = true
	u.gen++
	if u.active != "inactive" {
		u.active = "deactivating"
	}
	m.mu.Unlock()
	if proc != nil {
		_ = proc.Stop()
	}
	m.setActive(u, "inactive")
	return "done"
}

func (m *Manager) setActive(u *unitState, s string) {
	m.mu.Lock()
	u.active = s
	m.mu.Unlock()
}

func (m *Manager) lookup(name string) (*unitState, *dbus.Error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.units[name]
	if !ok {
		return nil, dbus.NewError("org.freedesktop.systemd1.NoSuchUnit", []any{fmt.Sprintf("Unit %s not found.", name)})
	}
	return u, nil
}
