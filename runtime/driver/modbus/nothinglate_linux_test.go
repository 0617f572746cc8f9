package modbus_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	testingclock "k8s.io/utils/clock/testing"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	"github.com/holdfast-io/holdfast/runtime/driver"
	"github.com/holdfast-io/holdfast/runtime/driver/modbus"
	"github.com/holdfast-io/holdfast/runtime/internal/testutil"
	"github.com/holdfast-io/holdfast/runtime/lease"
	"github.com/holdfast-io/holdfast/test/devicesim"
)

// L3 (hold then fence: a new writer never starts before the old one has
// certainly stopped), the node-cut drill in the small. The runtime and the
// device sit in two network namespaces this test creates, joined by a
// veth pair. The device's side of the link goes down while a write is on
// the wire, so its bytes sit in the runtime's TCP send queue. A graceful
// close leaves them there and TCP delivers the write when the link heals,
// long after the fence (the drill saw it 90s late). The driver must reset
// the connection instead (SO_LINGER 0), at the fence and when a write
// times out, so that nothing is queued and the device never logs a write
// of the fenced epoch after the fence.
func TestHoldThenFence_NoWriteReachesTheDeviceAfterTheFence(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test creates network namespaces and needs root (make test runs as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("ip (iproute2) not found: make node-deps installs it")
	}
	n := newLinkedNamespaces(t)
	var sim *devicesim.Sim
	n.inDevice(t, func() error {
		var err error
		sim, err = devicesim.Start(devicesim.Config{Address: n.deviceIP + ":5020"})
		return err
	})
	t.Cleanup(func() { _ = sim.Close() })

	t.Run("the fence aborts the write in flight", func(t *testing.T) {
		clk := testingclock.NewFakeClock(time.Now())
		k := testutil.GrantedKeeper(t, clk, 3, 10*time.Second)
		d := n.connect(t, sim.Addr(), 5*time.Minute) // the write never times out by itself here
		driver.AbortWritesOnFence(k, d)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go k.Run(ctx)

		write(t, k, d, 100, 41) // declares epoch 3 on this connection
		n.cut(t)
		done := make(chan error, 1)
		go func() { done <- writeErr(k, d, 100, 42) }()
		n.waitQueued(t, sim.Addr())

		fenceAt := time.Now()
		waitForTimer(t, clk)
		clk.Step(10 * time.Second) // deadline: Holding
		waitForState(t, k, leaseapi.Holding)
		waitForTimer(t, clk)
		clk.Step(5 * time.Second) // deadline + hold bound: Fenced
		select {
		case err := <-done:
			if err == nil || !driver.IsTransportError(err) {
				t.Fatalf("the write in flight at the fence returned %v, want it aborted", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the write in flight at the fence was not aborted")
		}
		waitForState(t, k, leaseapi.Fenced)
		n.assertNothingQueued(t, sim.Addr())
		n.heal(t)
		n.assertNoWriteAfter(t, sim, 3, fenceAt)
		if err := writeErr(k, d, 100, 43); !errors.Is(err, lease.ErrFenced) {
			t.Fatalf("a write after the fence = %v, want refused", err)
		}
	})

	t.Run("a write that timed out is aborted", func(t *testing.T) {
		clk := testingclock.NewFakeClock(time.Now())
		k := testutil.GrantedKeeper(t, clk, 4, 10*time.Second)
		d := n.connect(t, sim.Addr(), time.Second)
		write(t, k, d, 100, 51)
		n.cut(t)
		gaveUp := time.Now()
		if err := writeErr(k, d, 100, 52); err == nil || !driver.IsTransportError(err) {
			t.Fatalf("a write over the cut link = %v, want a transport error", err)
		}
		n.assertNothingQueued(t, sim.Addr())
		n.heal(t)
		n.assertNoWriteAfter(t, sim, 4, gaveUp)
	})
}

// linkedNamespaces are two network namespaces joined by a veth pair: the
// runtime's and the device's.
type linkedNamespaces struct {
	rt, dev            string
	rtIP, deviceIP     string
	rtLink, deviceLink string
}

func newLinkedNamespaces(t *testing.T) *linkedNamespaces {
	t.Helper()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	tag := hex.EncodeToString(b)
	n := &linkedNamespaces{rt: "hf-rt-" + tag, dev: "hf-dev-" + tag, rtIP: "10.251.0.1", deviceIP: "10.251.0.2",
		rtLink: "veth-rt", deviceLink: "veth-dev"}
	ip(t, "netns", "add", n.rt)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.rt).Run() })
	ip(t, "netns", "add", n.dev)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.dev).Run() })
	ip(t, "-n", n.rt, "link", "add", n.rtLink, "type", "veth", "peer", "name", n.deviceLink, "netns", n.dev)
	ip(t, "-n", n.rt, "addr", "add", n.rtIP+"/30", "dev", n.rtLink)
	ip(t, "-n", n.dev, "addr", "add", n.deviceIP+"/30", "dev", n.deviceLink)
	ip(t, "-n", n.rt, "link", "set", n.rtLink, "up")
	ip(t, "-n", n.dev, "link", "set", n.deviceLink, "up")
	// Static neighbours, as on many plant networks. With a learned entry a
	// cut link flushes it, and the segments sent while it is unresolved
	// wait in the kernel's neighbour queue (up to about 3s), below any
	// socket: a heal inside that window delivers them even from a socket
	// that was reset. The runtime cannot reach that queue; this test holds
	// what it can, that no socket of its keeps a write (the report names
	// the window).
	ip(t, "-n", n.rt, "neigh", "replace", n.deviceIP, "lladdr", mac(t, n.dev, n.deviceLink), "dev", n.rtLink, "nud", "permanent")
	ip(t, "-n", n.dev, "neigh", "replace", n.rtIP, "lladdr", mac(t, n.rt, n.rtLink), "dev", n.deviceLink, "nud", "permanent")
	return n
}

