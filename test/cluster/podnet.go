package cluster

import "fmt"

// The pod network: every node bridges its pods (those off the host network)
// on cni0 in its own subnet (podCIDR), and routes the other nodes' subnets
// to them over the control network, as a host-gateway network does; the
// hub routes every subnet to its node, so the apiserver reaches a pod (a
// webhook's endpoint: --enable-aggregator-routing). Nothing masquerades:
// a pod is known by its own address everywhere.
//
// There is no kube-proxy. Pods reach the apiserver through the kubernetes
// Service's address, as in-cluster clients do, by a DNAT in each node's
// namespace that stands in for kube-proxy for that one Service; the
// apiserver reaches other Services through their endpoints, and holdfast's
// components reach runtimes at their nodes' addresses.

// podCIDR is node index i's pod subnet.
func podCIDR(i int) string { return fmt.Sprintf("198.19.%d.0/24", i) }

// kubernetesServiceIP is the kubernetes Service's address, the first of
// ServiceCIDR.
const kubernetesServiceIP = "198.19.255.1"

// svcTable is the nftables table of the kubernetes Service's DNAT.
const svcTable = "holdfast_svc"

// podNetwork routes every node's pod subnet from the hub and from every
// other node, lets each node forward, and gives each node the kubernetes
// Service's DNAT.
func (c *Cluster) podNetwork() error {
	for _, name := range c.NodeNames {
		n := c.Nodes[name]
		argv := [][]string{
			{"ip", "-n", c.HubNetns, "route", "replace", podCIDR(n.index), "via", n.IP},
			{"ip", "netns", "exec", n.Netns, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
			// A host-network process's connect needs a route before the
			// output hook's DNAT rewrites its destination.
			{"ip", "-n", n.Netns, "route", "replace", ServiceCIDR, "via", HubIP},
		}
		for _, other := range c.NodeNames {
			if o := c.Nodes[other]; o != n {
				argv = append(argv, []string{"ip", "-n", n.Netns, "route", "replace", podCIDR(o.index), "via", o.IP})
			}
		}
		for _, a := range argv {
			if err := run(a...); err != nil {
				return err
			}
		}
		dnat := fmt.Sprintf("ip daddr %s tcp dport 443 dnat to %s:%d", kubernetesServiceIP, HubIP, APIServerPort)
		script := fmt.Sprintf("table ip %s {\nchain pre { type nat hook prerouting priority -100; policy accept; %s; }\nchain out { type nat hook output priority -100; policy accept; %s; }\n}\n",
			svcTable, dnat, dnat)
		if err := n.nft(script); err != nil {
			return err
		}
	}
	return nil
}
