package scenario

import (
	"context"
	"errors"
	"fmt"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/holdfast-io/holdfast/test/cluster"
)

// GrantorLeader is the units-role replica holding the grantor's election,
// and the others.
func (w *World) GrantorLeader(ctx context.Context) (leader *cluster.Controller, others []*cluster.Controller, err error) {
	var el coordinationv1.Lease
	if err := w.Client.Get(ctx, client.ObjectKey{Namespace: cluster.HoldfastNamespace, Name: GrantorElection}, &el); err != nil {
		return nil, nil, err
	}
	holder := ""
	if el.Spec.HolderIdentity != nil {
		holder = *el.Spec.HolderIdentity
	}
	for _, c := range w.ControllerList() {
		if holder != "" && strings.HasPrefix(holder, c.Identity+"_") {
			leader = c
		} else {
			others = append(others, c)
		}
	}
	if leader == nil {
		return nil, nil, fmt.Errorf("no units-role replica holds %s (holder %q)", GrantorElection, holder)
	}
	return leader, others, nil
}

// IsolateController drops everything between a units-role replica and
// peers (or only TCP to and from tcpPort of theirs), both ways: on its
// control host, or, installed by the chart, what its pod's node forwards
// for it. Everyone else still reaches it. It returns the heal.
func (w *World) IsolateController(ctx context.Context, c *cluster.Controller, peers []string, tcpPort int) (func() error, error) {
	if c.Host != nil {
		if err := c.Host.DropPeers(peers, tcpPort); err != nil {
			return nil, err
		}
		return c.Host.Heal, nil
	}
	var p corev1.Pod
	if err := w.Client.Get(ctx, client.ObjectKey{Namespace: cluster.HoldfastNamespace, Name: c.Identity}, &p); err != nil {
		return nil, err
	}
	n, ok := w.Nodes[p.Spec.NodeName]
	if !ok || p.Status.PodIP == "" {
		return nil, fmt.Errorf("pod %s has no node or address yet", p.Name)
	}
	if err := n.DropPodPeers(p.Status.PodIP, peers, tcpPort); err != nil {
		return nil, err
	}
	return n.Heal, nil
}

// DropLeasePort keeps the grantor from reaching TCP port (the runtimes'
// lease port) on nodes, wherever its replicas run: each node drops that port
// inbound on its control link, and each units-role replica is isolated from
// those nodes' addresses at that port. Installed by the chart, a replica may
// run on one of those nodes itself, and what it sends to its own node's
// address never crosses the control link. It returns the heal, which may
// be called again.
func (w *World) DropLeasePort(ctx context.Context, nodes []string, port int) (func() error, error) {
	var heals []func() error
	heal := func() error {
		var errs []error
		for _, h := range heals {
			errs = append(errs, h())
		}
		return errors.Join(errs...)
	}
	var addrs []string
	for _, name := range nodes {
		n, ok := w.Nodes[name]
		if !ok {
			return heal, fmt.Errorf("no node %s", name)
		}
		heals = append(heals, n.Heal)
		if err := n.Drop(cluster.Inbound, port); err != nil {
			return heal, err
		}
		addrs = append(addrs, n.IP)
	}
	for _, c := range w.ControllerList() {
		h, err := w.IsolateController(ctx, c, addrs, port)
		if err != nil {
			return heal, err
		}
		heals = append(heals, h)
	}
	return heal, nil
}

// GrantorLeaderPlace says where the grantor's leader runs: its control host
// in the hub, or, installed by the chart, its pod's node (a fault of that
// node takes the leader too, and the next leader holds off re-binds for the
// stand-down + lease + margin).
func (w *World) GrantorLeaderPlace(ctx context.Context) string {
	leader, _, err := w.GrantorLeader(ctx)
	if err != nil {
		return err.Error()
	}
	if leader.Host != nil {
		return leader.Identity + " on its control host"
	}
	var p corev1.Pod
	if err := w.Client.Get(ctx, client.ObjectKey{Namespace: cluster.HoldfastNamespace, Name: leader.Identity}, &p); err != nil {
		return err.Error()
	}
	return leader.Identity + " on node " + p.Spec.NodeName
}
