package webhook

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/apiserver/pkg/authentication/serviceaccount"
)

// DefaultNamespace is the release namespace holdfast's service accounts live
// in unless the chart says otherwise.
const DefaultNamespace = "holdfast-system"

// ClusterAdminGroup is who may confirm a fence, ask for a manual failover or
// a manual swap unless configured otherwise.
const ClusterAdminGroup = "system:masters"

// Options say who holdfast's own components are and who may make the
// requests a person makes. Holdfast's components are recognised by their
// service account user names; everyone else is a person or a foreign tool.
type Options struct {
	// Controller, NodePlugin and Scheduler are user names
	// (system:serviceaccount:<ns>:<name>).
	Controller string
	NodePlugin string
	Scheduler  string
	// ConfirmFencedGroups may set holdfast.io/failover-confirm-fenced,
	// FailoverGroups holdfast.io/failover-to, SwapGroups may create a manual
	// VoterSwap. A user in none of them is refused with the groups it needs.
	ConfirmFencedGroups []string
	FailoverGroups      []string
	SwapGroups          []string
	// Audit receives one JSON line per allowed manual failover, fence
	// confirmation and manual swap.
	Audit io.Writer
	// Now is the clock Lease expiry is judged against.
	Now func() time.Time
}

// DefaultOptions are the chart's defaults: the service accounts in
// holdfast-system, cluster admins only for the person's requests, audit to
// stdout.
func DefaultOptions() Options {
	return Options{
		Controller:          serviceaccount.MakeUsername(DefaultNamespace, "holdfast-controller"),
		NodePlugin:          serviceaccount.MakeUsername(DefaultNamespace, "holdfast-node"),
		Scheduler:           serviceaccount.MakeUsername(DefaultNamespace, "holdfast-scheduler"),
		ConfirmFencedGroups: []string{ClusterAdminGroup},
		FailoverGroups:      []string{ClusterAdminGroup},
		SwapGroups:          []string{ClusterAdminGroup},
		Audit:               os.Stdout,
		Now:                 time.Now,
	}
}

// AddFlags binds the options to command-line flags. Service accounts are
// given as <namespace>/<name>, groups as comma-separated lists.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.Var(saFlag{&o.Controller}, "controller-service-account", "service account of holdfast-controller, <namespace>/<name>")
	fs.Var(saFlag{&o.NodePlugin}, "node-plugin-service-account", "service account of holdfast-node, <namespace>/<name>")
	fs.Var(saFlag{&o.Scheduler}, "scheduler-service-account", "service account of holdfast-scheduler, <namespace>/<name>")
	fs.Var(groupsFlag{&o.ConfirmFencedGroups}, "confirm-fenced-groups", "groups that may set holdfast.io/failover-confirm-fenced (comma separated)")
	fs.Var(groupsFlag{&o.FailoverGroups}, "failover-groups", "groups that may set holdfast.io/failover-to (comma separated)")
	fs.Var(groupsFlag{&o.SwapGroups}, "swap-groups", "groups that may create a manual VoterSwap (comma separated)")
}

type saFlag struct{ user *string }

func (f saFlag) String() string {
	if f.user == nil {
		return ""
	}
	if ns, name, err := serviceaccount.SplitUsername(*f.user); err == nil {
		return ns + "/" + name
	}
	return *f.user
}

func (f saFlag) Set(v string) error {
	ns, name, ok := strings.Cut(v, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("%q: want <namespace>/<name>", v)
	}
	*f.user = serviceaccount.MakeUsername(ns, name)
	return nil
}

type groupsFlag struct{ groups *[]string }

func (f groupsFlag) String() string {
	if f.groups == nil {
		return ""
	}
	return strings.Join(*f.groups, ",")
}

func (f groupsFlag) Set(v string) error {
	var out []string
	for _, g := range strings.Split(v, ",") {
		if g = strings.TrimSpace(g); g != "" {
			out = append(out, g)
		}
	}
	if len(out) == 0 {
		return fmt.Errorf("%q: name at least one group", v)
	}
	*f.groups = out
	return nil
}

// inAnyGroup reports whether the user is in one of the allowed groups.
func inAnyGroup(userGroups, allowed []string) bool {
	for _, g := range userGroups {
		if slices.Contains(allowed, g) {
			return true
		}
	}
	return false
}
