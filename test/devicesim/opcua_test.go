package devicesim

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"
)

// opcuaClient is one session on its own connection to the OPC UA device.
type opcuaClient struct {
	t *testing.T
	c *opcua.Client
}

func dialOPCUA(t *testing.T, addr string) *opcuaClient {
	t.Helper()
	c, err := opcua.NewClient("opc.tcp://"+addr, opcua.SecurityMode(ua.MessageSecurityModeNone),
		opcua.AutoReconnect(false), opcua.RequestTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return &opcuaClient{t: t, c: c}
}

// write writes v to node and returns the node's status.
func (o *opcuaClient) write(node string, v any) ua.StatusCode {
	o.t.Helper()
	resp, err := o.c.Write(context.Background(), &ua.WriteRequest{NodesToWrite: []*ua.WriteValue{{
		NodeID: ua.MustParseNodeID(node), AttributeID: ua.AttributeIDValue,
		Value: &ua.DataValue{EncodingMask: ua.DataValueValue, Value: ua.MustVariant(v)}}}})
	if err != nil {
		o.t.Fatal(err)
	}
	return resp.Results[0]
}

func (o *opcuaClient) read(node string) *ua.DataValue {
	o.t.Helper()
	resp, err := o.c.Read(context.Background(), &ua.ReadRequest{NodesToRead: []*ua.ReadValueID{{
		NodeID: ua.MustParseNodeID(node), AttributeID: ua.AttributeIDValue}}})
	if err != nil {
		o.t.Fatal(err)
	}
	return resp.Results[0]
}

// The OPC UA device's owner-epoch node refuses a declaration behind the
// highest epoch and every write of a session behind it, as the Modbus
// owner-epoch block does, and logs every write with its connection's peer.
func TestOPCUADeviceRefusesASessionBehindTheOwnerEpoch(t *testing.T) {
	sim, err := Start(Config{Address: "127.0.0.1:0", Protocol: OPCUA})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() }) // after the sessions close
	sim.SetRegister(100, 40)
	a, b := dialOPCUA(t, sim.Addr()), dialOPCUA(t, sim.Addr())
	if v := a.read(OPCUANode(100)); v.Status != ua.StatusOK || v.Value.Value() != uint16(40) {
		t.Fatalf("read of register 100 = %v %v, want UInt16 40", v.Status, v.Value)
	}
	if st := a.write(OPCUAEpochNode, int64(4)); st != ua.StatusOK {
		t.Fatalf("declaring epoch 4 = %v", st)
	}
	if st := a.write(OPCUANode(100), uint16(2)); st != ua.StatusOK {
		t.Fatal(st)
	}
	if st := b.write(OPCUAEpochNode, int64(3)); st != ua.StatusBadUserAccessDenied {
		t.Fatalf("a declaration behind the owner epoch = %v, want Bad_UserAccessDenied", st)
	}
	if st := b.write(OPCUAEpochNode, int64(5)); st != ua.StatusOK {
		t.Fatal(st)
	}
	if st := b.write(OPCUANode(100), uint16(3)); st != ua.StatusOK {
		t.Fatal(st)
	}
	if st := a.write(OPCUANode(100), uint16(9)); st != ua.StatusBadUserAccessDenied {
		t.Fatalf("a write at epoch 4 after epoch 5 = %v, want Bad_UserAccessDenied", st)
	}
	if st := b.write(OPCUANode(100), int32(7)); st != ua.StatusBadTypeMismatch {
		t.Fatalf("an Int32 to a UInt16 register = %v, want Bad_TypeMismatch", st)
	}
	if got := sim.Registers(100, 1)[0]; got != 3 || sim.HighestEpoch() != 5 {
		t.Fatalf("register 100 = %d, owner epoch %d; want 3 and 5", got, sim.HighestEpoch())
	}
	if v := a.read(OPCUAEpochNode); v.Value.Value() != int64(5) {
		t.Fatalf("owner-epoch node reads %v, want 5", v.Value)
	}
	log := sim.Writes()
	type entry struct {
		epoch    int64
		value    uint16
		accepted bool
	}
	want := []entry{{4, 2, true}, {3, 0, false}, {5, 3, true}, {4, 9, false}, {5, 0, false}}
	if len(log) != len(want) {
		t.Fatalf("log %+v, want %d entries", log, len(want))
	}
	for i, w := range log {
		if (entry{w.Epoch, w.Value, w.Accepted}) != want[i] || w.Peer == "" || !strings.HasPrefix(w.Peer, "127.0.0.1:") {
			t.Fatalf("log[%d] = %+v, want %+v from a loopback peer", i, w, want[i])
		}
	}
	if log[0].Peer == log[2].Peer || log[0].Peer != log[3].Peer || log[0].Node != OPCUANode(100) {
		t.Fatalf("the log does not tell the sessions' connections apart: %+v", log)
	}
	if err := CheckOneWriter(log); err != nil {
		t.Fatalf("the device's own log shows overlap: %v", err)
	}
	sim.SetReadsFailing(true)
	if v := a.read(OPCUANode(100)); v.Status != ua.StatusBadNotReadable {
		t.Fatalf("read with reads failing = %v, want Bad_NotReadable", v.Status)
	}
}

// A plain OPC UA device accepts every write, has no owner-epoch node, and
// logs every write at epoch 0 with its connection's peer.
func TestOPCUAPlainDeviceAcceptsEveryWrite(t *testing.T) {
	sim, err := Start(Config{Address: "127.0.0.1:0", Protocol: OPCUA, Mode: Plain})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() }) // after the sessions close
	a, b := dialOPCUA(t, sim.Addr()), dialOPCUA(t, sim.Addr())
	if st := a.write(OPCUAEpochNode, int64(9)); st != ua.StatusBadNodeIDUnknown {
		t.Fatalf("a plain device's owner-epoch node = %v, want Bad_NodeIdUnknown", st)
	}
	if st := b.write(OPCUANode(7), uint16(1)); st != ua.StatusOK {
		t.Fatal(st)
	}
	if st := a.write(OPCUANode(7), uint16(2)); st != ua.StatusOK {
		t.Fatal(st)
	}
	log := sim.Writes()
	if len(log) != 2 || !log[0].Accepted || !log[1].Accepted || log[0].Epoch != 0 || log[1].Value != 2 ||
		log[0].Peer == log[1].Peer || log[0].Register != 7 {
		t.Fatalf("log %+v, want two accepted writes at epoch 0 from two peers", log)
	}
	if got := sim.Registers(7, 1)[0]; got != 2 {
		t.Fatalf("register 7 = %d, want 2", got)
	}
}
