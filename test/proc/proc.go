// Package proc ends the child processes tests start: the one stop-then-kill
// every test and harness uses, so each gives a process the same chance to
// shut down cleanly before it is killed.
package proc

import (
	"os"
	"syscall"
	"time"
)

// Stop sends p SIGTERM (and SIGCONT, so a SIGSTOPped process can act on
// it) and waits up to grace for exited to close; past grace it kills p and
// waits. It reports whether p ended on its own.
func Stop(p *os.Process, exited <-chan struct{}, grace time.Duration) bool {
	select {
	case <-exited:
		return true
	default:
	}
	_ = p.Signal(syscall.SIGTERM)
	_ = p.Signal(syscall.SIGCONT)
	select {
	case <-exited:
		return true
	case <-time.After(grace):
	}
	_ = p.Kill()
	<-exited
	return false
}
