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

// DialContextIn dials from inside a network namespace: the socket is made on
// an OS thread that has joined the namespace, so this process reaches the
// cluster's addresses without any route or address in the machine's own
// namespace. The thread is never unlocked: it ends with its goroutine and
// the namespace change with it.
func DialContextIn(nsPath string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread()
			f, err := os.Open(nsPath)
			if err != nil {
				ch <- result{nil, err}
				return
			}
			defer f.Close()
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				ch <- result{nil, err}
				return
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}

// ListenIn listens from inside a network namespace, the way DialContextIn
// dials: the socket belongs to the namespace it was made in, so a server in
// this process answers on an address that exists only there.
func ListenIn(nsPath, network, addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see DialContextIn
		f, err := os.Open(nsPath)
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, err}
			return
		}
		ln, err := net.Listen(network, addr)
		ch <- result{ln, err}
	}()
	r := <-ch
	return r.ln, r.err
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
