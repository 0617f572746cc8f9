// Package devicesim is a Modbus TCP or OPC UA field device for tests,
// drills and the demo: 65536 holding registers and a write log (true time, peer host:port
// naming the connection, epoch, register, value, accepted) from which a
// test proves that no two writers overlapped (writers.go). It runs in one
// of two modes:
//   - OwnerEpoch: an owner-epoch block refuses writers behind the highest
//     epoch it has seen, as a device that can check the writer's epoch;
//   - Plain: every write is accepted, as by most devices in a plant; only
//     the log, by true time and connection (the peer host:port), tells the
//     writers apart.
//
// The owner-epoch block is four holding registers at EpochRegister holding
// a big-endian uint64. A client declares its epoch by writing all four in
// one request; a declaration lower than the highest epoch seen is refused.
// Every other write is refused (exception 0x06, server device busy) when
// its connection's declared epoch is behind the highest; a connection that
// declared nothing writes at epoch 0, which is behind once anyone declared.
//
// Over OPC UA (Config.Protocol OPCUA, opcua.go) the registers are variables
// and the owner-epoch block is one Int64 node, with the same rules.
//
// Run it in-process with Start, or as a process with cmd/device-simulator,
// whose HTTP endpoint serves the same log (Handler).
package devicesim

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"sort"
	"sync"
	"time"

	mb "github.com/simonvetter/modbus"
)

// DefaultEpochRegister is where the owner-epoch block starts.
const DefaultEpochRegister = 9000

// Mode is how a device treats writes.
type Mode string

const (
	// OwnerEpoch refuses writers behind the highest epoch declared.
	OwnerEpoch Mode = "owner-epoch"
	// Plain accepts every write: no register is special, every write is
	// logged at epoch 0.
	Plain Mode = "plain"
)

// Modes are both modes, for drills that run in each.
var Modes = []Mode{OwnerEpoch, Plain}

// ParseMode reads a mode by name.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case OwnerEpoch, Plain:
		return m, nil
	}
	return "", fmt.Errorf("mode %q: must be %s or %s", s, OwnerEpoch, Plain)
}

// Protocol is what a device speaks.
type Protocol string

const (
	// Modbus is Modbus TCP (the default).
	Modbus Protocol = "modbus"
	// OPCUA is OPC UA over opc.tcp, security None (opcua.go).
	OPCUA Protocol = "opcua"
)

// ParseProtocol reads a protocol by name.
func ParseProtocol(s string) (Protocol, error) {
	switch p := Protocol(s); p {
	case Modbus, OPCUA:
		return p, nil
	}
	return "", fmt.Errorf("protocol %q: must be %s or %s", s, Modbus, OPCUA)
}

// Config of a simulated device.
type Config struct {
	// Address to listen on, host:port; port 0 picks a free one.
	Address string
	// Protocol is Modbus (the default) or OPCUA.
	Protocol Protocol
	// Mode is OwnerEpoch (the default) or Plain.
	Mode Mode
	// EpochRegister is the first of the four owner-epoch registers
	// (OwnerEpoch only).
	EpochRegister uint16
	// LogFile, when set, receives every write as a JSON line as it happens.
	LogFile string
}

// Write is one write request as the device saw it.
type Write struct {
	Time time.Time `json:"time"`
	// Peer is the client's host:port: it names the write's TCP connection.
	Peer     string `json:"peer"`
	Epoch    int64  `json:"epoch"`
	Register uint16 `json:"register"`
	// Node is the OPC UA node written (OPC UA devices only).
	Node     string `json:"node,omitempty"`
	Value    uint16 `json:"value"`
	Accepted bool   `json:"accepted"`
	Reason   string `json:"reason,omitempty"`
}

// Sim is a running simulated device.
type Sim struct {
	cfg  Config
	stop func() error // stops the server
	addr string

	mu           sync.Mutex
	regs         [65536]uint16
	highest      int64
	connEpoch    map[string]int64
	log          []Write
	logFile      io.WriteCloser
	readsFail    bool
	declared     int
	readsServed  int
	readsRefused int
}

