package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	childproc "github.com/holdfast-io/holdfast/test/proc"
)

// proc is one process the cluster started. It is stopped by its own PID
// and nothing else: never by name, never a process group.
type proc struct {
	Name string
	// Log holds the process's standard output and error.
	Log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// startProc starts argv with its output appended to logPath.
func startProc(name, logPath string, env []string, argv ...string) (*proc, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, so a terminal's Ctrl-C reaches the demo
	// process only and the demo stops everything in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return p, nil
}

// PID is the process's ID.
func (p *proc) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the process.
func (p *proc) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return errors.New(p.Name + " has exited")
	}
	return p.cmd.Process.Signal(sig)
}

// Stop sends SIGTERM, waits up to grace, then SIGKILL; a stopped
// (SIGSTOPped) process is continued first so it can act on the SIGTERM.
func (p *proc) Stop(grace time.Duration) {
	if p == nil || p.Exited() {
		return
	}
	childproc.Stop(p.cmd.Process, p.done, grace)
}

// Wait waits for the process to end.
func (p *proc) Wait() error { <-p.done; return p.err }

// tail is the last n lines of the process's log, for error messages.
func (p *proc) tail(n int) string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// run runs a short command and returns its error with its output.
func run(argv ...string) error {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// killPID stops a process the cluster started indirectly (a containerd
// shim, a container) by its PID: SIGKILL, then wait for it to go.
func killPID(pid int) {
	// This process dials into a cluster's namespaces from a thread it
	// moves there for the dial, so it can show up in "ip netns pids".
	if pid == os.Getpid() {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 100; i++ {
		if err := syscall.Kill(pid, 0); err != nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
