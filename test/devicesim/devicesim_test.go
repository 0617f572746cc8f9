package devicesim

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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
