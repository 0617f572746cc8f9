// Package systemdhost is a test node's host half as holdfast-node sees it:
// its state directories and test/dbusdouble's systemd Manager on a private
// D-Bus serving the node's units, with a go-systemd connection to it. The
// node-plugin tests and controller/voters' fleet start one a node.
package systemdhost

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/test/dbusdouble"
)

// Host is one node's host half.
type Host struct {
	State hoststate.State
	// SystemdDir is where drop-ins are written (the actuator's SystemdDir).
	SystemdDir string
	Manager    *dbusdouble.Manager
	Systemd    *actuator.DBusSystemd
}

// Units are the units a host serves, given its state and roleIs: the
// ExecCondition `holdfast-node role-is <role>` on this host, run by the test
// binary (the package's TestMain stands in for holdfast-node role-is).
type Units func(state hoststate.State, roleIs func(role string) []string) []dbusdouble.Unit

// Start serves units on a new private bus under a test directory; all of it
// stops with the test.
func Start(t testing.TB, units Units) *Host {
	t.Helper()
	dir := t.TempDir()
	h := &Host{State: hoststate.State{Dir: filepath.Join(dir, "holdfast"), MemberDataDir: filepath.Join(dir, "db")},
		SystemdDir: filepath.Join(dir, "systemd")}
	roleIs := func(role string) []string {
		return []string{os.Args[0], "role-is", "--host-dir", h.State.Dir, "--member-data-dir", h.State.MemberDataDir, role}
	}
	bus, err := dbusdouble.StartBus(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Close)
	if h.Manager, err = dbusdouble.Serve(bus, dbusdouble.Config{DropInDir: h.SystemdDir, Units: units(h.State, roleIs)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Manager.Close)
	conn, err := bus.Systemd(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	h.Systemd = &actuator.DBusSystemd{Conn: conn}
	return h
}
