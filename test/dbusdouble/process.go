package dbusdouble

import (
	"os/exec"
	"time"

	"github.com/holdfast-io/holdfast/test/proc"
)

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