func mac(t *testing.T, ns, link string) string {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns, "-br", "link", "show", link).Output()
	if err != nil {
		t.Fatalf("ip -n %s link show %s: %v", ns, link, err)
	}
	f := strings.Fields(string(out))
	if len(f) < 3 {
		t.Fatalf("ip -n %s link show %s: %q", ns, link, out)
	}
	return f[2]
}

func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// cut takes the device's end of the link down: the runtime's segments are
// dropped and its TCP retransmits them until the link heals.
// The link is healed again when the test ends, however it ends.
func (n *linkedNamespaces) cut(t *testing.T) {
	ip(t, "-n", n.dev, "link", "set", n.deviceLink, "down")
	t.Cleanup(func() { _ = exec.Command("ip", "-n", n.dev, "link", "set", n.deviceLink, "up").Run() })
}
func (n *linkedNamespaces) heal(t *testing.T) { ip(t, "-n", n.dev, "link", "set", n.deviceLink, "up") }

// in runs fn on an OS thread switched into the namespace, so the sockets fn
// creates belong to it; the thread is switched back, or discarded.
func in(t *testing.T, ns string, fn func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open("/run/netns/" + ns)
		if err != nil {
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns back: %w", err) // the thread stays locked and dies with the goroutine
			return
		}
		goruntime.UnlockOSThread()
		errc <- ferr
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func (n *linkedNamespaces) inDevice(t *testing.T, fn func() error) { in(t, n.dev, fn) }

// connect dials the device from the runtime's namespace. No Reconnecting
// wrapper: a re-dial would run on a thread outside that namespace.
func (n *linkedNamespaces) connect(t *testing.T, addr string, timeout time.Duration) *modbus.Driver {
	t.Helper()
	epoch := uint16(9000)
	d := modbus.New(modbus.Config{Name: "coupler-1", Address: addr, UnitID: 1, Timeout: timeout, EpochRegister: &epoch})
	in(t, n.rt, func() error { return d.Connect(context.Background()) })
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// socket is one row of /proc/net/tcp.
type socket struct {
	remote, state string
	tx, rx        int64
}

// sockets reads the TCP sockets of a namespace from the kernel.
func (n *linkedNamespaces) sockets(t *testing.T, ns string) []socket {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/proc/net/tcp").Output()
	if err != nil {
		t.Fatalf("reading /proc/net/tcp in %s: %v", ns, err)
	}
	var socks []socket
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Scan() // header
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		q := strings.SplitN(f[4], ":", 2)
		tx, _ := strconv.ParseInt(q[0], 16, 64)
		rx, _ := strconv.ParseInt(q[1], 16, 64)
		socks = append(socks, socket{remote: f[2], state: f[3], tx: tx, rx: rx})
	}
	return socks
}

// procAddr is host:port as /proc/net/tcp writes it (IPv4, little-endian).
func procAddr(t *testing.T, addr string) string {
	t.Helper()
	host, port, _ := strings.Cut(addr, ":")
	var b [4]byte
	if _, err := fmt.Sscanf(host, "%d.%d.%d.%d", &b[0], &b[1], &b[2], &b[3]); err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	return fmt.Sprintf("%02X%02X%02X%02X:%04X", b[3], b[2], b[1], b[0], p)
}

// queued is what the runtime's namespace holds unsent or unacknowledged
// toward the device, by socket state.
func (n *linkedNamespaces) queued(t *testing.T, device string) map[string]int64 {
	want := procAddr(t, device)
	q := map[string]int64{}
	for _, s := range n.sockets(t, n.rt) {
		if s.remote == want && s.tx > 0 {
			q[s.state] += s.tx
		}
	}
	return q
}

// waitQueued waits until a write sits in the runtime's send queue.
func (n *linkedNamespaces) waitQueued(t *testing.T, device string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, "the write to sit in the send queue", func() bool {
		return len(n.queued(t, device)) > 0
	})
}

