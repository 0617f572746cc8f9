// Package etcdproc runs real etcd member processes on loopback for tests:
// the etcd binary make k8s-bin builds (bin/k8s/<version>/etcd).
package etcdproc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/holdfast-io/holdfast/test/ports"
	"github.com/holdfast-io/holdfast/test/proc"
)

// Member is one member's addresses.
type Member struct {
	Name      string
	ClientURL string
	PeerURL   string
}

// NewMembers allocates a client and a peer port on loopback for each name
// (package ports: distinct, and outside the ephemeral range, so a member
// restarted mid-test can always rebind them).
func NewMembers(names ...string) ([]Member, error) {
	ps, err := ports.Loopback(2 * len(names))
	if err != nil {
		return nil, err
	}
	var out []Member
	for i, n := range names {
		out = append(out, Member{Name: n, ClientURL: fmt.Sprintf("http://127.0.0.1:%d", ps[2*i]),
			PeerURL: fmt.Sprintf("http://127.0.0.1:%d", ps[2*i+1])})
	}
	return out, nil
}

// InitialCluster is etcd's --initial-cluster for members.
func InitialCluster(members ...Member) string {
	var parts []string
	for _, m := range members {
		parts = append(parts, m.Name+"="+m.PeerURL)
	}
	return strings.Join(parts, ",")
}

// HeartbeatInterval and ElectionTimeout are etcd's raft timing for test
// members: etcd's default heartbeat, and an election timeout twice etcd's
// default. Tests share two cores with an apiserver, controllers and other
// packages' tests; at load 50-60 a member can go unscheduled for longer
// than a 500 ms election timeout, its followers then call an election, and
// an election drops the proposals in flight (a member removal, a
// promotion) for the test or the controller to retry. The price: a lost
// leader costs 2-4 s (raft randomises the timeout between one and two of
// these) before a new one is elected; tests that pause or stop a leader
// wait that long.
const (
	HeartbeatInterval = 100 * time.Millisecond
	ElectionTimeout   = 2 * time.Second
)

// Command is the etcd command line for m with its data in dataDir, joining
// initialCluster in clusterState (new or existing).
func Command(bin string, m Member, dataDir, initialCluster, clusterState string) *exec.Cmd {
	cmd := exec.Command(bin,
		"--name="+m.Name,
		"--data-dir="+dataDir,
		"--listen-client-urls="+m.ClientURL, "--advertise-client-urls="+m.ClientURL,
		"--listen-peer-urls="+m.PeerURL, "--initial-advertise-peer-urls="+m.PeerURL,
		"--initial-cluster="+initialCluster, "--initial-cluster-state="+clusterState,
		"--initial-cluster-token=holdfast-test",
		"--heartbeat-interval="+fmt.Sprint(HeartbeatInterval.Milliseconds()),
		"--election-timeout="+fmt.Sprint(ElectionTimeout.Milliseconds()),
		"--log-level=warn", "--unsafe-no-fsync",
	)
	// etcd logs a lot; keep it beside its data for a failing test to show.
	if err := os.MkdirAll(filepath.Dir(dataDir), 0o755); err == nil {
		if f, err := os.OpenFile(dataDir+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			cmd.Stdout, cmd.Stderr = f, f
		}
	}
	return cmd
}

// Proc is a running member.
type Proc struct {
	Member
	Cmd  *exec.Cmd
	done chan struct{}
}

// Start starts a member of a new cluster of members, with its data under dir.
func Start(bin, dir string, m Member, members ...Member) (*Proc, error) {
	cmd := Command(bin, m, filepath.Join(dir, m.Name), InitialCluster(members...), "new")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proc{Member: m, Cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// Stop ends the member and waits for it.
func (p *Proc) Stop() {
	proc.Stop(p.Cmd.Process, p.done, 10*time.Second)
}

// Client connects to the members' client URLs.
func Client(members ...Member) (*clientv3.Client, error) {
	var eps []string
	for _, m := range members {
		eps = append(eps, m.ClientURL)
	}
	return clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

// WaitHealthy polls until a linearizable read through the client succeeds.
func WaitHealthy(ctx context.Context, cli *clientv3.Client) error {
	for {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cli.Get(c, "health")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd not healthy: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
