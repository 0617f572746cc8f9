package cluster

import (
	"context"
	"fmt"
	"net"
)

// The field network: the plant's devices on a bridge of their own, apart
// from the control network (the hub), as a plant keeps its Modbus couplers
// on a field LAN. Every node has a second interface there (eth1); nothing
// routes between the two networks, so the control plane never reaches a
// device and a node reaches one only over its own field link.
const (
	// FieldIP is the field network's own address on its bridge; the
	// device simulators listen here.
	FieldIP     = "198.18.1.1"
	fieldBridge = "hffield0"
	fieldPrefix = "198.18.1."
)

// Link is one of a node's two network links.
type Link string

const (
	// Control is the node's link to the hub: the apiserver, holdfast's
	// components, the grantor's renewals and the MQTT broker.
	Control Link = "eth0"
	// Field is the node's link to the field network: its devices.
	Field Link = "eth1"
)

func (l Link) valid() error {
	if l != Control && l != Field {
		return fmt.Errorf("link %q: must be %s (control) or %s (field)", l, Control, Field)
	}
	return nil
}

// startField makes the field network's namespace and bridge.
func (c *Cluster) startField() error {
	if existingNetns()[c.FieldNetns] {
		return fmt.Errorf("network namespace %s exists", c.FieldNetns)
	}
	if err := run("ip", "netns", "add", c.FieldNetns); err != nil {
		return err
	}
	c.netns = append(c.netns, c.FieldNetns)
	for _, argv := range [][]string{
		{"ip", "-n", c.FieldNetns, "link", "set", "lo", "up"},
		{"ip", "-n", c.FieldNetns, "link", "add", fieldBridge, "type", "bridge"},
		{"ip", "-n", c.FieldNetns, "addr", "add", FieldIP + "/24", "dev", fieldBridge},
		{"ip", "-n", c.FieldNetns, "link", "set", fieldBridge, "up"},
	} {
		if err := run(argv...); err != nil {
			return err
		}
	}
	return nil
}

// StartInField starts a process in the field network's namespace (a device
// simulator), with its log under the cluster's logs directory. The cluster
// stops it on Stop.
func (c *Cluster) StartInField(name string, env []string, argv ...string) (*Process, error) {
	return c.startIn(c.FieldNetns, name, env, argv...)
}

// inField reports whether addr (host:port or host) is on the field network.
func inField(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	ip := net.ParseIP(host)
	_, field, _ := net.ParseCIDR(fieldPrefix + "0/24")
	return ip != nil && field.Contains(ip)
}

// fieldLinkName is the field bridge's end of node i's field link.
func fieldLinkName(i int) string { return fmt.Sprintf("f%d", i) }

// fieldNetwork gives the node its field link: a veth pair from the field
// bridge to the node's eth1, with the node's field address.
func (n *Node) fieldNetwork() error {
	c := n.c
	for _, argv := range [][]string{
		{"ip", "-n", c.FieldNetns, "link", "add", n.fieldLink, "type", "veth", "peer", "name", string(Field), "netns", n.Netns},
		{"ip", "-n", c.FieldNetns, "link", "set", n.fieldLink, "master", fieldBridge, "up"},
		{"ip", "-n", n.Netns, "addr", "add", n.FieldIP + "/24", "dev", string(Field)},
		{"ip", "-n", n.Netns, "link", "set", string(Field), "up"},
	} {
		if err := run(argv...); err != nil {
			return err
		}
	}
	return nil
}

// CutLink takes one of the node's links down at its bridge's end, as when
// that cable is pulled; the other link is untouched.
func (n *Node) CutLink(l Link) error { return n.setLink(l, "down") }

// MendLink brings a link CutLink took down back up.
func (n *Node) MendLink(l Link) error { return n.setLink(l, "up") }

func (n *Node) setLink(l Link, state string) error {
	if err := l.valid(); err != nil {
		return err
	}
	ns, dev := n.c.HubNetns, n.hubLink
	if l == Field {
		ns, dev = n.c.FieldNetns, n.fieldLink
	}
	return run("ip", "-n", ns, "link", "set", dev, state)
}

// ListenInField listens on addr inside the field network (FieldIP is
// reachable from every node's field link): a device served by this process.
func (c *Cluster) ListenInField(network, addr string) (net.Listener, error) {
	return ListenIn(netnsPath(c.FieldNetns), network, addr)
}

// Dial dials from inside the node's network namespace, as its host-network
// processes do: the node's drops and cuts apply.
func (n *Node) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return DialContextIn(netnsPath(n.Netns))(ctx, network, addr)
}
