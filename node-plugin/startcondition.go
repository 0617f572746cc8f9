package nodeplugin

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"k8s.io/utils/clock"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/atomicfile"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/node-plugin/tombstone"
)

// StartConditionCommand is the subcommand the server unit's start
// condition runs: `holdfast-node start-condition`.
const StartConditionCommand = "start-condition"

// HostBinary is where the node plugin copies its own binary under
// --host-dir, for the server unit's start condition to run on the host
// (before any pod runs, at boot).
const HostBinary = "bin/holdfast-node"

// StartConditionMain is `holdfast-node start-condition`, the server unit's
// ExecCondition that the node plugin installs (actuator.StartDropIn). A host
// that was a member (a recorded member, no tombstone yet) is judged first
// as the tombstone watcher judges it, from the host alone: the member list
// as the voters last recorded (hoststate.EndpointsFile) answer it; a list of
// the same cluster without the member writes the tombstone. Then the host
// files decide (hoststate.ServerAllowed, the exit codes of `role-is`). No
// answer writes nothing: with every member down at once (a cold start of
// the whole plant) the servers must start to form their quorum, and a
// removed member is refused by the others and writes its own tombstone.
func StartConditionMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet(StartConditionCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	fs.StringVar(&o.HostDir, "host-dir", hoststate.DefaultDir, "the node plugin's host state directory")
	fs.StringVar(&o.MemberDataDir, "member-data-dir", holdfastv1.DefaultMemberDataDirSystemd, "the etcd member's data directory")
	fs.StringVar(&o.ServerTombstone, "server-tombstone", "", "the server's own tombstone file (default: "+hoststate.DefaultServerTombstone+" under --member-data-dir, k3s's)")
	fs.StringVar(&o.EtcdLocal, "etcd-local-endpoint", "https://127.0.0.1:2379", "the local etcd member's client URL")
	fs.StringVar(&o.EtcdCA, "etcd-ca", "", "CA file for the etcd members' client URLs")
	fs.StringVar(&o.EtcdCert, "etcd-cert", "", "client certificate file for etcd")
	fs.StringVar(&o.EtcdKey, "etcd-key", "", "client key file for etcd")
	wait := fs.Duration("timeout", 20*time.Second, "how long the member list is asked for")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		return hoststate.RoleIsError
	}
	state := hoststate.State{Dir: o.HostDir, MemberDataDir: o.MemberDataDir, ServerTombstone: o.ServerTombstone}
	gone, err := judgeMember(state, o, *wait)
	if err != nil {
		// Unreadable host state fails the start, as role-is does.
		fmt.Fprintf(stderr, "holdfast-node %s: %v\n", StartConditionCommand, err)
		return hoststate.RoleIsError
	}
	if gone != "" {
		fmt.Fprintf(stderr, "holdfast-node %s: no: %s\n", StartConditionCommand, gone)
		return hoststate.RoleIsNo
	}
	return hoststate.RoleIsMain([]string{"--host-dir=" + o.HostDir, "--member-data-dir=" + o.MemberDataDir,
		"--server-tombstone=" + o.ServerTombstone, holdfastv1.RoleServer}, stderr)
}

// judgeMember runs the tombstone check from the host's record of the
// voters, when the host records a member. The node plugin may hold the
// host's member lock meanwhile (its own check, or a finish-demote waiting
// on systemd for this very start): then the member list is judged without
// it and nothing is written, and a removal found is returned.
func judgeMember(state hoststate.State, o Options, wait time.Duration) (string, error) {
	m, err := state.Member()
	if err != nil || m == nil {
		return "", err
	}
	tlsCfg, err := etcdTLS(o)
	if err != nil {
		return "", err
	}
	etcd := &tombstone.ClientEtcd{LocalEndpoint: o.EtcdLocal, TLS: tlsCfg,
		Cluster: func(context.Context) ([]string, error) { return state.MemberEndpoints() }}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	unlock, ok, err := state.TryLock()
	if err != nil {
		return "", err
	}
	if !ok {
		return tombstone.Gone(ctx, etcd, *m), nil
	}
	defer unlock()
	_, err = (&tombstone.Watcher{State: state, Clock: clock.RealClock{}, Etcd: etcd}).CheckLocked(ctx)
	return "", err
}

// StartConditionArgs is the server unit's ExecCondition (and the etcd
// static pod's init container): the host copy of this binary (HostBinary
// under o.HostDir) judging with the node plugin's settings o.
func StartConditionArgs(o *Options) []string {
	args := []string{filepath.Join(o.HostDir, HostBinary), StartConditionCommand, "--host-dir=" + o.HostDir,
		"--member-data-dir=" + o.MemberDataDir, "--etcd-local-endpoint=" + o.EtcdLocal}
	for _, f := range []struct{ name, v string }{{"server-tombstone", o.ServerTombstone}, {"etcd-ca", o.EtcdCA}, {"etcd-cert", o.EtcdCert}, {"etcd-key", o.EtcdKey}} {
		if f.v != "" {
			args = append(args, "--"+f.name+"="+f.v)
		}
	}
	return args
}

// installHostBinary copies this binary to HostBinary under the host
// directory (atomically: a start condition running meanwhile keeps the
// copy it opened).
func installHostBinary(hostDir string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	data, err := os.ReadFile(self)
	if err != nil {
		return err
	}
	dir := filepath.Join(hostDir, filepath.Dir(HostBinary))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if old, err := os.ReadFile(filepath.Join(hostDir, HostBinary)); err == nil && string(old) == string(data) {
		return nil
	}
	return atomicfile.Write(dir, filepath.Base(HostBinary), data, 0o755)
}
