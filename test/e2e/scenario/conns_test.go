package scenario

import (
	"net"
	"os/exec"
	"testing"
	"time"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// RuntimeConns names each connection to a device by the runtime process
// that holds it: two processes of one unit at different epochs, connected
// from one host, are told apart by their connections' ports, and a process
// of another unit is none of them.
func TestRuntimeConnsNameEachConnectionByItsProcess(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	device := ln.Addr().String()
	_, port, _ := net.SplitHostPort(device)
	// hold is a process with a runtime's environment holding one
	// connection to the device; it returns the connection's peer as the
	// device sees it.
	hold := func(namespace, name, epoch string) string {
		cmd := exec.Command("bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/"+port+" && read -r -u 3")
		cmd.Env = []string{holdfastv1.RuntimeEnvNamespace + "=" + namespace, holdfastv1.RuntimeEnvUnitName + "=" + name,
			holdfastv1.RuntimeEnvEpoch + "=" + epoch}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.RemoteAddr().String()
	}
	first, second, other := hold("plant", "kiln", "1"), hold("plant", "kiln", "2"), hold("plant", "dryer", "3")
	got, err := RuntimeConns("plant", "kiln", device)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[first] != 1 || got[second] != 2 {
		t.Fatalf("RuntimeConns = %v, want %s at epoch 1 and %s at epoch 2 (not the other unit's %s)", got, first, second, other)
	}
}
