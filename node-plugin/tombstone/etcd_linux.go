package tombstone

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
)

// ClientEtcd is Etcd through the etcd client. It follows the live member
// list, never a fixed one: each member list it reads replaces the voters'
// client URLs it asks first, so swaps that replace every member it was
// told of leave it reaching the members that are.
type ClientEtcd struct {
	// LocalEndpoint is the local member's client URL.
	LocalEndpoint string
	// Cluster returns client URLs of the cluster's members, asked after
	// those the last member list named (the VoterPolicy's
	// status.clientURLs and spec.etcd.endpoints: PolicyEndpoints); the
	// local one is left out of the member list of the removal check.
	Cluster func(ctx context.Context) ([]string, error)
	TLS     *tls.Config
	// Learned, when set, is told each new list of the voters' client URLs
	// (the node plugin records it on the host for the server's start
	// condition).
	Learned func(urls []string)
	// DialOptions, when set, are the etcd client's gRPC dial options (a
	// test's dialer into its network namespaces).
	DialOptions []grpc.DialOption

	mu sync.Mutex
	// known are the voters' client URLs in the last member list read.
	known []string
}

// endpoints are the voters' client URLs of the last member list read, then
// Cluster's, without repeats. Cluster failing is an error only when no
// member list was read yet.
func (c *ClientEtcd) endpoints(ctx context.Context) ([]string, error) {
	c.mu.Lock()
	eps := slices.Clone(c.known)
	c.mu.Unlock()
	more, err := c.Cluster(ctx)
	if err != nil && len(eps) == 0 {
		return nil, err
	}
	for _, u := range more {
		if !slices.Contains(eps, u) {
			eps = append(eps, u)
		}
	}
	return eps, nil
}

// learn keeps the voters' client URLs of a member list, replacing those of
// the last one: a removed member drops out.
func (c *ClientEtcd) learn(members []*etcdserverpb.Member) {
	var urls []string
	for _, m := range members {
		if !m.IsLearner {
			urls = append(urls, m.ClientURLs...)
		}
	}
	if len(urls) == 0 {
		return
	}
	c.mu.Lock()
	changed := !slices.Equal(c.known, urls)
	c.known = urls
	c.mu.Unlock()
	if changed && c.Learned != nil {
		c.Learned(urls)
	}
}

func (c *ClientEtcd) client(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 3 * time.Second, TLS: c.TLS, Logger: zap.NewNop(), DialOptions: c.DialOptions})
}

// Local asks the local member for its own status.
func (c *ClientEtcd) Local(ctx context.Context) (hoststate.Member, error) {
	cli, err := c.client([]string{c.LocalEndpoint})
	if err != nil {
		return hoststate.Member{}, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, err := cli.Status(ctx, c.LocalEndpoint)
	if err != nil {
		return hoststate.Member{}, err
	}
	m := hoststate.Member{ID: FormatID(st.Header.MemberId), ClusterID: FormatID(st.Header.ClusterId)}
	// The name is for people; the member list has it.
	if ml, err := cli.MemberList(ctx, clientv3.WithSerializable()); err == nil {
		for _, mem := range ml.Members {
			if mem.ID == st.Header.MemberId {
				m.Name = mem.Name
			}
		}
	}
	return m, nil
}

// Members lists the members as the other members answer.
func (c *ClientEtcd) Members(ctx context.Context) (string, []string, error) {
	clusterID, names, err := c.MemberNames(ctx)
	if err != nil {
		return "", nil, err
	}
	ids := slices.Sorted(maps.Keys(names))
	return clusterID, ids, nil
}

// MemberNames lists the members as the other members answer
// (linearizable), each ID with its name: empty until the member started
// and published itself.
func (c *ClientEtcd) MemberNames(ctx context.Context) (string, map[string]string, error) {
	all, err := c.endpoints(ctx)
	if err != nil {
		return "", nil, err
	}
	var eps []string
	for _, e := range all {
		if e != c.LocalEndpoint {
			eps = append(eps, e)
		}
	}
	if len(eps) == 0 {
		return "", nil, errors.New("no etcd endpoint besides the local one")
	}
	cli, err := c.client(eps)
	if err != nil {
		return "", nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// Linearizable: a quorum's answer, never a lagging member's.
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("member list: %w", err)
	}
	c.learn(ml.Members)
	names := make(map[string]string, len(ml.Members))
	for _, m := range ml.Members {
		names[FormatID(m.ID)] = m.Name
	}
	return FormatID(ml.Header.ClusterId), names, nil
}

// VoterPeerURLs lists the voters' peer URLs, for the fitness probe.
func (c *ClientEtcd) VoterPeerURLs(ctx context.Context) ([]string, error) {
	eps, err := c.endpoints(ctx)
	if err != nil {
		return nil, err
	}
	cli, err := c.client(eps)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ml, err := cli.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		return nil, err
	}
	c.learn(ml.Members)
	var out []string
	for _, m := range ml.Members {
		if !m.IsLearner {
			out = append(out, m.PeerURLs...)
		}
	}
	return out, nil
}
