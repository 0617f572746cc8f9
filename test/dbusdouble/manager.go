package dbusdouble

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/holdfast-io/holdfast/test/proc"
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

// readDropIns reads the drop-ins' Environment= and ExecCondition= lines
// (a command line split at spaces, a double-quoted word unquoted).
func readDropIns(dir string) (map[string]string, [][]string) {
	env := map[string]string{}
	var conds [][]string
	entries, err := os.ReadDir(dir)
	if err != nil {
		return env, nil
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".conf") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, n := range names {
		f, err := os.Open(filepath.Join(dir, n))
		if err != nil {
			continue
		}
		s := bufio.NewScanner(f)
		for s.Scan() {
			line := strings.TrimSpace(s.Text())
			if c, ok := strings.CutPrefix(line, "ExecCondition="); ok {
				var argv []string
				for _, w := range strings.Fields(c) {
					if uq, err := strconv.Unquote(w); err == nil {
						w = uq
					}
					argv = append(argv, w)
				}
				if len(argv) > 0 {
					conds = append(conds, argv)
				}
				continue
			}
			v, ok := strings.CutPrefix(line, "Environment=")
			if !ok {
				continue
			}
			if uq, err := strconv.Unquote(v); err == nil {
				v = uq
			}
			if k, val, ok := strings.Cut(v, "="); ok {
				env[k] = val
			}
		}
		f.Close()
	}
	return env, conds
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

func unitObjectPath(name string) dbus.ObjectPath {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9' && i > 0)
		if alnum {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "_%02x", c)
		}
	}
	return dbus.ObjectPath(unitPrefix + "/" + b.String())
}

func unitNameFromPath(p dbus.ObjectPath) string {
	s := path.Base(string(p))
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '_' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// managerObject is exported as org.freedesktop.systemd1.Manager.
type managerObject struct{ m *Manager }

type unitFileChange struct {
	Type        string
	Filename    string
	Destination string
}

func (o managerObject) StartUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	o.m.record(Call{Method: "StartUnit", Units: []string{name}})
	u, derr := o.m.lookup(name)
	if derr != nil {
		return "", derr
	}
	o.m.mu.Lock()
	masked := u.maskedRuntime || u.maskedPersist
	o.m.mu.Unlock()
	if masked {
		return "", dbus.NewError("org.freedesktop.systemd1.UnitMasked", []any{fmt.Sprintf("Unit %s is masked.", name)})
	}
	return o.m.newJob(name, func() string { return o.m.start(name) }), nil
}

func (o managerObject) StopUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	o.m.record(Call{Method: "StopUnit", Units: []string{name}})
	if _, derr := o.m.lookup(name); derr != nil {
		return "", derr
	}
	return o.m.newJob(name, func() string { return o.m.stop(name) }), nil
}

func (o managerObject) RestartUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	o.m.record(Call{Method: "RestartUnit", Units: []string{name}})
	u, derr := o.m.lookup(name)
	if derr != nil {
		return "", derr
	}
	o.m.mu.Lock()
	masked := u.maskedRuntime || u.maskedPersist
	o.m.mu.Unlock()
	if masked {
		return "", dbus.NewError("org.freedesktop.systemd1.UnitMasked", []any{fmt.Sprintf("Unit %s is masked.", name)})
	}
	return o.m.newJob(name, func() string {
		o.m.stop(name)
		return o.m.start(name)
	}), nil
}

func (o managerObject) EnableUnitFiles(files []string, runtime, force bool) (bool, []unitFileChange, *dbus.Error) {
	o.m.record(Call{Method: "EnableUnitFiles", Units: files, Runtime: runtime})
	var changes []unitFileChange
	for _, f := range files {
		u, derr := o.m.lookup(filepath.Base(f))
		if derr != nil {
			return false, nil, derr
		}
		o.m.mu.Lock()
		if u.maskedRuntime || u.maskedPersist {
			o.m.mu.Unlock()
			return false, nil, dbus.NewError("org.freedesktop.systemd1.UnitMasked", []any{fmt.Sprintf("Unit file %s is masked.", u.Name)})
		}
		if !u.enabled {
			u.enabled = true
			changes = append(changes, unitFileChange{"symlink", "/etc/systemd/system/multi-user.target.wants/" + u.Name, "/etc/systemd/system/" + u.Name})
		}
		o.m.mu.Unlock()
	}
	return true, changes, nil
}

func (o managerObject) DisableUnitFiles(files []string, runtime bool) ([]unitFileChange, *dbus.Error) {
	o.m.record(Call{Method: "DisableUnitFiles", Units: files, Runtime: runtime})
	var changes []unitFileChange
	for _, f := range files {
		u, derr := o.m.lookup(filepath.Base(f))
		if derr != nil {
			return nil, derr
		}
		o.m.mu.Lock()
		if u.enabled {
			u.enabled = false
			changes = append(changes, unitFileChange{"unlink", "/etc/systemd/system/multi-user.target.wants/" + u.Name, ""})
		}
		o.m.mu.Unlock()
	}
	return changes, nil
}