// assertNothingQueued: once a write has been given up, no socket of the
// runtime's namespace holds a byte for the device (a gracefully closed one
// would, in FIN_WAIT1, until the link heals). The test goes on to heal the
// link and read the device's log, which then shows the late write.
func (n *linkedNamespaces) assertNothingQueued(t *testing.T, device string) {
	t.Helper()
	if q := n.queued(t, device); len(q) > 0 {
		t.Errorf("bytes still queued toward the device after the write was given up (by TCP state, hex): %v", q)
	}
}

// assertNoWriteAfter heals nothing itself: the link is up again. It waits
// until the kernel has delivered everything still queued either way (the
// runtime holds nothing unacknowledged toward the device, the device has
// read everything that reached it), then reads the device's log.
func (n *linkedNamespaces) assertNoWriteAfter(t *testing.T, sim *devicesim.Sim, epoch int64, after time.Time) {
	t.Helper()
	devicePeer := procAddr(t, n.rtIP+":0")[:8]
	testutil.Eventually(t, 2*time.Minute, "the healed link to drain", func() bool {
		if len(n.queued(t, sim.Addr())) > 0 {
			return false
		}
		for _, s := range n.sockets(t, n.dev) {
			if strings.HasPrefix(s.remote, devicePeer) && s.rx > 0 {
				return false
			}
		}
		return true
	})
	// The device handles a request it has read before it answers; give a
	// request that arrived with the heal that long to reach the log.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		for _, w := range sim.Writes() {
			if w.Epoch == epoch && w.Time.After(after) {
				t.Fatalf("the device logged a write of epoch %d at %s, after it was given up at %s: %+v",
					epoch, w.Time.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano), w)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitForTimer(t *testing.T, clk *testingclock.FakeClock) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "the keeper to set its timer", clk.HasWaiters)
}

func waitForState(t *testing.T, k *lease.Keeper, s leaseapi.State) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, "lease state "+string(s), func() bool { return k.State() == s })
}