// Start listens and serves.
func Start(cfg Config) (*Sim, error) {
	if cfg.EpochRegister == 0 {
		cfg.EpochRegister = DefaultEpochRegister
	}
	if cfg.Mode == "" {
		cfg.Mode = OwnerEpoch
	}
	if _, err := ParseMode(string(cfg.Mode)); err != nil {
		return nil, err
	}
	if cfg.Protocol == "" {
		cfg.Protocol = Modbus
	}
	if _, err := ParseProtocol(string(cfg.Protocol)); err != nil {
		return nil, err
	}
	if cfg.EpochRegister > 65532 {
		return nil, fmt.Errorf("epochRegister: %d: must be at most 65532", cfg.EpochRegister)
	}
	s := &Sim{cfg: cfg, connEpoch: map[string]int64{}}
	if cfg.LogFile != "" {
		f, err := os.OpenFile(cfg.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("logFile: %w", err)
		}
		s.logFile = f
	}
	var err error
	// The libraries bind their own listeners and do not report the port,
	// so port 0 is resolved here first; on loopback a lost race is retried.
	for attempt := 0; attempt < 5; attempt++ {
		addr := cfg.Address
		if addr, err = resolvePort(addr); err != nil {
			break
		}
		if cfg.Protocol == OPCUA {
			err = s.startOPCUA(addr)
		} else {
			err = s.startModbus(addr)
		}
		if err == nil {
			s.addr = addr
			return s, nil
		}
	}
	if s.logFile != nil {
		s.logFile.Close()
	}
	return nil, fmt.Errorf("device simulator: listen %s: %w", cfg.Address, err)
}

func (s *Sim) startModbus(addr string) error {
	srv, err := mb.NewServer(&mb.ServerConfiguration{URL: "tcp://" + addr, Timeout: 10 * time.Minute, MaxClients: 64,
		Logger: quietLogger()}, s)
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	s.stop = srv.Stop
	return nil
}

func resolvePort(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if port != "0" {
		return addr, nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Addr is the device's host:port.
func (s *Sim) Addr() string { return s.addr }

// Mode is the device's mode.
func (s *Sim) Mode() Mode { return s.cfg.Mode }

// Protocol is what the device speaks.
func (s *Sim) Protocol() Protocol { return s.cfg.Protocol }

// Close stops the device and drops every connection.
func (s *Sim) Close() error {
	err := s.stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logFile != nil {
		s.logFile.Close()
		s.logFile = nil
	}
	return err
}

// Writes is a copy of the write log, in the order the device saw them.
func (s *Sim) Writes() []Write {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Write(nil), s.log...)
}

// Registers reads count registers from addr.
func (s *Sim) Registers(addr, count uint16) []uint16 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]uint16(nil), s.regs[addr:int(addr)+int(count)]...)
}

// SetRegister sets a register as the plant would (not logged).
func (s *Sim) SetRegister(addr, value uint16) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.regs[addr] = value
}

// HighestEpoch is the highest epoch the device has seen declared.
func (s *Sim) HighestEpoch() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.highest
}

// SetReadsFailing makes every read answer exception 0x04 (server device
// failure): the device cannot tell its operating point.
func (s *Sim) SetReadsFailing(fail bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readsFail = fail
}

// ReadsServed counts reads the device answered.
func (s *Sim) ReadsServed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readsServed
}

// ReadsRefused counts reads the device failed (SetReadsFailing), so a test
// sees that a scan asked.
func (s *Sim) ReadsRefused() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readsRefused
}

