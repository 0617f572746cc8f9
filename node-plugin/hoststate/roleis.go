package hoststate

import (
	"flag"
	"fmt"
	"io"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// Exit codes of RoleIs, chosen for systemd's ExecCondition: 0 runs the unit,
// 1..254 skip it without marking it failed, 255 fails it.
const (
	RoleIsYes   = 0
	RoleIsNo    = 1
	RoleIsError = 255
)

// RoleIsMain is `holdfast-node role-is server|agent`, for an ExecCondition
// line in the server and agent units:
//
//	ExecCondition=/usr/local/bin/holdfast-node role-is server
//
// It reads only host files, so it holds with the apiserver and the node
// plugin both away. `server` answers yes only when ServerAllowed does;
// `agent` answers yes unless the role file says server (the agent unit is
// never blocked on a host holdfast never switched). Unreadable host state is
// an error (255), which fails the start rather than skipping it.
func RoleIsMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("role-is", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("host-dir", DefaultDir, "the node plugin's host state directory")
	data := fs.String("member-data-dir", holdfastv1.DefaultMemberDataDirSystemd, "the etcd member's data directory")
	serverTombstone := fs.String("server-tombstone", "", "the server's own tombstone file (default: "+DefaultServerTombstone+" under --member-data-dir, k3s's)")
	if err := fs.Parse(args); err != nil {
		return RoleIsError
	}
	if fs.NArg() != 1 || (fs.Arg(0) != holdfastv1.RoleServer && fs.Arg(0) != holdfastv1.RoleAgent) {
		fmt.Fprintln(stderr, "usage: holdfast-node role-is server|agent [--host-dir DIR] [--member-data-dir DIR] [--server-tombstone FILE]")
		return RoleIsError
	}
	s := State{Dir: *dir, MemberDataDir: *data, ServerTombstone: *serverTombstone}
	if fs.Arg(0) == holdfastv1.RoleAgent {
		role, err := s.Role()
		if err != nil {
			fmt.Fprintf(stderr, "holdfast-node role-is agent: %v\n", err)
			return RoleIsError
		}
		if role == holdfastv1.RoleServer {
			fmt.Fprintln(stderr, "holdfast-node role-is agent: no: the role file says server")
			return RoleIsNo
		}
		return RoleIsYes
	}
	ok, why, err := s.ServerAllowed()
	if err != nil {
		fmt.Fprintf(stderr, "holdfast-node role-is server: %v\n", err)
		return RoleIsError
	}
	if !ok {
		fmt.Fprintf(stderr, "holdfast-node role-is server: no: %s\n", why)
		return RoleIsNo
	}
	return RoleIsYes
}
