package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/test/dbusdouble"
)

// The etcd roles a node can have at start (NodeSpec.Etcd).
const (
	// EtcdVoter: the node's server unit runs a member of the control
	// plane's etcd from the start (the first voters bootstrap it).
	EtcdVoter = "voter"
	// EtcdStandby: the node can become a member (its server unit is
	// installed, its agent unit runs), as holdfast promotes it.
	EtcdStandby = "standby"
)

// The host units on every node that can hold a member, as on a k3s host.
const (
	ServerUnit = "k3s.service"
	AgentUnit  = "k3s-agent.service"
)

// Member ports on a node's own address.
const (
	EtcdClientPort = 2379
	EtcdPeerPort   = 2380
)

// LocalEtcdURL is a node's local member on its own loopback (inside the
// node's network namespace), where holdfast-node reaches it.
var LocalEtcdURL = fmt.Sprintf("http://127.0.0.1:%d", EtcdClientPort)

// Host is the host half of a node that can hold an etcd member: its systemd
// (test/dbusdouble's Manager on a private dbus-daemon, since PID 1 is not
// systemd on these machines) whose server unit runs a real etcd member in
// the node's network namespace, configured from the drop-ins holdfast-node
// writes, and gated by holdfast-node's own `role-is` ExecCondition. On a
// node with NodeSpec.StaticPods it is a kubeadm host instead (kubeadm.go):
// its kubelet runs the member as the etcd static pod, no systemd. The
// apiserver uses these members as its etcd, so a voter swap on this cluster
// changes the control plane's own quorum.
type Host struct {
	Node string
	// Dir is the node's host directory (Node.HostDir): holdfast/
	// (holdfast-node's host state), systemd/ (drop-ins) and db/db (the
	// member data), mounted into the holdfast-node pod.
	Dir   string
	State hoststate.State
	// SystemdDir is where the server unit's drop-ins are read from.
	SystemdDir string
	Bus        *dbusdouble.Bus
	Systemd    *dbusdouble.Manager
	// ClientURL and PeerURL are the member's, on the node's address.
	ClientURL, PeerURL string
	// Kubeadm is a kubeadm host's layout (NodeSpec.StaticPods), nil on a
	// systemd host (Bus and Systemd nil then).
	Kubeadm *Kubeadm

	n       *Node
	initial string // the bootstrap cluster, for a first voter only

	// disk holds the member data (db/): a block device of the node's own.
	disk *disk

	mu      sync.Mutex
	proc    *dbusdouble.ExecProcess
	starts  int
	blocked bool
}

// EtcdEndpoints are the client URLs of every node that can hold a member
// (the apiserver's --etcd-servers and VoterPolicy's endpoints), or the
// hub's members when no node holds one.
func (c *Cluster) EtcdEndpoints() []string {
	var out []string
	for _, name := range c.NodeNames {
		if h := c.Nodes[name].Host; h != nil {
			out = append(out, h.ClientURL)
		}
	}
	if len(out) > 0 {
		return out
	}
	for _, p := range c.procs {
		if strings.HasPrefix(p.Name, "etcd-") {
			var i int
			_, _ = fmt.Sscanf(p.Name, "etcd-%d", &i)
			out = append(out, etcdClientURL(i))
		}
	}
	return out
}

// EtcdClient is an etcd client of endpoints that dials inside the hub.
func (c *Cluster) EtcdClient(endpoints ...string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: c.EtcdDialOptions()})
}

// EtcdDialOptions make an etcd client dial inside the hub.
func (c *Cluster) EtcdDialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		return c.Dial(ctx, "tcp", addr)
	})}
}

// startEtcdHosts gives every node whose spec names an etcd role its host
// half and starts the first voters' members (on a kubeadm host: writes
// their manifests, which its kubelet runs), before the apiserver.
func (c *Cluster) startEtcdHosts(specs []NodeSpec) error {
	var voters []string
	for _, s := range specs {
		if s.Etcd == EtcdVoter {
			voters = append(voters, s.Name+"="+peerURL(c.Nodes[s.Name].IP))
		}
	}
	if len(voters) == 0 {
		return nil
	}
	roleIs, err := c.Binary("cmd/holdfast-node")
	if err != nil {
		return err
	}
	for _, s := range specs {
		if s.Etcd == "" {
			continue
		}
		n := c.Nodes[s.Name]
		if err := n.network(); err != nil {
			return err
		}
		h := &Host{Node: n.Name, Dir: n.HostDir(), n: n,
			ClientURL: fmt.Sprintf("http://%s:%d", n.IP, EtcdClientPort), PeerURL: peerURL(n.IP)}
		h.State = hoststate.State{Dir: filepath.Join(h.Dir, "holdfast"), MemberDataDir: filepath.Join(h.Dir, "db", "db")}
		h.SystemdDir = filepath.Join(h.Dir, "systemd")
		voter := s.Etcd == EtcdVoter
		if voter {
			h.initial = strings.Join(voters, ",")
		}
		start := h.start
		if s.StaticPods {
			start = h.startKubeadm
		}
		if err := start(roleIs, voter); err != nil {
			return errors.Join(fmt.Errorf("node %s: %w", n.Name, err), h.close())
		}
		n.Host = h
	}
	c.logf("etcd members on %s", strings.Join(voters, ","))
	return nil
}

