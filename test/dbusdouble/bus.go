// Package dbusdouble serves a double of systemd's org.freedesktop.systemd1
// Manager on a real, private dbus-daemon (Debian's dbus package), so that
// go-systemd's own D-Bus code runs unchanged against it: PID 1 is not systemd
// on the machines holdfast is tested on.
//
// Start a bus, serve a Manager with the units a test needs, and hand the
// code under test a connection from Bus.Systemd:
//
//	bus, err := dbusdouble.StartBus(t.TempDir())
//	defer bus.Close()
//	m, err := dbusdouble.Serve(bus, dbusdouble.Config{DropInDir: dir, Units: units})
//	defer m.Close()
//	conn, err := bus.Systemd(ctx)
//
// The Manager records every call in order (Calls), emits JobRemoved for
// every job as systemd does, honours masks (runtime and persistent), reads
// Environment= and ExecCondition= lines from drop-ins only on Reload (as
// systemd needs daemon-reload), runs every ExecCondition command of a unit
// and its drop-ins with that environment and skips the start when one exits
// 1..254, and restarts a unit whose
// process exits when the unit says Restart=always.
package dbusdouble

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/holdfast-io/holdfast/internal/dbusconn"
)

// busConfig is a session-like bus on a socket in the test's directory, with
// EXTERNAL auth and a policy that lets anyone own the systemd name.
const busConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow receive_sender="*"/>
    <allow eavesdrop="true"/>
  </policy>
</busconfig>
`

// Bus is a running private dbus-daemon.
type Bus struct {
	// Address is the bus address, unix:path=....
	Address string
	cmd     *exec.Cmd
}

// StartBus starts dbus-daemon with its socket and config in dir. The dbus
// Debian package must be installed (hack/install-node-deps.sh).
func StartBus(dir string) (*Bus, error) {
	bin, err := exec.LookPath("dbus-daemon")
	if err != nil {
		return nil, fmt.Errorf("dbus-daemon not found (install Debian's dbus package: hack/install-node-deps.sh): %w", err)
	}
	sock := filepath.Join(dir, "bus.sock")
	conf := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, busConfig, sock), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--config-file="+conf, "--nofork", "--nopidfile", "--print-address=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		if s.Scan() {
			line <- strings.TrimSpace(s.Text())
		}
		close(line)
		for s.Scan() {
		}
	}()
	select {
	case addr, ok := <-line:
		if !ok || addr == "" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, fmt.Errorf("dbus-daemon printed no address")
		}
		return &Bus{Address: addr, cmd: cmd}, nil
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("dbus-daemon did not start within 20s")
	}
}

// Close stops the dbus-daemon.
func (b *Bus) Close() {
	if b.cmd != nil && b.cmd.Process != nil {
		_ = b.cmd.Process.Kill()
		_ = b.cmd.Wait()
	}
}

// Dial opens an authenticated connection to the bus (EXTERNAL, then Hello).
func (b *Bus) Dial() (*dbus.Conn, error) { return Dial(b.Address) }

// Dial opens an authenticated connection to the bus at address.
func Dial(address string) (*dbus.Conn, error) { return dbusconn.Dial(address) }

// Systemd opens a go-systemd connection through the bus, the same code path
// the node plugin uses against the host's system bus.
func (b *Bus) Systemd(_ context.Context) (*sd.Conn, error) {
	return sd.NewConnection(b.Dial)
}
