package scenario

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/devicesim"
)

// connsEvery is how often a unit's runtime processes are looked at for
// their device connections. A runtime keeps its connection for as long as
// the device answers, so a connection lives far longer than this.
const connsEvery = 200 * time.Millisecond

// watchConns records, until ctx ends, every connection to the unit's
// device that a runtime process of the unit holds, with the process's
// epoch: the device, plain or not, sees only the connection's address,
// which two runtimes on one node share but for the port.
func (u *Unit) watchConns(ctx context.Context) {
	t := time.NewTicker(connsEvery)
	defer t.Stop()
	for {
		u.sampleConns()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sampleConns looks once; a process that ends while it is read is left for
// the next look.
func (u *Unit) sampleConns() {
	seen, _ := RuntimeConns(u.Key.Namespace, u.Key.Name, u.device)
	u.mu.Lock()
	defer u.mu.Unlock()
	for peer, e := range seen {
		u.conns[peer] = e
	}
}

// Conns is every connection to the device seen held by a runtime process
// of the unit: its address as the device sees it -> the process's epoch.
func (u *Unit) Conns() devicesim.Conns {
	u.sampleConns()
	u.mu.Lock()
	defer u.mu.Unlock()
	out := devicesim.Conns{}
	for peer, e := range u.conns {
		out[peer] = e
	}
	return out
}

// RuntimeConns reads from /proc the TCP connections to device (host:port)
// that the runtime processes of unit namespace/name hold: each process is
// known by the unit and epoch its pod gives it in its environment, each
// connection by its local address, which the device logs as the peer
// (runtime pods use their node's network, with no address translation on
// the field network).
func RuntimeConns(namespace, name, device string) (map[string]int64, error) {
	want, err := procAddr(device)
	if err != nil {
		return nil, err
	}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		dir := filepath.Join("/proc", d.Name())
		epoch, ok := runtimeOf(dir, namespace, name)
		if !ok {
			continue
		}
		for _, local := range tcpTo(dir, want) {
			out[local] = epoch
		}
	}
	return out, nil
}

// runtimeOf is the epoch of the process at dir when it is a runtime of
// unit namespace/name.
func runtimeOf(dir, namespace, name string) (int64, bool) {
	b, err := os.ReadFile(filepath.Join(dir, "environ"))
	if err != nil {
		return 0, false
	}
	env := map[string]string{}
	for _, kv := range strings.Split(string(b), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	if env[holdfastv1.RuntimeEnvNamespace] != namespace || env[holdfastv1.RuntimeEnvUnitName] != name {
		return 0, false
	}
	e, err := strconv.ParseInt(env[holdfastv1.RuntimeEnvEpoch], 10, 64)
	return e, err == nil
}

// tcpTo lists the local addresses of the process's TCP sockets connected
// to remote (in /proc's hex form): its open socket inodes matched against
// its network namespace's IPv4 table.
func tcpTo(dir, remote string) []string {
	fds, err := os.ReadDir(filepath.Join(dir, "fd"))
	if err != nil {
		return nil
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join(dir, "fd", fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	f, err := os.Open(filepath.Join(dir, "net", "tcp"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 || fs[2] != remote || !inodes[fs[9]] {
			continue
		}
		if local, err := fromProcAddr(fs[1]); err == nil {
			out = append(out, local)
		}
	}
	return out
}

// procAddr writes an IPv4 host:port as /proc/net/tcp does: the address as
// a little-endian 32-bit word, then the port, in hex.
func procAddr(hostport string) (string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", err
	}
	ip := net.ParseIP(host).To4()
	p, err := strconv.ParseUint(port, 10, 16)
	if ip == nil || err != nil {
		return "", fmt.Errorf("device %s: want an IPv4 host:port", hostport)
	}
	return fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], p), nil
}

// fromProcAddr reads procAddr's form back.
func fromProcAddr(s string) (string, error) {
	h, p, ok := strings.Cut(s, ":")
	b, err := hex.DecodeString(h)
	if !ok || err != nil || len(b) != 4 {
		return "", fmt.Errorf("address %q: want /proc/net/tcp's IPv4 form", s)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return "", fmt.Errorf("address %q: %w", s, err)
	}
	return net.JoinHostPort(net.IPv4(b[3], b[2], b[1], b[0]).String(), strconv.FormatUint(port, 10)), nil
}