// staticPodVoters says whether the first voters are static pods: their
// kubelets run before the apiserver, as kubeadm init's does.
func staticPodVoters(specs []NodeSpec) bool {
	for _, s := range specs {
		if s.Etcd == EtcdVoter && s.StaticPods {
			return true
		}
	}
	return false
}

// waitEtcd waits until the nodes' members serve, when any node holds one.
func (c *Cluster) waitEtcd(ctx context.Context) error {
	if !slices.ContainsFunc(c.NodeNames, func(name string) bool { return c.Nodes[name].Host != nil }) {
		return nil
	}
	cli, err := c.EtcdClient(c.EtcdEndpoints()...)
	if err != nil {
		return err
	}
	defer cli.Close()
	return Poll(ctx, 2*time.Minute, func() (bool, error) {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := cli.Get(rctx, "health")
		return err == nil, nil
	})
}

func peerURL(ip string) string { return fmt.Sprintf("http://%s:%d", ip, EtcdPeerPort) }

// startDisk makes the host's directories and mounts the member's disk.
func (h *Host) startDisk(dirs ...string) error {
	for _, d := range append(dirs, h.State.Dir, filepath.Dir(h.State.MemberDataDir)) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	var err error
	if h.disk, err = newDisk(filepath.Join(h.n.c.Dir, "disks", h.Node+".img"), filepath.Dir(h.State.MemberDataDir)); err != nil {
		return fmt.Errorf("member disk: %w", err)
	}
	return nil
}

// startKubeadm provisions a kubeadm host (kubeadm.go) and, for a first
// voter, writes its etcd manifest: the node's kubelet runs it once the
// node starts.
func (h *Host) startKubeadm(_ string, voter bool) error {
	if err := h.startDisk(); err != nil {
		return err
	}
	k, err := h.n.c.ProvisionKubeadm(h.n)
	if err != nil {
		return err
	}
	h.Kubeadm = &k
	if voter {
		return h.bootstrapEtcdManifest(k)
	}
	return nil
}

func (h *Host) start(roleIs string, voter bool) error {
	busDir := filepath.Join(h.Dir, "dbus")
	if err := h.startDisk(busDir, h.SystemdDir); err != nil {
		return err
	}
	var err error
	if h.Bus, err = dbusdouble.StartBus(busDir); err != nil {
		return fmt.Errorf("dbus-daemon: %w", err)
	}
	cond := func(role string) []string {
		return []string{roleIs, "role-is", "--host-dir", h.State.Dir, "--member-data-dir", h.State.MemberDataDir, role}
	}
	// holdfast-node's drop-ins name paths inside the node (its start
	// condition runs the copy of itself it put in the host directory).
	if h.Systemd, err = dbusdouble.Serve(h.Bus, dbusdouble.Config{DropInDir: h.SystemdDir, DropInCommand: h.n.enter, Units: []dbusdouble.Unit{
		{Name: ServerUnit, ExecCondition: cond("server"), RestartAlways: true, RestartSec: time.Second,
			Enabled: voter, Start: h.startEtcd},
		{Name: AgentUnit, ExecCondition: cond("agent"), Enabled: !voter, Active: !voter},
	}}); err != nil {
		h.Bus.Close()
		return fmt.Errorf("systemd double: %w", err)
	}
	if voter {
		if res, err := h.Systemd.StartDirect(ServerUnit); err != nil || res != "done" {
			return fmt.Errorf("starting %s: %s %v", ServerUnit, res, err)
		}
	}
	return nil
}

