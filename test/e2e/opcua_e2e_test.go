//go:build e2e

package e2e

import (
	"testing"

	"github.com/holdfast-io/holdfast/test/devicesim"
	"github.com/holdfast-io/holdfast/test/e2e/scenario"
)

// TestFailoverWithAnOPCUADevice is the control-plane partition with the
// field open (TestControlPlanePartitionFailsOverWithTheFieldOpen, two
// leases long) with the unit's device an OPC UA server in place of the
// Modbus one: the device simulator's OPC UA mode on the field network, in
// the package's device mode (owner-epoch: the runtime declares its epoch
// in the owner-epoch node and the server refuses a session behind it;
// plain: the server accepts every write, and only the runtime's fence keeps
// the old one off it). The device's own log, read by true time and peer,
// shows one writer at a time.
func TestFailoverWithAnOPCUADevice(t *testing.T) {
	d := newDrillWith(t, "opcua", 0, func(o *scenario.UnitOptions) { o.Protocol = devicesim.OPCUA })
	d.controlPartition(partitionCase{name: "2x-lease", leases: 2})
}