// HandleHoldingRegisters serves reads and writes of holding registers.
func (s *Sim) HandleHoldingRegisters(req *mb.HoldingRegistersRequest) ([]uint16, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	end := int(req.Addr) + int(req.Quantity)
	if !req.IsWrite {
		if s.readsFail {
			s.readsRefused++
			return nil, mb.ErrServerDeviceFailure
		}
		s.readsServed++
		return append([]uint16(nil), s.regs[req.Addr:end]...), nil
	}
	now := time.Now()
	if s.cfg.Mode == Plain {
		for i, v := range req.Args {
			s.record(Write{Time: now, Peer: req.ClientAddr, Register: req.Addr + uint16(i), Value: v, Accepted: true})
		}
		copy(s.regs[req.Addr:end], req.Args)
		return nil, nil
	}
	er := int(s.cfg.EpochRegister)
	if int(req.Addr) < er+4 && end > er {
		// a declaration: exactly the whole block, never lower than the highest
		if int(req.Addr) != er || req.Quantity != 4 {
			return nil, mb.ErrIllegalDataValue
		}
		e := decodeEpoch(req.Args)
		if e < s.highest {
			s.record(Write{Time: now, Peer: req.ClientAddr, Epoch: e, Register: req.Addr, Accepted: false,
				Reason: fmt.Sprintf("epoch declaration %d behind owner epoch %d", e, s.highest)})
			return nil, mb.ErrServerDeviceBusy
		}
		s.highest = e
		s.connEpoch[req.ClientAddr] = e
		s.declared++
		copy(s.regs[er:er+4], req.Args)
		return nil, nil
	}
	epoch := s.connEpoch[req.ClientAddr]
	accepted := epoch >= s.highest
	reason := ""
	if !accepted {
		reason = fmt.Sprintf("epoch %d behind owner epoch %d", epoch, s.highest)
	}
	for i, v := range req.Args {
		s.record(Write{Time: now, Peer: req.ClientAddr, Epoch: epoch, Register: req.Addr + uint16(i), Value: v,
			Accepted: accepted, Reason: reason})
	}
	if !accepted {
		return nil, mb.ErrServerDeviceBusy
	}
	copy(s.regs[req.Addr:end], req.Args)
	return nil, nil
}

func (s *Sim) record(w Write) {
	s.log = append(s.log, w)
	if s.logFile != nil {
		b, _ := json.Marshal(w)
		_, _ = s.logFile.Write(append(b, '\n'))
	}
}

// HandleCoils refuses: the device has holding registers only.
func (s *Sim) HandleCoils(*mb.CoilsRequest) ([]bool, error) { return nil, mb.ErrIllegalFunction }

// HandleDiscreteInputs refuses: the device has holding registers only.
func (s *Sim) HandleDiscreteInputs(*mb.DiscreteInputsRequest) ([]bool, error) {
	return nil, mb.ErrIllegalFunction
}

// HandleInputRegisters refuses: the device has holding registers only.
func (s *Sim) HandleInputRegisters(*mb.InputRegistersRequest) ([]uint16, error) {
	return nil, mb.ErrIllegalFunction
}

func decodeEpoch(w []uint16) int64 {
	return int64(uint64(w[0])<<48 | uint64(w[1])<<32 | uint64(w[2])<<16 | uint64(w[3]))
}

// LastAttempt is the time of the last write attempt (accepted or refused)
// at epoch, and whether there was one.
func LastAttempt(log []Write, epoch int64) (time.Time, bool) {
	var at time.Time
	found := false
	for _, w := range log {
		if w.Epoch == epoch && (!found || w.Time.After(at)) {
			at, found = w.Time, true
		}
	}
	return at, found
}

// ByEpoch groups accepted writes by epoch, each in log order.
func ByEpoch(log []Write) map[int64][]Write {
	out := map[int64][]Write{}
	for _, w := range log {
		if w.Accepted {
			out[w.Epoch] = append(out[w.Epoch], w)
		}
	}
	return out
}

// Epochs lists the epochs that wrote, ascending.
func Epochs(log []Write) []int64 {
	seen := map[int64]bool{}
	var out []int64
	for _, w := range log {
		if !seen[w.Epoch] {
			seen[w.Epoch] = true
			out = append(out, w.Epoch)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func quietLogger() *log.Logger { return log.New(io.Discard, "", 0) }
