package tombstone

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
)

// ClientEtcd is Etcd through the etcd client.
type ClientEtcd struct {
	// LocalEndpoint is the local member's client URL.
	LocalEndpoint string
	// Cluster returns the client URLs of the cluster's members (the
	// VoterPolicy's etcd endpoints); the local one is left out.
	Cluster func(ctx context.Context) ([]string, error)
	TLS     *tls.Config
}

func (c *ClientEtcd) client(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 3 * time.Second, TLS: c.TLS, Logger: zap.NewNop()})
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
	all, err := c.Cluster(ctx)
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
	ids := make([]string, 0, len(ml.Members))
	for _, m := range ml.Members {
		ids = append(ids, FormatID(m.ID))
	}
	return FormatID(ml.Header.ClusterId), ids, nil
}

// VoterPeerURLs lists the voters' peer URLs, for the fitness probe.
func (c *ClientEtcd) VoterPeerURLs(ctx context.Context) ([]string, error) {
	eps, err := c.Cluster(ctx)
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
	var out []string
	for _, m := range ml.Members {
		if !m.IsLearner {
			out = append(out, m.PeerURLs...)
		}
	}
	return out, nil
}
