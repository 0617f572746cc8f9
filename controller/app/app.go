// Package app is holdfast-controller's command line: the flags, their help
// (every flag with its default and the inequality it takes part in), and the
// roles. This package builds the units role (the grantor and the unit
// availability controller); the voters role registers beside it with its own
// election.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/holdfast-io/holdfast/internal/version"
	"github.com/holdfast-io/holdfast/policy"
)

// Role is one job the binary can run; each brings its own flags and its own
// election.
type Role struct {
	Name  string
	Short string
	// Flags registers the role's flags (beside the common ones).
	Flags func(fs *flag.FlagSet, c *Common)
	// Run runs the role until ctx ends; it returns the exit code.
	Run func(ctx context.Context, c *Common) int
}

var roles = map[string]*Role{}

// Register adds a role. Roles register from init.
func Register(r *Role) { roles[r.Name] = r }

// Common are the flags every role has.
type Common struct {
	Role       string
	Kubeconfig string
	// Namespace holds the roles' election Leases.
	Namespace   string
	Identity    string
	HealthAddr  string
	MetricsAddr string
	AuditPath   string
	Verbosity   int
	// Version: print the build's version and exit.
	Version bool

	// Values a role's flags write into; kept here so Help can show them.
	Values map[string]any
}

// Flag is one documented flag: its help says what it does, its default and
// the inequality it takes part in ("none" when it takes part in none).
type Flag struct {
	Name       string
	Usage      string
	Inequality string
}

var docs = map[string]Flag{}

func doc(name, usage, inequality string) {
	docs[name] = Flag{Name: name, Usage: usage, Inequality: inequality}
}

// DocFlag documents a role's flag (call beside its fs.XxxVar).
func DocFlag(name, usage, inequality string) { doc(name, usage, inequality) }

func commonFlags(fs *flag.FlagSet, c *Common) {
	fs.BoolVar(&c.Version, "version", false, "")
	doc("version", "Print the version, the commit and the Go version of this build, and exit.", "none")
	fs.StringVar(&c.Role, "role", "", "")
	doc("role", "The job to run: "+roleNames()+". units and voters each run their own leader election; uninstall-guard checks once and exits.", "none")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "")
	doc("kubeconfig", "Path of a kubeconfig; empty uses the in-cluster service account.", "none")
	fs.StringVar(&c.Namespace, "leader-election-namespace", envOr("POD_NAMESPACE", "holdfast-system"), "")
	doc("leader-election-namespace", "Namespace of the election Leases (the release namespace; $POD_NAMESPACE when set).", "none")
	host, _ := os.Hostname()
	fs.StringVar(&c.Identity, "identity", envOr("POD_NAME", host), "")
	doc("identity", "This process's name in grants, Lease holders and audit lines ($POD_NAME when set, else the host name).", "none")
	fs.StringVar(&c.HealthAddr, "health-probe-bind-address", ":8081", "")
	doc("health-probe-bind-address", "Where /healthz and /readyz answer; \"0\" disables. Served apart from the manager, so it keeps answering while a grantor stands down.", "none")
	fs.StringVar(&c.MetricsAddr, "metrics-bind-address", ":8080", "")
	doc("metrics-bind-address", "Where Prometheus /metrics answers; \"0\" disables. Served apart from the manager, like the probes.", "none")
	fs.StringVar(&c.AuditPath, "audit-log-path", "-", "")
	doc("audit-log-path", "The audit trail: one JSON line per fence verdict, Hold, re-bind, suspension and leadership loss; \"-\" is standard output (the logs go to standard error).", "none")
	fs.IntVar(&c.Verbosity, "v", 0, "")
	doc("v", "Log verbosity (klog).", "none")
}

