package cluster

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Faults the drills inject beyond a cut link (Node.Cut, Node.CutLink) and a
// stopped kubelet: one direction of one of a node's links dropped, a link
// partitioned, and the apiserver restarted.

// Direction is the way a node's traffic is dropped.
type Direction string

const (
	// Inbound drops every packet reaching the node over the link: on the
	// control link its runtime never hears the grantor, while what it
	// sends (an acknowledgement on an open connection) still leaves.
	Inbound Direction = "inbound"
	// Outbound drops every packet the node sends over the link: on the
	// control link its runtime still hears the grantor on an open
	// connection but no answer, and no request of its own, leaves the
	// node.
	Outbound Direction = "outbound"
)

// dropTable is the nftables table the drills own inside a node's network
// namespace; nothing else is touched there, and nothing in the machine's
// own namespace.
const dropTable = "holdfast_drill"

// Drop drops one direction of the node's traffic on its control link (see
// DropOn).
func (n *Node) Drop(d Direction, tcpPorts ...int) error { return n.DropOn(Control, d, tcpPorts...) }

// DropOn drops one direction of the node's traffic on link l, its pods'
// included, with nftables inside the node's own network namespace: all of
// it, or, with tcpPorts, only TCP to those ports of the node (Inbound) or
// of the far end (Outbound). A port of the node is a socket of the node's
// own, a host-network pod's among them (the runtime's lease port): a pod
// listening on the same port at its own address (holdfast-webhook's 9443,
// installed by the chart on a standby) is no port of the node and stays
// reachable. Loopback and the other link are untouched. Drops add up until
// Heal.
func (n *Node) DropOn(l Link, d Direction, tcpPorts ...int) error {
	if err := l.valid(); err != nil {
		return err
	}
	match := ""
	if len(tcpPorts) > 0 {
		var ps []string
		for _, p := range tcpPorts {
			ps = append(ps, strconv.Itoa(p))
		}
		match = " tcp dport { " + strings.Join(ps, ", ") + " }"
	}
	// What the node's own processes send and receive passes the output
	// and input hooks; what its pods (off the host network) send and
	// receive is forwarded through the node.
	var rules string
	switch d {
	case Inbound:
		rules = `chain in { type filter hook input priority -300; policy accept; iifname "` + string(l) + `"` + match + ` drop; }`
		if len(tcpPorts) == 0 {
			// What the node forwards is for a pod's own address, never a
			// port of the node (the cluster maps no host port to a pod:
			// no portmap), so it goes only when everything inbound does.
			rules += "\n" + `chain fwdin { type filter hook forward priority -300; policy accept; iifname "` + string(l) + `" drop; }`
		}
	case Outbound:
		rules = `chain out { type filter hook output priority -300; policy accept; oifname "` + string(l) + `"` + match + ` drop; }
chain fwdout { type filter hook forward priority -300; policy accept; oifname "` + string(l) + `"` + match + ` drop; }`
	default:
		return fmt.Errorf("direction %q: must be %s or %s", d, Inbound, Outbound)
	}
	return n.nft(fmt.Sprintf("table inet %s {\n%s\n}\n", dropTable, rules))
}

// Partition drops everything on link l in both directions while the link
// stays up, as when a switch upstream of the node stops forwarding: on the
// control link the node loses the apiserver, the grantor and the broker
// while its devices stay reachable over the field link. Dropping one
// direction alone is no partition (an apiserver's retransmissions still
// carry its watch events to a node whose acknowledgements are lost).
func (n *Node) Partition(l Link) error {
	return errors.Join(n.DropOn(l, Inbound), n.DropOn(l, Outbound))
}

// Heal removes every drop the drills added to the node (none is no error).
func (n *Node) Heal() error { return n.nft(healScript) }

// healScript deletes the drills' table; adding it empty first makes the
// delete succeed when none exists.
var healScript = fmt.Sprintf("table inet %s {}\ndelete table inet %s\n", dropTable, dropTable)

func (n *Node) nft(script string) error { return nftIn(n.Netns, script) }

// nftIn runs an nftables script inside the network namespace ns.
func nftIn(ns, script string) error {
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft in %s: %v: %s", ns, err, out)
	}
	return nil
}

// RestartAPIServer stops the kube-apiserver (SIGTERM, by its PID), leaves
// it down for down, starts it again with the same flags (etcd keeps every
// object) and waits until it is ready. Its clients reconnect on their own.
func (c *Cluster) RestartAPIServer(ctx context.Context, down time.Duration) error {
	c.apiserver.Stop(30 * time.Second)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	api, err := c.StartInHub("kube-apiserver", nil, c.apiserverArgv...)
	if err != nil {
		return err
	}
	c.apiserver = api
	rc, err := c.restClient()
	if err != nil {
		return err
	}
	return c.waitAPIServerReady(ctx, rc, api)
}

// APIServerDown reports whether the apiserver process has ended.
func (c *Cluster) APIServerDown() bool { return c.apiserver.Exited() }

// Unsent lists the node's TCP sockets to addr (host:port) that still hold
// data the peer has not acknowledged (Send-Q above 0), one ss(8) line each:
// what TCP would deliver to that peer later, even from a socket its process
// has closed (an orphan in FIN-WAIT-1 retransmits until the peer answers or
// the kernel gives up).
func (n *Node) Unsent(addr string) ([]string, error) {
	out, err := exec.Command("ip", "netns", "exec", n.Netns, "ss", "-tnH", "state", "all", "dst", addr).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ss in %s: %v: %s", n.Netns, err, out)
	}
	var held []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		if q, err := strconv.Atoi(f[2]); err == nil && q > 0 {
			held = append(held, strings.Join(f, " "))
		}
	}
	return held, nil
}
