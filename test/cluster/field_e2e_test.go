//go:build e2e

package cluster_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-io/holdfast/test/cluster"
)

// silence is how long a drill waits to call a line silent: a segment on a
// bridge between namespaces arrives in microseconds, so one that has not
// arrived after this was dropped.
const silence = time.Second

// TestControlAndFieldLinksFailApart: a node has two links, eth0 to the
// control network (the apiserver) and eth1 to the field network (the
// devices), and nothing routes between them (the hub cannot reach a
// device). Each link is cut, partitioned or has one direction dropped on
// its own: over an open connection on each link, a drill's fault stops
// exactly what it names, and the other link carries on. Heal and Mend put
// everything back.
func TestControlAndFieldLinksFailApart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Config{Nodes: []cluster.NodeSpec{{Name: "edge-a"}}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	}()
	n := c.Nodes["edge-a"]
	// A device in the field and a service in the hub, each echoing lines.
	device, err := c.ListenInField("tcp", cluster.FieldIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer device.Close()
	control, err := c.ListenInHub("tcp", cluster.HubIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer control.Close()
	_, fieldPeer := connect(ctx, t, n, device)
	_, controlPeer := connect(ctx, t, n, control)
	if got := fieldPeer.RemoteAddr().(*net.TCPAddr).IP.String(); got != n.FieldIP {
		t.Fatalf("the device sees the node at %s, want its field address %s", got, n.FieldIP)
	}
	if got := controlPeer.RemoteAddr().(*net.TCPAddr).IP.String(); got != n.IP {
		t.Fatalf("the hub sees the node at %s, want its control address %s", got, n.IP)
	}
	hubCtx, hubCancel := context.WithTimeout(ctx, silence)
	if conn, err := cluster.DialContextIn("/run/netns/"+c.HubNetns)(hubCtx, "tcp", device.Addr().String()); err == nil {
		conn.Close()
		t.Fatal("the hub reached a device: nothing may route between the control and field networks")
	}
	hubCancel()

	type flow struct{ up, down bool } // node -> far end, far end -> node
	open := flow{true, true}
	for _, tc := range []struct {
		name           string
		fault, undo    func() error
		field, control flow
	}{
		{"control partitioned", func() error { return n.Partition(cluster.Control) }, n.Heal, open, flow{}},
		{"field partitioned", func() error { return n.Partition(cluster.Field) }, n.Heal, flow{}, open},
		{"control inbound dropped", func() error { return n.DropOn(cluster.Control, cluster.Inbound) }, n.Heal, open, flow{up: true}},
		{"control outbound dropped", func() error { return n.DropOn(cluster.Control, cluster.Outbound) }, n.Heal, open, flow{down: true}},
		{"field inbound dropped", func() error { return n.DropOn(cluster.Field, cluster.Inbound) }, n.Heal, flow{up: true}, open},
		{"field outbound dropped", func() error { return n.DropOn(cluster.Field, cluster.Outbound) }, n.Heal, flow{down: true}, open},
		{"field link cut", func() error { return n.CutLink(cluster.Field) }, func() error { return n.MendLink(cluster.Field) }, flow{}, open},
		{"control link cut", func() error { return n.CutLink(cluster.Control) }, func() error { return n.MendLink(cluster.Control) }, open, flow{}},
		{"both links cut", n.Cut, n.Mend, flow{}, flow{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Fresh connections: nothing of an earlier case in flight (an
			// unacknowledged segment holds a sender's window shut).
			fieldEnd, fieldPeer := connect(ctx, t, n, device)
			controlEnd, controlPeer := connect(ctx, t, n, control)
			if err := tc.fault(); err != nil {
				t.Fatal(err)
			}
			for _, l := range []struct {
				name       string
				node, peer *lineConn
				want       flow
			}{{"field", fieldEnd, fieldPeer, tc.field}, {"control", controlEnd, controlPeer, tc.control}} {
				if got := l.node.send(l.peer, tc.name+" up"); got != l.want.up {
					t.Errorf("%s link, node -> far end: delivered %v, want %v", l.name, got, l.want.up)
				}
				if got := l.peer.send(l.node, tc.name+" down"); got != l.want.down {
					t.Errorf("%s link, far end -> node: delivered %v, want %v", l.name, got, l.want.down)
				}
			}
			if err := tc.undo(); err != nil {
				t.Fatal(err)
			}
			// Put back, what was held is retransmitted and both ways
			// carry again; read until the probes' own lines arrive.
			for _, l := range [][2]*lineConn{{fieldEnd, fieldPeer}, {controlEnd, controlPeer}} {
				if !l[0].sendWithin(l[1], tc.name+" healed up", 30*time.Second) || !l[1].sendWithin(l[0], tc.name+" healed down", 30*time.Second) {
					t.Fatalf("after undoing %s a link does not carry both ways", tc.name)
				}
			}
		})
	}
}

// lineConn is one end of a TCP connection that carries lines.
type lineConn struct {
	net.Conn
	r *bufio.Reader
}

// connect dials ln from inside node n and returns the node's end and the
// far end.
func connect(ctx context.Context, t *testing.T, n *cluster.Node, ln net.Listener) (*lineConn, *lineConn) {
	t.Helper()
	accepted := make(chan net.Conn, 1)
	go func() {
		conn, err := ln.Accept()
		if err == nil {
			accepted <- conn
		}
	}()
	conn, err := n.Dial(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("node %s cannot reach %s: %v", n.Name, ln.Addr(), err)
	}
	t.Cleanup(func() { conn.Close() })
	select {
	case peer := <-accepted:
		t.Cleanup(func() { peer.Close() })
		return &lineConn{conn, bufio.NewReader(conn)}, &lineConn{peer, bufio.NewReader(peer)}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never accepted the node's connection", ln.Addr())
	}
	return nil, nil
}

// send writes a line to the far end and reports whether it arrived within
// silence.
func (c *lineConn) send(to *lineConn, line string) bool { return c.sendWithin(to, line, silence) }

// sendWithin writes line and reads the far end until that line arrives
// (lines held back by an earlier fault arrive first) or d passes.
func (c *lineConn) sendWithin(to *lineConn, line string, d time.Duration) bool {
	if _, err := fmt.Fprintln(c, line); err != nil {
		return false
	}
	deadline := time.Now().Add(d)
	for {
		_ = to.SetReadDeadline(deadline)
		got, err := to.r.ReadString('\n')
		if err != nil {
			return false // a timeout: the line was dropped
		}
		if strings.TrimSpace(got) == line {
			return true
		}
	}
}
