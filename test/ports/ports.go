// Package ports hands tests free loopback TCP ports that stay free: they
// are taken below the kernel's ephemeral range (net.ipv4.ip_local_port_range,
// 32768 and up here), so no outgoing connection can take one as its source
// port between the pick and the bind (a member restarted mid-test rebinds
// its ports), and all of one call's ports are held until the last is chosen,
// so none is handed out twice.
package ports

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
)

const (
	low  = 20000
	high = 32000
)

// Loopback returns n distinct free ports on 127.0.0.1.
func Loopback(n int) ([]int, error) {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	out := make([]int, 0, n)
	for tries := 0; len(out) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("no free port in %d-%d after %d tries", low, high, tries)
		}
		p := low + rand.IntN(high-low)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		held = append(held, l)
		out = append(out, p)
	}
	return out, nil
}

// Free returns n distinct free loopback ports and fails t when it cannot.
func Free(t testing.TB, n int) []int {
	t.Helper()
	ps, err := Loopback(n)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// Addr returns one free loopback address, 127.0.0.1:port: nothing listens
// there, so a connection to it is refused until something does.
func Addr(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", Free(t, 1)[0])
}