func roleNames() string {
	var names []string
	for n := range roles {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// Main parses args, prints help on -h/--help, and runs the role.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, c := newFlagSet()
	fs.SetOutput(stderr)
	fs.Usage = func() { PrintHelp(stdout, fs) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if c.Version {
		version.Print(stdout, "holdfast-controller")
		return 0
	}
	r, ok := roles[c.Role]
	if !ok {
		fmt.Fprintf(stderr, "holdfast-controller: --role: %q: must be one of %s\n", c.Role, roleNames())
		return 2
	}
	var klogFlags flag.FlagSet
	klog.InitFlags(&klogFlags)
	_ = klogFlags.Set("v", strconv.Itoa(c.Verbosity))
	version.Register(metrics.Registry)
	return r.Run(ctx, c)
}

func newFlagSet() (*flag.FlagSet, *Common) {
	fs := flag.NewFlagSet("holdfast-controller", flag.ContinueOnError)
	c := &Common{Values: map[string]any{}}
	commonFlags(fs, c)
	names := make([]string, 0, len(roles))
	for n := range roles {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if f := roles[n].Flags; f != nil {
			f(fs, c)
		}
	}
	return fs, c
}

// PrintHelp writes every flag with its type, default, what it does and the
// inequality it takes part in.
func PrintHelp(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, `holdfast-controller: holdfast's leader-elected control plane.

Usage: holdfast-controller --role=ROLE [flags]

Roles:
`)
	names := make([]string, 0, len(roles))
	for n := range roles {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-16s %s\n", n, roles[n].Short)
	}
	d := policy.DefaultGrantorTimings()
	floor, _ := d.LeaseFloor()
	fmt.Fprintf(w, `
The grantor's handover must fit inside what a runtime has after a renewal,
with 5s to spare (docs/design.md §3 L6). The least lease for which it does
is the lease floor (L14): holdfast-webhook, given the same timings, refuses
a Failover unit with a shorter lease.

  read-idle + ping + 2 x poll + election lease + warm start + 5s <= lease - 2 x lease/6
  poll = retry period x 2.2 (client-go's jittered wait), warm start budgeted at %v
  at the defaults: %v + %v + 2 x %v + %v + %v + 5s = %v <= %v at the floor, %v

Flags:
`, d.WarmStart, d.ReadIdleTimeout, d.PingTimeout, d.Poll(), d.ElectionLeaseDuration, d.WarmStart,
		d.Gap()+policy.RequiredSpare, policy.BudgetAfterARenewal(floor), floor)
	fs.VisitAll(func(f *flag.Flag) {
		d := docs[f.Name]
		typ := strings.TrimSuffix(strings.TrimPrefix(fmt.Sprintf("%T", f.Value), "*flag."), "Value")
		def := f.DefValue
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(w, "  --%s %s (default %s)\n", f.Name, typ, def)
		for _, line := range wrap(d.Usage, 72) {
			fmt.Fprintf(w, "      %s\n", line)
		}
		for i, line := range wrap("Inequality: "+d.Inequality, 72) {
			if i > 0 {
				line = "  " + line
			}
			fmt.Fprintf(w, "      %s\n", line)
		}
	})
}

func wrap(s string, width int) []string {
	var lines []string
	var cur string
	for _, word := range strings.Fields(s) {
		if cur != "" && len(cur)+1+len(word) > width {
			lines = append(lines, cur)
			cur = word
			continue
		}
		if cur != "" {
			cur += " "
		}
		cur += word
	}
	if cur != "" {
		lines = append(lines, cur)
	}
	return lines
}

// Documented reports the flags registered without documentation; the help
// test holds it empty.
func Documented(fs *flag.FlagSet) []string {
	var missing []string
	fs.VisitAll(func(f *flag.Flag) {
		d, ok := docs[f.Name]
		if !ok || d.Usage == "" || d.Inequality == "" {
			missing = append(missing, f.Name)
		}
	})
	return missing
}

// NewFlagSet exposes the full flag set, for tests.
func NewFlagSet() *flag.FlagSet {
	fs, _ := newFlagSet()
	return fs
}
