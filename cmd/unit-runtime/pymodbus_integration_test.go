//go:build integration

package main_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	"github.com/holdfast-io/holdfast/runtime/runtimetest"
	"github.com/holdfast-io/holdfast/test/leasetest"
	"github.com/holdfast-io/holdfast/test/ports"
)

// debianPython is the interpreter Debian's python3-pymodbus installs for
// (a python3 earlier on PATH, a pyenv one, does not see it).
const debianPython = "/usr/bin/python3"

// pymodbus is a Modbus TCP server of Debian's python3-pymodbus on
// loopback, and its client.
type pymodbus struct {
	port int
	log  string
}

// startPymodbus starts pymodbus's own server on a free loopback port and
// waits until it answers its own client. A missing package fails the test
// with how to install it: the driver is never left checked only against
// holdfast's simulator.
func startPymodbus(t *testing.T) *pymodbus {
	t.Helper()
	if out, err := exec.Command(debianPython, "-c", "import pymodbus.server, pymodbus.client").CombinedOutput(); err != nil {
		t.Fatalf("Debian's python3-pymodbus is not usable (%s cannot import pymodbus.server and pymodbus.client: %v: %s): "+
			"run hack/install-modbus-deps.sh (make test and make test-integration run it)", debianPython, err, bytes.TrimSpace(out))
	}
	p := &pymodbus{port: ports.Free(t, 1)[0], log: filepath.Join(t.TempDir(), "pymodbus-server.log")}
	logFile, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(debianPython, filepath.Join("testdata", "pymodbus_server.py"), strconv.Itoa(p.port))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			t.Logf("pymodbus server log:\n%s", b)
		}
	})
	eventually(t, 30*time.Second, "the pymodbus server to answer", func() bool {
		c, err := net.DialTimeout("tcp", p.addr(), time.Second)
		if err != nil {
			return false
		}
		c.Close()
		_, err = p.client("read", 0, 1)
		return err == nil
	})
	return p
}

func (p *pymodbus) addr() string { return fmt.Sprintf("127.0.0.1:%d", p.port) }

// client runs pymodbus's own client: read ADDR COUNT or write ADDR VALUE.
func (p *pymodbus) client(op string, addr, arg int) ([]int, error) {
	out, err := exec.Command(debianPython, filepath.Join("testdata", "pymodbus_client.py"), strconv.Itoa(p.port), op,
		strconv.Itoa(addr), strconv.Itoa(arg)).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("pymodbus client %s %d %d: %v: %s", op, addr, arg, err, bytes.TrimSpace(out))
	}
	var vals []int
	for _, f := range strings.Fields(string(out)) {
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("pymodbus client %s: %q", op, out)
		}
		vals = append(vals, v)
	}
	return vals, nil
}

func (p *pymodbus) read(t *testing.T, addr, count int) []int {
	t.Helper()
	v, err := p.client("read", addr, count)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestTheRuntimeDrivesAModbusServerNobodyHereWrote: the real unit-runtime
// binary, its Modbus driver configured as for a plain device (no owner-epoch
// block), drives pymodbus's own server, and pymodbus's own client reads back
// what it wrote: the operating point it adopted from the device (counter
// 500, valve 55) and the counter going up from there while the lease is
// renewed; once renewals stop and the runtime fences, the valve is at its
// hold value and the counter stays where the runtime left it.
func TestTheRuntimeDrivesAModbusServerNobodyHereWrote(t *testing.T) {
	srv := startPymodbus(t)
	for reg, v := range map[int]int{counter: 500, valve: 55} {
		if _, err := srv.client("write", reg, v); err != nil {
			t.Fatal(err)
		}
	}
	rt := runtimetest.Start(t, runtimetest.Build(t), runtimetest.Options{
		Unit: unit, Epoch: 1, LeaseDuration: leaseTime, StateDir: filepath.Join(t.TempDir(), "state"),
		Devices: []string{"coupler-1=modbus://" + srv.addr() + "?timeout=1s&epochRegister=none"},
		Outputs: []string{fmt.Sprintf("counter=coupler-1:%d,step=1", counter), fmt.Sprintf("valve=coupler-1:%d,hold=0", valve)},
	})
	ctx, stopRenewals := context.WithCancel(context.Background())
	defer stopRenewals()
	g := &leasetest.Grantor{URL: rt.LeaseURL, Unit: unit, Epoch: 1, Duration: leaseTime, Name: "test-grantor", TLS: rt.CA.Grantor(t)}
	go g.Run(ctx)

	var got []int
	eventually(t, 30*time.Second, "pymodbus's client to read the runtime's counter past 510", func() bool {
		got = srv.read(t, counter, 2)
		return got[0] > 510
	})
	if got[1] != 55 {
		t.Fatalf("pymodbus reads counter %d, valve %d: want the valve at the adopted 55", got[0], got[1])
	}
	before := got[0]
	eventually(t, 10*time.Second, "the counter to go on rising", func() bool { return srv.read(t, counter, 1)[0] > before+5 })
	if st, err := rt.Status(); err != nil || st.State != leaseapi.Held || st.Fenced {
		t.Fatalf("the runtime while renewed: %+v, %v; want Held", st, err)
	}

	stopRenewals()
	eventually(t, 3*leaseTime, "the runtime to fence", func() bool {
		st, err := rt.Status()
		return err == nil && st.State == leaseapi.Fenced
	})
	fenced := srv.read(t, counter, 2)
	if fenced[1] != 0 {
		t.Fatalf("pymodbus reads the valve at %d after the fence, want its hold value 0", fenced[1])
	}
	// The fenced runtime goes on scanning (reading) but writes nothing: the
	// counter stays put while it scans ten more times.
	scans := func() float64 {
		v, err := rt.Metric("holdfast_runtime_scan_duration_seconds_count")
		if err != nil {
			t.Fatal(err)
		}
		f, _ := strconv.ParseFloat(v, 64)
		return f
	}
	from := scans()
	eventually(t, 10*time.Second, "ten scans of the fenced runtime", func() bool { return scans() >= from+10 })
	if after := srv.read(t, counter, 1)[0]; after != fenced[0] {
		t.Fatalf("the counter moved from %d to %d after the fence", fenced[0], after)
	}
}
