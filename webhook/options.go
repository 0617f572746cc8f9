package webhook

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"

	"github.com/holdfast-io/holdfast/policy"
)

// DefaultNamespace is the release namespace holdfast's service accounts live
// in unless the chart says otherwise.
const DefaultNamespace = "holdfast-system"

// ChartVotersUser is the voters role's account as the chart names it
// (--voters-service-account); the configuration's matchConditions name it.
var ChartVotersUser = serviceaccount.MakeUsername(DefaultNamespace, "holdfast-controller-voters")

// ClusterAdminGroup is who may confirm a fence, ask for a manual failover or
// a manual swap unless configured otherwise.
const ClusterAdminGroup = "system:masters"

// Options say who holdfast's own components are and who may make the
// requests a person makes. Holdfast's components are recognised by their
// service account user names; everyone else is a person or a foreign tool.
type Options struct {
	// Controller, NodePlugin and Scheduler are user names
	// (system:serviceaccount:<ns>:<name>). Controller is holdfast-controller
	// --role=units: the grantor, the only writer of a Unit's epoch and
	// leaseEstablishedBy.
	Controller string
	// Voters is holdfast-controller --role=voters: the only writer of a
	// Node's desired role and role steps, of the swap Lease, and of
	// Automatic VoterSwaps. Empty means the Controller account (one account
	// runs both roles, as before the split); set, the Controller account
	// loses these rights and Voters gets none of the units role's.
	Voters     string
	NodePlugin string
	Scheduler  string
	// ConfirmFencedGroups may set holdfast.io/failover-confirm-fenced,
	// FailoverGroups holdfast.io/failover-to, SwapGroups may create a manual
	// VoterSwap. A user in none of them is refused with the groups it needs.
	ConfirmFencedGroups []string
	FailoverGroups      []string
	SwapGroups          []string
	// ReportRepairGroups may remove a node report (break-glass), with a
	// reason in holdfast.io/report-repair; they may never write one.
	ReportRepairGroups []string
	// Audit receives one JSON line per allowed manual failover, fence
	// confirmation and manual swap.
	Audit io.Writer
	// Now is the clock Lease expiry is judged against.
	Now func() time.Time
	// Grantor are the installed grantor's timings (holdfast-controller
	// --role=units is given the same flags): a Failover unit's lease may
	// not be below the floor they make (docs/design.md §3 L14).
	Grantor policy.GrantorTimings
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
		ReportRepairGroups:  []string{ClusterAdminGroup},
		Audit:               os.Stdout,
		Now:                 time.Now,
		Grantor:             policy.DefaultGrantorTimings(),
	}
}

// AddFlags binds the options to command-line flags. Service accounts are
// given as <namespace>/<name>, groups as comma-separated lists.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.Var(saFlag{&o.Controller}, "controller-service-account", "service account of holdfast-controller, <namespace>/<name>")
	fs.Var(saFlag{&o.Voters}, "voters-service-account", "service account of holdfast-controller --role=voters, <namespace>/<name>; "+
		"it alone may set a Node's desired role and role steps, hold the swap Lease and create Automatic VoterSwaps. "+
		"Empty: the --controller-service-account account, which then keeps these rights (one account for both roles); "+
		"set, that account loses them, and neither account holds the other's")
	fs.Var(saFlag{&o.NodePlugin}, "node-plugin-service-account", "service account of holdfast-node, <namespace>/<name>")
	fs.Var(saFlag{&o.Scheduler}, "scheduler-service-account", "service account of holdfast-scheduler, <namespace>/<name>")
	fs.Var(groupsFlag{&o.ConfirmFencedGroups}, "confirm-fenced-groups", "groups that may set holdfast.io/failover-confirm-fenced (comma separated)")
	fs.Var(groupsFlag{&o.FailoverGroups}, "failover-groups", "groups that may set holdfast.io/failover-to (comma separated)")
	fs.Var(groupsFlag{&o.SwapGroups}, "swap-groups", "groups that may create a manual VoterSwap (comma separated)")
	fs.Var(groupsFlag{&o.ReportRepairGroups}, "report-repair-groups", "groups that may remove a node report (holdfast.io/actuator, provisioned, "+
		"role, fitness, tombstone) with a reason in holdfast.io/report-repair, audited; never write one (comma separated)")
	o.Grantor.AddFlags(fs, func(name string) string {
		return "the installed grantor's --" + name + " (holdfast-controller --role=units is given the same value): " +
			"a Failover unit's lease may not be below the floor the grantor's timings make (docs/design.md §3 L14)"
	})
}

// VotersUser is the user name of holdfast-controller --role=voters: Voters,
// or Controller when no separate account is configured.
func (o *Options) VotersUser() string {
	if o.Voters != "" {
		return o.Voters
	}
	return o.Controller
}

// Validate refuses options that would give one holdfast account another
// component's rights: each account is a distinct user, except that Voters
// may be empty or repeat Controller (one account runs both controller roles,
// as before the split).
func (o *Options) Validate() error {
	var errs field.ErrorList
	seen := map[string]string{}
	for _, a := range []struct {
		name, user string
		optional   bool
	}{
		{"controllerServiceAccount", o.Controller, false},
		{"votersServiceAccount", o.Voters, true},
		{"nodePluginServiceAccount", o.NodePlugin, false},
		{"schedulerServiceAccount", o.Scheduler, false},
	} {
		p := field.NewPath(a.name)
		switch other, dup := seen[a.user]; {
		case a.user == "" && a.optional:
		case a.user == "":
			errs = append(errs, field.Required(p, "name holdfast's own service account as <namespace>/<name>"))
		case !isServiceAccountUser(a.user):
			errs = append(errs, field.Invalid(p, a.user, "must be a service account user name (system:serviceaccount:<namespace>:<name>)"))
		case dup && !(a.name == "votersServiceAccount" && other == "controllerServiceAccount"):
			errs = append(errs, field.Invalid(p, a.user, "is also "+other+": one account would hold both components' rights"))
		default:
			seen[a.user] = a.name
		}
	}
	if err := o.Grantor.Validate(); err != nil {
		return errors.Join(errs.ToAggregate(), err)
	}
	return errs.ToAggregate()
}

func isServiceAccountUser(u string) bool {
	_, _, err := serviceaccount.SplitUsername(u)
	return err == nil
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
	if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
		return fmt.Errorf("%q: namespace %s", v, msgs[0])
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return fmt.Errorf("%q: name %s", v, msgs[0])
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
