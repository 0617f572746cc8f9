package main_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"
	mb "github.com/simonvetter/modbus"

	"github.com/holdfast-io/holdfast/test/devicesim"
	"github.com/holdfast-io/holdfast/test/poll"
	"github.com/holdfast-io/holdfast/test/ports"
	"github.com/holdfast-io/holdfast/test/proc"
)

// simProcess is a running device-simulator process.
type simProcess struct {
	modbus, http, logFile string
}

// startSim builds and starts the simulator with args and waits until a
// Modbus client connects.
func startSim(t *testing.T, args ...string) *simProcess {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "device-simulator")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ps := ports.Free(t, 2)
	p := &simProcess{modbus: fmt.Sprintf("127.0.0.1:%d", ps[0]), http: fmt.Sprintf("http://127.0.0.1:%d", ps[1]),
		logFile: filepath.Join(dir, "writes.jsonl")}
	cmd := exec.Command(bin, append([]string{"--listen", p.modbus, "--http", strings.TrimPrefix(p.http, "http://"),
		"--write-log", p.logFile}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { proc.Stop(cmd.Process, exited, 10*time.Second) })
	poll.Until(t, 10*time.Second, "the simulator to listen", func() (bool, string) {
		c, err := p.client()
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		return true, ""
	})
	return p
}

func (p *simProcess) client() (*mb.ModbusClient, error) {
	c, err := mb.NewClient(&mb.ClientConfiguration{URL: "tcp://" + p.modbus, Timeout: time.Second})
	if err != nil {
		return nil, err
	}
	return c, c.Open()
}

// clients opens n Modbus connections to the simulator.
func (p *simProcess) clients(t *testing.T, n int) []*mb.ModbusClient {
	t.Helper()
	var out []*mb.ModbusClient
	for range n {
		c, err := p.client()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		out = append(out, c)
	}
	return out
}

// lines counts the lines of the simulator's log file.
func (p *simProcess) lines(t *testing.T) int {
	t.Helper()
	f, err := os.Open(p.logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		lines++
	}
	return lines
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The simulator as a process: a Modbus client's writes, one of them at a
// stale epoch, are in the log served over HTTP and in the log file.
func TestTheDeviceSimulatorProcessServesItsWriteLog(t *testing.T) {
	p := startSim(t)
	cs := p.clients(t, 2)
	c, other := cs[0], cs[1]
	must(t, c.WriteRegisters(devicesim.DefaultEpochRegister, []uint16{0, 0, 0, 1}))
	must(t, c.WriteRegister(10, 11))
	must(t, other.WriteRegisters(devicesim.DefaultEpochRegister, []uint16{0, 0, 0, 2}))
	must(t, other.WriteRegister(10, 22))
	if err := c.WriteRegister(10, 33); err != mb.ErrServerDeviceBusy {
		t.Fatalf("a stale write = %v, want exception 0x06", err)
	}
	log, err := devicesim.FetchWrites(http.DefaultClient, p.http)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 3 || log[0].Epoch != 1 || log[1].Epoch != 2 || log[2].Epoch != 1 || log[2].Accepted {
		t.Fatalf("GET /writes = %+v", log)
	}
	if err := devicesim.CheckOneWriter(log); err != nil {
		t.Fatal(err)
	}
	if n := p.lines(t); n != 3 {
		t.Fatalf("the log file has %d lines, want 3", n)
	}
}

// --mode plain: the same sequence is accepted whole, the owner-epoch
// registers being ordinary ones, and logged at epoch 0.
func TestTheDeviceSimulatorProcessInPlainModeAcceptsEveryWrite(t *testing.T) {
	p := startSim(t, "--mode", "plain")
	cs := p.clients(t, 2)
	c, other := cs[0], cs[1]
	must(t, c.WriteRegisters(devicesim.DefaultEpochRegister, []uint16{0, 0, 0, 2}))
	must(t, other.WriteRegisters(devicesim.DefaultEpochRegister, []uint16{0, 0, 0, 1}))
	must(t, c.WriteRegister(10, 33))
	log, err := devicesim.FetchWrites(http.DefaultClient, p.http)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 9 {
		t.Fatalf("GET /writes = %+v, want 9 entries", log)
	}
	for _, w := range log {
		if !w.Accepted || w.Epoch != 0 || w.Peer == "" {
			t.Fatalf("GET /writes: %+v, want every write accepted at epoch 0 with its peer", w)
		}
	}
	if n := p.lines(t); n != 9 {
		t.Fatalf("the log file has %d lines, want 9", n)
	}
}

// A mode the simulator does not know exits 2 naming the flag.
func TestTheDeviceSimulatorRefusesAnUnknownMode(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "device-simulator")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--mode", "trusting").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), `--mode: mode "trusting": must be owner-epoch or plain`) {
		t.Fatalf("--mode trusting: %v\n%s", err, out)
	}
}

// --protocol opcua: the same device over OPC UA; a write to a register's
// variable is in the write log served over HTTP with its node and peer.
func TestTheDeviceSimulatorProcessServesOPCUA(t *testing.T) {
	p := startSim(t, "--protocol", "opcua")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := opcua.NewClient("opc.tcp://"+p.modbus, opcua.SecurityMode(ua.MessageSecurityModeNone), opcua.AutoReconnect(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	write := func(node string, v any) ua.StatusCode {
		resp, err := c.Write(ctx, &ua.WriteRequest{NodesToWrite: []*ua.WriteValue{{NodeID: ua.MustParseNodeID(node),
			AttributeID: ua.AttributeIDValue, Value: &ua.DataValue{EncodingMask: ua.DataValueValue, Value: ua.MustVariant(v)}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Results[0]
	}
	if st := write(devicesim.OPCUAEpochNode, int64(6)); st != ua.StatusOK {
		t.Fatalf("declare epoch 6: %v", st)
	}
	if st := write(devicesim.OPCUANode(100), uint16(11)); st != ua.StatusOK {
		t.Fatalf("write register 100: %v", st)
	}
	log, err := devicesim.FetchWrites(http.DefaultClient, p.http)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 1 || log[0].Epoch != 6 || log[0].Register != 100 || log[0].Value != 11 || !log[0].Accepted ||
		log[0].Node != devicesim.OPCUANode(100) || !strings.HasPrefix(log[0].Peer, "127.0.0.1:") {
		t.Fatalf("write log over HTTP: %+v", log)
	}
}

// A protocol the simulator does not speak exits 2 naming the flag.
func TestTheDeviceSimulatorRefusesAnUnknownProtocol(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "device-simulator")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--protocol", "profinet").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), `--protocol: protocol "profinet": must be modbus or opcua`) {
		t.Fatalf("--protocol profinet: %v\n%s", err, out)
	}
}
