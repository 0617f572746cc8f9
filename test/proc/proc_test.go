package proc

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func start(t *testing.T, script string) (*exec.Cmd, chan struct{}) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	return cmd, exited
}

func TestStopEndsAProcessThatHeedsSIGTERM(t *testing.T) {
	cmd, exited := start(t, "exec sleep 60")
	if !Stop(cmd.Process, exited, 30*time.Second) {
		t.Fatal("sleep did not end on SIGTERM")
	}
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signal() != syscall.SIGTERM {
		t.Fatalf("ended by %v, want SIGTERM", ws.Signal())
	}
}

func TestStopKillsAProcessThatIgnoresSIGTERM(t *testing.T) {
	// The shell ignores SIGTERM and tells us once it does.
	cmd := exec.Command("sh", "-c", `trap "" TERM; echo ready; while :; do sleep 0.05; done`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := out.Read(buf); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	if Stop(cmd.Process, exited, 200*time.Millisecond) {
		t.Fatal("Stop reported a clean end for a process that ignores SIGTERM")
	}
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signal() != syscall.SIGKILL {
		t.Fatalf("ended by %v, want SIGKILL", ws.Signal())
	}
}

func TestStopContinuesAStoppedProcess(t *testing.T) {
	cmd, exited := start(t, "exec sleep 60")
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if !Stop(cmd.Process, exited, 30*time.Second) {
		t.Fatal("a SIGSTOPped process did not end on SIGTERM")
	}
}
