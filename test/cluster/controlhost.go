package cluster

import (
	"fmt"
	"strconv"
	"strings"
)

// ControlHost is a machine of the control network that runs no kubelet: a
// network namespace of its own with an address on the hub's bridge.
// holdfast's controllers each run on one (StartController), as a real
// cluster runs its replicas on separate hosts, so a drill can partition one
// replica alone: from the apiserver, or from the runtimes.
type ControlHost struct {
	Name string
	// IP is its address on the control network.
	IP    string
	Netns string
	c     *Cluster
	link  string
}

// controlHost is the control host named name, made on first use.
func (c *Cluster) controlHost(name string) (*ControlHost, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h, ok := c.hosts[name]; ok {
		return h, nil
	}
	if c.hosts == nil {
		c.hosts = map[string]*ControlHost{}
	}
	k := len(c.hosts) + 1
	h := &ControlHost{Name: name, IP: fmt.Sprintf("198.18.0.%d", 100+k), Netns: "hfe-" + c.ID + "-ctl" + strconv.Itoa(k),
		c: c, link: fmt.Sprintf("c%d", k)}
	if err := run("ip", "netns", "add", h.Netns); err != nil {
		return nil, err
	}
	c.netns = append(c.netns, h.Netns)
	for _, argv := range [][]string{
		{"ip", "-n", c.HubNetns, "link", "add", h.link, "type", "veth", "peer", "name", string(Control), "netns", h.Netns},
		{"ip", "-n", c.HubNetns, "link", "set", h.link, "master", hubBridge, "up"},
		{"ip", "-n", h.Netns, "addr", "add", h.IP + "/24", "dev", string(Control)},
		{"ip", "-n", h.Netns, "link", "set", string(Control), "up"},
		{"ip", "-n", h.Netns, "link", "set", "lo", "up"},
	} {
		if err := run(argv...); err != nil {
			return nil, err
		}
	}
	c.hosts[name] = h
	return h, nil
}

// DropPeers drops everything between the host and peers (addresses), or,
// with tcpPort, only TCP to and from that port of theirs, in both
// directions and with nftables inside the host's own namespace: the host
// stays on the control network for everyone else. Drops add up until Heal.
func (h *ControlHost) DropPeers(peers []string, tcpPort int) error {
	return nftIn(h.Netns, peerDrops("", peers, tcpPort))
}

// Heal removes every drop on the host.
func (h *ControlHost) Heal() error { return nftIn(h.Netns, healScript) }

// DropPodPeers drops everything between the pod at podIP on this node and
// peers, or only TCP to and from tcpPort of theirs: what the node forwards
// for that pod, and nothing of the node's own. Drops add up until Heal.
func (n *Node) DropPodPeers(podIP string, peers []string, tcpPort int) error {
	return n.nft(peerDrops(podIP, peers, tcpPort))
}

// peerDrops is the nftables script that drops traffic between peers and
// the namespace itself (self empty: its input and output) or a pod it
// forwards for (self the pod's address).
func peerDrops(self string, peers []string, tcpPort int) string {
	set := "{ " + strings.Join(peers, ", ") + " }"
	to, from := "", ""
	if tcpPort > 0 {
		to, from = fmt.Sprintf(" tcp dport %d", tcpPort), fmt.Sprintf(" tcp sport %d", tcpPort)
	}
	var rules string
	if self == "" {
		rules = fmt.Sprintf(`chain pout { type filter hook output priority -300; policy accept; ip daddr %s%s drop; }
chain pin { type filter hook input priority -300; policy accept; ip saddr %s%s drop; }`, set, to, set, from)
	} else {
		// Forwarded to and from other hosts; delivered to and sent by the
		// node itself for a peer that is this node's own address.
		rules = fmt.Sprintf(`chain pfwd { type filter hook forward priority -300; policy accept; ip saddr %[1]s ip daddr %[2]s%[3]s drop; ip saddr %[2]s%[4]s ip daddr %[1]s drop; }
chain ppin { type filter hook input priority -300; policy accept; ip saddr %[1]s ip daddr %[2]s%[3]s drop; }
chain ppout { type filter hook output priority -300; policy accept; ip saddr %[2]s%[4]s ip daddr %[1]s drop; }`,
			self, set, to, from)
	}
	return fmt.Sprintf("table inet %s {\n%s\n}\n", dropTable, rules)
}
