// Package etcdproc runs real etcd member processes on loopback for tests:
// the etcd binary make k8s-bin builds (bin/k8s/<version>/etcd).
package etcdproc

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Member is one member's addresses.
type Member struct {
	Name      string
	ClientURL string
	PeerURL   string
}

// NewMember allocates two free loopback ports for a member.
func NewMember(name string) (Member, error) {
	c, err := freePort()
	if err != nil {
		return Member{}, err
	}
	p, err := freePort()
	if err != nil {
		return Member{}, err
	}
	return Member{Name: name, ClientURL: fmt.Sprintf("http://127.0.0.1:%d", c), PeerURL: fmt.Sprintf("http://127.0.0.1:%d", p)}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// InitialCluster is etcd's --initial-cluster for members.
func InitialCluster(members ...Member) string {
	var parts []string
	for _, m := range members {
		parts = append(parts, m.Name+"="+m.PeerURL)
	}
	return strings.Join(parts, ",")
}

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
		"--heartbeat-interval=50", "--election-timeout=500",
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
	_ = p.Cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
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