// startEtcd is the server unit's ExecStart: an etcd member in the node's
// network namespace, joining what the join drop-in names (a first voter
// bootstraps the cluster).
func (h *Host) startEtcd(_ context.Context, env map[string]string) (dbusdouble.Process, error) {
	join, state := env[actuator.EnvJoin], env[actuator.EnvClusterState]
	if join == "" {
		if h.initial == "" {
			return nil, errors.New("no join target in the drop-ins and not a first voter")
		}
		join, state = h.initial, "new"
	}
	log, err := os.OpenFile(filepath.Join(h.n.c.Dir, "logs", "etcd-"+h.Node+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	argv := inNetns(h.n.Netns, filepath.Join(h.n.c.bins.K8s, "etcd"),
		"--name="+h.Node,
		"--data-dir="+h.State.MemberDataDir,
		// Also on the node's loopback, as a k3s server's member: holdfast-node
		// reaches its local member there on every node alike.
		"--listen-client-urls="+h.ClientURL+","+LocalEtcdURL, "--advertise-client-urls="+h.ClientURL,
		"--listen-peer-urls="+h.PeerURL, "--initial-advertise-peer-urls="+h.PeerURL,
		"--initial-cluster="+join, "--initial-cluster-state="+state,
		"--initial-cluster-token=hfe-"+h.n.c.ID,
		// Two busy cores: etcd's defaults (100/1000 ms) keep a leader.
		"--heartbeat-interval=100", "--election-timeout=1000",
		"--log-level=warn", "--unsafe-no-fsync")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p, err := dbusdouble.StartExec(cmd)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.proc = p
	h.starts++
	h.mu.Unlock()
	return p, nil
}

// MemberPID is the running member's process ID (0 when none runs).
func (h *Host) MemberPID() int {
	if h.Kubeadm != nil {
		return h.staticPodMemberPID()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proc == nil {
		return 0
	}
	select {
	case <-h.proc.Exited():
		return 0
	default:
	}
	return h.proc.Cmd.Process.Pid
}

// PauseMember SIGSTOPs the member (the node and its kubelet stay up) and
// returns the resume.
func (h *Host) PauseMember() (func(), error) {
	pid := h.MemberPID()
	if pid == 0 {
		return nil, fmt.Errorf("no etcd member runs on %s", h.Node)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return nil, err
	}
	return func() { _ = syscall.Kill(pid, syscall.SIGCONT) }, nil
}

// BlockPeers cuts the node off from the other members' addresses (a
// blackhole route per address in the node's namespace: no nftables on
// these machines), so a member started here can reach no peer and no peer
// reaches it; the apiserver and the hub stay reachable. It returns the
// undo.
func (h *Host) BlockPeers(others ...string) (func() error, error) {
	var added []string
	undo := func() error {
		var errs []error
		for _, ip := range added {
			errs = append(errs, run("ip", "-n", h.n.Netns, "route", "del", "blackhole", ip+"/32"))
		}
		return errors.Join(errs...)
	}
	for _, ip := range others {
		if err := run("ip", "-n", h.n.Netns, "route", "add", "blackhole", ip+"/32"); err != nil {
			return nil, errors.Join(err, undo())
		}
		added = append(added, ip)
	}
	return undo, nil
}

// DataMovedAside reports whether the member's data was moved aside (a
// finished demotion or rollback keeps one copy).
func (h *Host) DataMovedAside() bool {
	_, err := os.Stat(filepath.Join(h.State.MovedAside(), "member"))
	return err == nil
}

// SlowDisk limits the writes the node's pods make to the member's disk to
// iops per second, as a failing or saturated disk: every O_DSYNC write
// holdfast-node's fsync probe makes there waits for its turn. The limit is
// set in every cgroup of the node now (a container started afterwards is
// not limited); the member, in this process's cgroup and run with
// --unsafe-no-fsync, is not slowed (blkioCgroups). It returns the undo.
func (h *Host) SlowDisk(iops int) (func() error, error) {
	if iops <= 0 {
		return nil, fmt.Errorf("SlowDisk(%d): the limit must be positive", iops)
	}
	dirs, err := blkioCgroups(h.n.cgroupRoot)
	if err != nil {
		return nil, err
	}
	if err := h.disk.throttle(iops, dirs...); err != nil {
		return nil, errors.Join(err, h.disk.throttle(0))
	}
	return func() error { return h.disk.throttle(0) }, nil
}

func (h *Host) close() error {
	if h.Systemd != nil {
		h.Systemd.Close()
	}
	if h.Bus != nil {
		h.Bus.Close()
	}
	if h.disk != nil {
		return h.disk.close()
	}
	return nil
}

// Stopping reports whether Stop has begun (a supervisor then restarts
// nothing).
func (c *Cluster) Stopping() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopped
}
