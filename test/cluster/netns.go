package cluster

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// netnsDir is where ip-netns(8) keeps named network namespaces.
const netnsDir = "/run/netns"

func netnsPath(name string) string { return filepath.Join(netnsDir, name) }

// inNetns is argv run in the named network namespace (nsenter execs argv, so
// the PID is argv's own).
func inNetns(ns string, argv ...string) []string {
	return append([]string{"nsenter", "--net=" + netnsPath(ns), "--"}, argv...)
}

// madeInNetns runs mk on an OS thread that has joined the network namespace at
// nsPath, so the socket it makes belongs to that namespace: this process
// reaches (or serves) the cluster's addresses without any route or address in
// the machine's own namespace. The thread is never unlocked: it ends with its
// goroutine and the namespace change with it.
func madeInNetns[T any](nsPath string, mk func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		var zero T
		f, err := os.Open(nsPath)
		if err != nil {
			ch <- result{zero, err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{zero, err}
			return
		}
		v, err := mk()
		ch <- result{v, err}
	}()
	r := <-ch
	return r.v, r.err
}

// DialContextIn dials from inside a network namespace (see madeInNetns).
func DialContextIn(nsPath string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return madeInNetns(nsPath, func() (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		})
	}
}

// ListenIn listens from inside a network namespace (see madeInNetns), so a server
// in this process answers on an address that exists only there.
func ListenIn(nsPath, network, addr string) (net.Listener, error) {
	return madeInNetns(nsPath, func() (net.Listener, error) { return net.Listen(network, addr) })
}

// mountNSInode is the mount namespace of a process, as its inode number.
func nsInode(pid int, kind string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(pid)+"/ns/"+kind, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// pidsInMountNS lists the processes whose mount namespace is ino.
func pidsInMountNS(ino uint64) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if got, err := nsInode(pid, "mnt"); err == nil && got == ino {
			pids = append(pids, pid)
		}
	}
	return pids
}

// existingNetns lists the named network namespaces.
func existingNetns() map[string]bool {
	ents, _ := os.ReadDir(netnsDir)
	m := map[string]bool{}
	for _, e := range ents {
		m[strings.TrimSpace(e.Name())] = true
	}
	return m
}
