package opcua_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/holdfast-io/holdfast/runtime/driver"
	"github.com/holdfast-io/holdfast/runtime/driver/opcua"
	"github.com/holdfast-io/holdfast/runtime/internal/testutil"
)

// valves are the variables of the tests' plant: two outputs (UInt16 and
// Int32), an input, and the owner-epoch node (Int64).
func valves() map[string]any {
	return map[string]any{"Valve": uint16(40), "Counter": int32(7), "Level": uint16(300), "OwnerEpoch": int64(0)}
}

func (p *plant) query() string {
	return "node.100=" + p.node("Counter") + "&node.101=" + p.node("Valve") + "&node.200=" + p.node("Level") +
		"&epochNode=" + p.node("OwnerEpoch") + "&timeout=2s"
}

func dial(t *testing.T, p *plant) *opcua.Driver {
	t.Helper()
	cfg, err := opcua.ParseURL("valve-1", p.url(p.query()))
	if err != nil {
		t.Fatal(err)
	}
	return testutil.Connected(t, opcua.New(cfg))
}

// L7, L13: the owner-epoch node is written before the first output write
// of a session, in a request of its own; a runtime behind a later epoch on
// the server writes nothing, not even its epoch, and says which epochs.
func TestOPCUAWritesCarryTheEpoch(t *testing.T) {
	p := startPlant(t, valves())
	ctx := context.Background()
	d := dial(t, p)

	if v, err := d.ReadRegisters(ctx, 100, 2); err != nil || v[0] != 7 || v[1] != 40 {
		t.Fatalf("read = %v, %v; want [7 40]", v, err)
	}
	if err := d.WriteRegisters(ctx, testutil.Permit(t, 3), 100, []uint16{8, 41}); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteRegisters(ctx, testutil.Permit(t, 3), 101, []uint16{42}); err != nil {
		t.Fatal(err)
	}
	want := []written{{"OwnerEpoch", 3}, {"Counter", 8}, {"Valve", 41}, {"Valve", 42}}
	if got := p.log(); !equal(got, want) {
		t.Fatalf("server saw writes %+v, want %+v: the epoch first, once per session", got, want)
	}
	// The write carries each node's own type.
	if v, ok := p.value("Counter").(int32); !ok || v != 8 {
		t.Fatalf("Counter = %#v, want int32 8", p.value("Counter"))
	}

	// A later binding takes the server at epoch 9.
	later := dial(t, p)
	if err := later.WriteRegisters(ctx, testutil.Permit(t, 9), 101, []uint16{5}); err != nil {
		t.Fatal(err)
	}
	before := len(p.log())
	behind := dial(t, p)
	err := behind.WriteRegisters(ctx, testutil.Permit(t, 4), 101, []uint16{99})
	var lo *driver.LaterOwnerError
	if !errors.As(err, &lo) || lo.OwnerEpoch != 9 || lo.Epoch != 4 || lo.Device != "valve-1" ||
		!errors.Is(err, driver.ErrStaleEpoch) || driver.IsTransportError(err) {
		t.Fatalf("a write at epoch 4 to a server owned at 9 = %v, want a LaterOwnerError naming 9 and 4", err)
	}
	if !strings.Contains(err.Error(), "owner epoch 9") || !strings.Contains(err.Error(), "nothing written") {
		t.Fatalf("the refusal %q does not say why", err)
	}
	if got := p.log(); len(got) != before {
		t.Fatalf("the runtime behind the server's epoch wrote %+v", got[before:])
	}
	if v := p.value("Valve"); v != uint16(5) {
		t.Fatalf("Valve = %v, want the later owner's 5", v)
	}
}

func equal(a, b []written) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestOPCUAParseURLNamesEveryBadParameter(t *testing.T) {
	_, err := opcua.ParseURL("valve-1", "opcua://10.0.0.1:4840?node.70000=ns=2;s=X&node.1=bogus&epochNode=??&timeout=soon&policy=Basic128&mode=Loud&colour=blue&user=op")
	for _, want := range []string{"node.70000:", "node.1:", "epochNode:", "timeout:", "policy:", "mode:", "colour: unknown parameter", "user, passwordFile"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseURL error %v, want it to name %q", err, want)
		}
	}
	if _, err := opcua.ParseURL("x", "opc.tcp://10.0.0.1:4840?node.1=i=5"); err == nil {
		t.Error("a non-opcua scheme was accepted")
	}
	if _, err := opcua.ParseURL("x", "opcua://10.0.0.1?node.1=i=5"); err == nil {
		t.Error("a URL without a port was accepted")
	}
	if _, err := opcua.ParseURL("x", "opcua://10.0.0.1:4840?policy=Basic256Sha256&node.1=i=5"); err == nil || !strings.Contains(err.Error(), "cert, key") {
		t.Errorf("a secured policy without certificate files = %v", err)
	}
	cfg, err := opcua.ParseURL("x", "opcua://127.0.0.1:4840/plant?node.100=ns=2;s=Valve")
	if err != nil || cfg.Endpoint != "opc.tcp://127.0.0.1:4840/plant" || cfg.Policy != opcua.PolicyNone || cfg.EpochNode != nil ||
		cfg.Timeout != opcua.DefaultTimeout || cfg.Nodes[100].String() != "ns=2;s=Valve" {
		t.Errorf("defaults = %+v, %v", cfg, err)
	}
	cfg, err = opcua.ParseURL("x", "opcua://127.0.0.1:4840?node.1=i=5&policy=Basic256Sha256&cert=c.der&key=k.pem")
	if err != nil || cfg.Mode.String() != "MessageSecurityModeSignAndEncrypt" {
		t.Errorf("Basic256Sha256 defaults to SignAndEncrypt: %v, %v", cfg.Mode, err)
	}
}

// L3: a write whose permit lapsed while it waited (behind a dial, or a
// read on a dead session) is not put on the wire: not the epoch, not the
// value.
func TestOPCUAAWriteThatWaitedPastTheFenceIsNotSent(t *testing.T) {
	p := startPlant(t, valves())
	testutil.WriteAfterTheFence(t, dial(t, p), 101)
	if got := p.log(); len(got) != 0 {
		t.Fatalf("the server saw %+v, want nothing", got)
	}
}
