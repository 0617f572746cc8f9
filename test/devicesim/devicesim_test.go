package devicesim

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	mb "github.com/simonvetter/modbus"
)

func client(t *testing.T, addr string) *mb.ModbusClient {
	t.Helper()
	c, err := mb.NewClient(&mb.ClientConfiguration{URL: "tcp://" + addr, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The owner-epoch block refuses a writer behind the highest epoch, and the
// log, in memory, over HTTP and in the file, shows every attempt.
func TestOwnerEpochRefusesAStaleWriterAndTheLogShowsIt(t *testing.T) {
	file := filepath.Join(t.TempDir(), "writes.jsonl")
	sim, err := Start(Config{Address: "127.0.0.1:0", LogFile: file})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	a, b, legacy := client(t, sim.Addr()), client(t, sim.Addr()), client(t, sim.Addr())
	if err := legacy.WriteRegister(5, 1); err != nil {
		t.Fatalf("before any declaration a write at epoch 0 is accepted: %v", err)
	}
	if err := a.WriteRegisters(DefaultEpochRegister, []uint16{0, 0, 0, 4}); err != nil {
		t.Fatal(err)
	}
	if err := a.WriteRegister(5, 2); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteRegisters(DefaultEpochRegister, []uint16{0, 0, 0, 3}); err != mb.ErrServerDeviceBusy {
		t.Fatalf("a declaration behind the owner epoch = %v, want exception 0x06", err)
	}
	if err := b.WriteRegisters(DefaultEpochRegister, []uint16{0, 0, 0, 5}); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteRegister(5, 3); err != nil {
		t.Fatal(err)
	}
	if err := a.WriteRegister(5, 9); err != mb.ErrServerDeviceBusy {
		t.Fatalf("a write at epoch 4 after epoch 5 = %v, want exception 0x06", err)
	}
	if err := legacy.WriteRegister(5, 9); err != mb.ErrServerDeviceBusy {
		t.Fatalf("an undeclared write after a declaration = %v, want exception 0x06", err)
	}
	if err := a.WriteRegisters(DefaultEpochRegister, []uint16{0, 5}); err != mb.ErrIllegalDataValue {
		t.Fatalf("a partial declaration = %v, want exception 0x03", err)
	}
	if got := sim.Registers(5, 1)[0]; got != 3 || sim.HighestEpoch() != 5 {
		t.Fatalf("register 5 = %d, owner epoch %d; want 3 and 5", got, sim.HighestEpoch())
	}
	log := sim.Writes()
	if err := CheckOneWriter(log); err != nil {
		t.Fatalf("the device's own log shows overlap: %v", err)
	}
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()
	fetched, err := FetchWrites(http.DefaultClient, srv.URL)
	if err != nil || len(fetched) != len(log) {
		t.Fatalf("GET /writes = %d entries, %v; want %d", len(fetched), err, len(log))
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines int
	for sc := bufio.NewScanner(f); sc.Scan(); lines++ {
		var w Write
		if err := json.Unmarshal(sc.Bytes(), &w); err != nil {
			t.Fatal(err)
		}
	}
	if lines != len(log) {
		t.Fatalf("the log file has %d lines, the log %d entries", lines, len(log))
	}
	resp, _ := http.Get(srv.URL + "/registers?addr=5&count=1")
	var regs []uint16
	_ = json.NewDecoder(resp.Body).Decode(&regs)
	resp.Body.Close()
	if len(regs) != 1 || regs[0] != 3 {
		t.Fatalf("GET /registers = %v", regs)
	}
}

func TestCheckOneWriterFindsAnInterleaving(t *testing.T) {
	now := time.Now()
	log := []Write{
		{Time: now, Epoch: 1, Register: 1, Accepted: true},
		{Time: now.Add(time.Second), Epoch: 2, Register: 1, Accepted: true},
		{Time: now.Add(2 * time.Second), Epoch: 1, Register: 1, Accepted: false},
	}
	if err := CheckOneWriter(log); err != nil {
		t.Fatalf("a refused stale write is not an overlap: %v", err)
	}
	log[2].Accepted = true
	if err := CheckOneWriter(log); err == nil || !strings.Contains(err.Error(), "epoch 1 wrote register 1") {
		t.Fatalf("CheckOneWriter = %v, want the interleaving named", err)
	}
}

// writeFrom writes value to register over Modbus TCP (function 6) from a
// connection bound to the loopback address local, so the device sees a
// peer of its own.
func writeFrom(t *testing.T, local, device string, register, value uint16) {
	t.Helper()
	c := dialFrom(t, local, device)
	defer c.conn.Close()
	c.write(register, value)
}

// modbusConn is one TCP connection to a device from a chosen local
// address, writing raw Modbus frames, so the test knows the connection's
// own address as the device sees it.
type modbusConn struct {
	t    *testing.T
	conn net.Conn
	txn  uint16
}

func dialFrom(t *testing.T, local, device string) *modbusConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 2 * time.Second}
	conn, err := d.Dial("tcp", device)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &modbusConn{t: t, conn: conn}
}

// peer is the connection as the device logs it.
func (c *modbusConn) peer() string { return c.conn.LocalAddr().String() }

// write sends function 6 (one register) and waits for its answer.
func (c *modbusConn) write(register, value uint16) {
	c.t.Helper()
	c.txn++
	// MBAP header (transaction, protocol 0, 6 bytes follow, unit 1), then
	// function 6, register, value.
	req := []byte{byte(c.txn >> 8), byte(c.txn), 0, 0, 0, 6, 1, 6, byte(register >> 8), byte(register), byte(value >> 8), byte(value)}
	if _, err := c.conn.Write(req); err != nil {
		c.t.Fatal(err)
	}
	_ = c.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	resp := make([]byte, len(req))
	if _, err := io.ReadFull(c.conn, resp); err != nil {
		c.t.Fatal(err)
	}
	if resp[7] != 6 {
		c.t.Fatalf("write of register %d on %s answered function %#x (exception), want 6", register, c.peer(), resp[7])
	}
}

// Two runtimes on one host reach the device from the same address; a
// Plain device still accepts every write, and its log, read by connection,
// tells them apart: the connection each runtime process was seen holding
// names its epoch, one after the other passes, and a write of the first on
// its connection after the second began is two writers, also when no
// process was seen holding either connection.
func TestTwoRuntimesOnOneHostAreTwoWriters(t *testing.T) {
	sim, err := Start(Config{Address: "127.0.0.1:0", Mode: Plain})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	const host = "127.0.0.11"
	a, b := dialFrom(t, host, sim.Addr()), dialFrom(t, host, sim.Addr())
	writers := []Writer{{Name: "epoch 1 on edge-a", Host: host, Epoch: 1}, {Name: "epoch 2 on edge-a", Host: host, Epoch: 2}}
	conns := Conns{a.peer(): 1, b.peer(): 2}
	a.write(100, 1)
	a.write(100, 2)
	b.write(100, 3)
	b.write(100, 4)
	turns, err := Turns(sim.Writes(), writers, conns)
	if err != nil {
		t.Fatalf("Turns on one runtime after the other: %v", err)
	}
	first, ok1 := Of(turns, 1)
	second, ok2 := Of(turns, 2)
	if !ok1 || !ok2 || first.Accepted != 2 || second.Accepted != 2 || first.Peer != a.peer() || second.Peer != b.peer() ||
		!second.First.After(first.Last) {
		t.Fatalf("turns %+v: want epoch 1's two writes on %s, then epoch 2's two on %s", turns, a.peer(), b.peer())
	}
	a.write(100, 5)
	log := sim.Writes()
	if got := sim.Registers(100, 1)[0]; got != 5 || len(log) != 5 || slices.ContainsFunc(log, func(w Write) bool { return !w.Accepted }) {
		t.Fatalf("register 100 = %d, log %+v: a Plain device accepts every write", got, log)
	}
	if _, err := Turns(log, writers, conns); err == nil || !strings.Contains(err.Error(), "epoch 1 on edge-a wrote register 100") ||
		!strings.Contains(err.Error(), "after epoch 2 on edge-a had written") {
		t.Fatalf("Turns on epoch 1's write after epoch 2's = %v, want it named", err)
	}
	for name, judge := range map[string]func() error{
		"no process seen":  func() error { _, err := Turns(log, writers, nil); return err },
		"no writers known": func() error { return CheckOneWriter(log) },
	} {
		if err := judge(); err == nil || !strings.Contains(err.Error(), "on connection "+a.peer()) || !strings.Contains(err.Error(), "two connections wrote in turn") {
			t.Errorf("%s: the interleaved connections = %v, want them named", name, err)
		}
	}
}

// A Plain device, as most plant devices are, accepts every write, the
// owner-epoch block's registers included, and refuses none; its log names
// each write's peer and true time, from which Turns tells the writers
// apart, and a stale writer is seen by its address alone.
func TestPlainModeAcceptsEveryWriteAndLogsItsPeer(t *testing.T) {
	sim, err := Start(Config{Address: "127.0.0.1:0", Mode: Plain})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	before := time.Now()
	writeFrom(t, "127.0.0.11", sim.Addr(), 100, 1)
	c := client(t, sim.Addr())
	if err := c.WriteRegisters(DefaultEpochRegister, []uint16{0, 0, 0, 7}); err != nil {
		t.Fatalf("a Plain device refused a write to the owner-epoch registers: %v", err)
	}
	writeFrom(t, "127.0.0.12", sim.Addr(), 100, 2)
	writeFrom(t, "127.0.0.11", sim.Addr(), 100, 3)
	if got := sim.Registers(100, 1)[0]; got != 3 || sim.HighestEpoch() != 0 {
		t.Fatalf("register 100 = %d, owner epoch %d; want 3 (every write landed) and 0", got, sim.HighestEpoch())
	}
	log := sim.Writes()
	if len(log) != 7 {
		t.Fatalf("log %+v, want 7 entries (one per register)", log)
	}
	for _, w := range log {
		if !w.Accepted || w.Epoch != 0 || w.Peer == "" || w.Time.Before(before) || w.Time.After(time.Now()) {
			t.Fatalf("log entry %+v: want accepted, epoch 0, its peer and the true time", w)
		}
	}
	a := Writer{Name: "epoch 1 on a", Host: "127.0.0.11", Epoch: 1}
	b := Writer{Name: "epoch 2 on b", Host: "127.0.0.12", Epoch: 2}
	plain := []Write{log[0], log[5], log[6]} // without the declaration client's
	if _, err := Turns(plain, []Writer{a, b}, nil); err == nil || !strings.Contains(err.Error(), "epoch 1 on a wrote register 100") {
		t.Fatalf("Turns on a stale write after the next writer's = %v, want it named", err)
	}
	if _, err := Turns(plain[:2], []Writer{a, b}, nil); err != nil {
		t.Fatalf("Turns on one writer after the other: %v", err)
	}
}