func (o managerObject) MaskUnitFiles(files []string, runtime, force bool) ([]unitFileChange, *dbus.Error) {
	o.m.record(Call{Method: "MaskUnitFiles", Units: files, Runtime: runtime})
	var changes []unitFileChange
	for _, f := range files {
		u, derr := o.m.lookup(filepath.Base(f))
		if derr != nil {
			return nil, derr
		}
		o.m.mu.Lock()
		dir := "/etc/systemd/system/"
		if runtime {
			dir = "/run/systemd/system/"
			u.maskedRuntime = true
		} else {
			u.maskedPersist = true
		}
		o.m.mu.Unlock()
		changes = append(changes, unitFileChange{"symlink", dir + u.Name, "/dev/null"})
	}
	return changes, nil
}

func (o managerObject) UnmaskUnitFiles(files []string, runtime bool) ([]unitFileChange, *dbus.Error) {
	o.m.record(Call{Method: "UnmaskUnitFiles", Units: files, Runtime: runtime})
	var changes []unitFileChange
	for _, f := range files {
		u, derr := o.m.lookup(filepath.Base(f))
		if derr != nil {
			return nil, derr
		}
		o.m.mu.Lock()
		if runtime && u.maskedRuntime {
			u.maskedRuntime = false
			changes = append(changes, unitFileChange{"unlink", "/run/systemd/system/" + u.Name, ""})
		} else if !runtime && u.maskedPersist {
			u.maskedPersist = false
			changes = append(changes, unitFileChange{"unlink", "/etc/systemd/system/" + u.Name, ""})
		}
		o.m.mu.Unlock()
	}
	return changes, nil
}

func (o managerObject) Reload() *dbus.Error {
	o.m.record(Call{Method: "Reload"})
	o.m.mu.Lock()
	defer o.m.mu.Unlock()
	o.m.reloadLocked()
	return nil
}

func (o managerObject) GetUnit(name string) (dbus.ObjectPath, *dbus.Error) {
	if _, derr := o.m.lookup(name); derr != nil {
		return "", derr
	}
	return unitObjectPath(name), nil
}

func (o managerObject) LoadUnit(name string) (dbus.ObjectPath, *dbus.Error) {
	return unitObjectPath(name), nil
}

// unitProperties serves org.freedesktop.DBus.Properties on every unit path.
type unitProperties struct{ m *Manager }

func (p unitProperties) props(msg dbus.Message) map[string]dbus.Variant {
	objPath, _ := msg.Headers[dbus.FieldPath].Value().(dbus.ObjectPath)
	name := unitNameFromPath(objPath)
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	u, ok := p.m.units[name]
	if !ok {
		// systemd answers for any unit name: one it has no file for is
		// not-found and inactive.
		return map[string]dbus.Variant{
			"Id": dbus.MakeVariant(name), "LoadState": dbus.MakeVariant("not-found"),
			"ActiveState": dbus.MakeVariant("inactive"), "SubState": dbus.MakeVariant("dead"),
			"UnitFileState": dbus.MakeVariant(""),
		}
	}
	load, file := "loaded", "disabled"
	if u.enabled {
		file = "enabled"
	}
	if u.maskedRuntime {
		load, file = "masked", "masked-runtime"
	}
	if u.maskedPersist {
		load, file = "masked", "masked"
	}
	sub := map[string]string{"active": "running", "inactive": "dead", "failed": "failed", "activating": "start", "deactivating": "stop"}[u.active]
	return map[string]dbus.Variant{
		"Id": dbus.MakeVariant(name), "LoadState": dbus.MakeVariant(load),
		"ActiveState": dbus.MakeVariant(u.active), "SubState": dbus.MakeVariant(sub),
		"UnitFileState": dbus.MakeVariant(file),
	}
}

func (p unitProperties) Get(msg dbus.Message, iface, prop string) (dbus.Variant, *dbus.Error) {
	if iface != unitIf {
		return dbus.Variant{}, dbus.NewError("org.freedesktop.DBus.Error.UnknownInterface", []any{iface})
	}
	v, ok := p.props(msg)[prop]
	if !ok {
		return dbus.Variant{}, dbus.NewError("org.freedesktop.DBus.Error.UnknownProperty", []any{prop})
	}
	return v, nil
}

func (p unitProperties) GetAll(msg dbus.Message, iface string) (map[string]dbus.Variant, *dbus.Error) {
	if iface != unitIf && iface != "" {
		return map[string]dbus.Variant{}, nil
	}
	return p.props(msg), nil
}

// ExecProcess is a Process for an exec.Cmd the unit's Start started.
type ExecProcess struct {
	Cmd    *exec.Cmd
	exited chan struct{}
}

// StartExec starts cmd and returns it as a Process.
func StartExec(cmd *exec.Cmd) (*ExecProcess, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &ExecProcess{Cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Stop sends SIGTERM, then SIGKILL after 10s, and waits.
func (p *ExecProcess) Stop() error {
	proc.Stop(p.Cmd.Process, p.exited, 10*time.Second)
	return nil
}

// Exited is closed when the process has ended.
func (p *ExecProcess) Exited() <-chan struct{} { return p.exited }
