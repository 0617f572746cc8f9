package main_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	mb "github.com/simonvetter/modbus"

	"github.com/holdfast-io/holdfast/test/devicesim"
)

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// The simulator as a process: a Modbus client's writes, one of them at a
// stale epoch, are in the log served over HTTP and in the log file.
func TestTheDeviceSimulatorProcessServesItsWriteLog(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "device-simulator")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ports := freePorts(t, 2)
	logFile := filepath.Join(dir, "writes.jsonl")
	cmd := exec.Command(bin, "--listen", fmt.Sprintf("127.0.0.1:%d", ports[0]), "--http", fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"--write-log", logFile)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	deadline := time.Now().Add(10 * time.Second)
	var c *mb.ModbusClient
	for {
		var err error
		c, err = mb.NewClient(&mb.ClientConfiguration{URL: fmt.Sprintf("tcp://127.0.0.1:%d", ports[0]), Timeout: time.Second})
		if err == nil {
			if err = c.Open(); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the simulator never listened: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer c.Close()
	other, _ := mb.NewClient(&mb.ClientConfiguration{URL: fmt.Sprintf("tcp://127.0.0.1:%d", ports[0]), Timeout: time.Second})
	if err := other.Open(); err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.WriteRegisters(devicesim.DefaultEpochRegister, []uint16{0, 0, 0, 1}))
	must(c.WriteRegister(10, 11))
	must(other.WriteRegisters(devicesim.DefaultEpochRegister, []uint16{0, 0, 0, 2}))
	must(other.WriteRegister(10, 22))
	if err := c.WriteRegister(10, 33); err != mb.ErrServerDeviceBusy {
		t.Fatalf("a stale write = %v, want exception 0x06", err)
	}
	log, err := devicesim.FetchWrites(http.DefaultClient, base)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 3 || log[0].Epoch != 1 || log[1].Epoch != 2 || log[2].Epoch != 1 || log[2].Accepted {
		t.Fatalf("GET /writes = %+v", log)
	}
	if err := devicesim.CheckOneWriter(log); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		lines++
	}
	if lines != 3 {
		t.Fatalf("the log file has %d lines, want 3", lines)
	}
}
