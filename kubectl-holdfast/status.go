package plugin

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

// Report is what `status -o json|yaml` prints; its field names are stable.
type Report struct {
	// APIVersion and Kind name the report's schema, as kubectl's own
	// objects do (ReportAPIVersion, ReportKind).
	APIVersion string        `json:"apiVersion"`
	Kind       string        `json:"kind"`
	Units      []UnitReport  `json:"units"`
	Voters     *VoterReport  `json:"voters,omitempty"`
	Swaps      []SwapReport  `json:"swapsInProgress"`
	Lease      *SwapLeaseRef `json:"swapLease,omitempty"`
	// Notes are what could not be read, and why.
	Notes []string `json:"notes,omitempty"`
}

// UnitReport is one unit's binding and lease.
type UnitReport struct {
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	Mode       string `json:"mode"`
	Node       string `json:"node,omitempty"`
	Epoch      int64  `json:"epoch,omitempty"`
	LeaseState string `json:"leaseState,omitempty"`
	// Held is the Held condition's status: True while outputs are on hold.
	Held  string `json:"held,omitempty"`
	Ready string `json:"ready,omitempty"`
	// UnplacedRebinds counts the automatic re-binds since the runtime was
	// last confirmed whose pod no scheduler placed; each spent one attempt
	// of the failover budget.
	UnplacedRebinds int `json:"unplacedRebinds,omitempty"`
	// LastUnplaced is why the latest of them was never placed, as the
	// controller recorded it (the scheduler's FailedScheduling message).
	LastUnplaced string `json:"lastUnplaced,omitempty"`
	// Attention lists what an operator should look at, most urgent first.
	Attention []string `json:"attention,omitempty"`
}

// VoterReport is VoterPolicy default's view of etcd, by etcd's own vote.
type VoterReport struct {
	Target   int32    `json:"target"`
	DryRun   bool     `json:"dryRun"`
	Voters   []string `json:"voters"`
	Learners []string `json:"learners,omitempty"`
	Leader   string   `json:"leader,omitempty"`
	// LabelledNotVoting are nodes labelled node-role.kubernetes.io/etcd whose
	// member does not vote.
	LabelledNotVoting []string `json:"labelledNotVoting,omitempty"`
	EvenSince         string   `json:"evenSince,omitempty"`
	ProposedSwap      string   `json:"proposedSwap,omitempty"`
	LastSwap          string   `json:"lastSwap,omitempty"`
	// ObservedTime is status.observedTime, when the voters role last
	// observed etcd; ObservedAge is how long ago, at the plugin's clock.
	ObservedTime string `json:"observedTime,omitempty"`
	ObservedAge  string `json:"observedAge,omitempty"`
	// Stale is why the swap gates refuse this status as too old (or never
	// stamped, or stamped in the future); empty while it is fresh.
	Stale string `json:"stale,omitempty"`
}

// SwapReport is an unfinished VoterSwap.
type SwapReport struct {
	Name     string `json:"name"`
	SwapID   string `json:"swapID,omitempty"`
	Outgoing string `json:"outgoing"`
	Incoming string `json:"incoming,omitempty"`
	Origin   string `json:"origin,omitempty"`
	Step     string `json:"step,omitempty"`
	// StepSince is when the swap entered its current step (the first of
	// the history records that end it at this step); InStep is how long ago.
	StepSince string `json:"stepSince,omitempty"`
	InStep    string `json:"inStep,omitempty"`
	Phase     string `json:"phase"`
	Started   string `json:"startedAt,omitempty"`
	Deadline  string `json:"deadline,omitempty"`
	Last      string `json:"last,omitempty"`
}

// SwapLeaseRef is the holder of the swap Lease kube-system/holdfast-voter-swap.
type SwapLeaseRef struct {
	Holder string `json:"holder"`
	SwapID string `json:"swapID,omitempty"`
	Nodes  string `json:"nodes,omitempty"`
	Until  string `json:"until,omitempty"`
}

// The schema of status -o json|yaml.
const (
	ReportAPIVersion = "kubectl.holdfast.io/v1alpha1"
	ReportKind       = "StatusReport"
)

func newStatusCommand(o *options) *cobra.Command {
	var output string
	var all bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show units with their bindings and lease states, voters by etcd's vote, and the swap in progress",
		Long: `Show units with their bindings and lease states, the etcd voters by etcd's own
vote (VoterPolicy default's status), and any voter swap in progress.

Units of the current namespace are listed (-n names another, -A lists every
namespace). A part that cannot be read (not installed, not allowed) is named
under NOTES and the rest is shown.

` + exitCodesHelp,
		Example: `  # Everything holdfast holds, in every namespace
  kubectl holdfast status -A

  # The units of one namespace, as JSON for a script
  kubectl holdfast status -n plant -o json | jq '.units[] | select(.held == "True")'`,
		Args: exactArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !slices.Contains([]string{"", "json", "yaml", "wide"}, output) {
				return usageErr("--output: %q: must be json, yaml or wide (or empty)", output)
			}
			if err := o.connect(); err != nil {
				return err
			}
			ns, explicit, err := o.namespace()
			if err != nil {
				return err
			}
			if all {
				if explicit {
					return usageErr("--all-namespaces and --namespace: name one, not both")
				}
				ns = ""
			}
			r, err := collect(cmd.Context(), o.client, ns, o.now())
			if err != nil {
				return err
			}
			if output == "json" || output == "yaml" {
				return printObject(o.streams.Out, output, r)
			}
			printReport(o.streams.Out, r, ns, output == "wide")
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json, yaml, or wide (every attention item of each unit)")
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "list the units of every namespace")
	return cmd
}

// collect reads what status shows. Units must be readable; the voter parts
// are optional (voter swaps may not be configured) and become notes.
func collect(ctx context.Context, c client.Client, ns string, now time.Time) (*Report, error) {
	r := &Report{APIVersion: ReportAPIVersion, Kind: ReportKind, Units: []UnitReport{}, Swaps: []SwapReport{}}
	var units holdfastv1.UnitList
	if err := c.List(ctx, &units, client.InNamespace(ns)); err != nil {
		return nil, apiErr("listing units", err)
	}
	for i := range units.Items {
		r.Units = append(r.Units, unitReport(&units.Items[i], now))
	}
	sort.Slice(r.Units, func(i, j int) bool {
		a, b := r.Units[i], r.Units[j]
		return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Name < b.Name
	})

	var policy holdfastv1.VoterPolicy
	switch err := c.Get(ctx, client.ObjectKey{Name: holdfastv1.VoterPolicyName}, &policy); {
	case err == nil:
		r.Voters = voterReport(ctx, c, &policy, r, now)
	case apierrors.IsNotFound(err):
		r.Notes = append(r.Notes, "VoterPolicy default does not exist: voter swaps are not configured")
	default:
		if e := optional("reading VoterPolicy default", err); e != nil {
			return nil, e
		}
		r.Notes = append(r.Notes, fmt.Sprintf("VoterPolicy default not readable: %v", err))
	}

	var swaps holdfastv1.VoterSwapList
	if err := c.List(ctx, &swaps); err != nil {
		if e := optional("listing voter swaps", err); e != nil {
			return nil, e
		}
		r.Notes = append(r.Notes, fmt.Sprintf("voter swaps not readable: %v", err))
	}
	for i := range swaps.Items {
		if s := &swaps.Items[i]; !s.Status.Phase.Finished() {
			r.Swaps = append(r.Swaps, swapReport(s, now))
		}
	}

	var lease coordinationv1.Lease
	switch err := c.Get(ctx, client.ObjectKey{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName}, &lease); {
	case err == nil:
		r.Lease = leaseRef(&lease, now)
	case apierrors.IsNotFound(err):
	default:
		if e := optional("reading the swap Lease", err); e != nil {
			return nil, e
		}
		r.Notes = append(r.Notes, fmt.Sprintf("swap Lease %s/%s not readable: %v", holdfastv1.SwapLeaseNamespace, holdfastv1.SwapLeaseName, err))
	}
	return r, nil
}

// optional lets a forbidden read become a note; anything else stops status.
func optional(what string, err error) error {
	if apierrors.IsForbidden(err) || meta.IsNoMatchError(err) {
		return nil
	}
	return apiErr(what, err)
}

func unitReport(u *holdfastv1.Unit, now time.Time) UnitReport {
	ur := UnitReport{Namespace: u.Namespace, Name: u.Name, Mode: string(u.Spec.Availability.Mode)}
	if b := u.Status.RuntimeBinding; b != nil {
		ur.Node, ur.Epoch, ur.LeaseState = b.Node, b.Epoch, string(b.LeaseState)
		if b.LeaseStateCarried() {
			ur.LeaseState += fmt.Sprintf(" (of epoch %d)", b.LeaseStateEpoch)
		}
		if b.Expiry != nil && b.Expiry.Epoch == b.Epoch {
			ur.Attention = append(ur.Attention, fmt.Sprintf("lease expired %s ago: %s, last renewal %s",
				duration.HumanDuration(now.Sub(b.Expiry.At.Time)), b.Expiry.Verdict, b.Expiry.LastAttempt))
		}
		if n := len(b.UnplacedRebinds); n > 0 {
			last := slices.MaxFunc(b.UnplacedRebinds, func(x, y holdfastv1.UnplacedRebind) int { return cmp.Compare(x.Epoch, y.Epoch) })
			ur.UnplacedRebinds, ur.LastUnplaced = n, last.Message
			ur.Attention = append(ur.Attention, fmt.Sprintf("%d re-bind(s) never placed, last (epoch %d): %s", n, last.Epoch, short(last.Message)))
		}
	} else {
		ur.Attention = append(ur.Attention, "not bound yet")
	}
	cond := func(t string) *metav1.Condition { return meta.FindStatusCondition(u.Status.Conditions, t) }
	if c := cond(holdfastv1.ConditionHeld); c != nil {
		ur.Held = string(c.Status)
	}
	if c := cond(holdfastv1.ConditionRuntimeReady); c != nil {
		ur.Ready = string(c.Status)
	}
	if c := cond(holdfastv1.ConditionFailoverSuspended); c != nil && c.Status == metav1.ConditionTrue {
		ur.Attention = append([]string{"FAILOVER SUSPENDED: " + c.Message}, ur.Attention...)
	}
	if c := cond(holdfastv1.ConditionFailoverRequest); c != nil && c.Reason == holdfastv1.ReasonLeadershipHoldOff {
		ur.Attention = append(ur.Attention, c.Message)
	}
	if c := cond(holdfastv1.ConditionHeld); c != nil && c.Status == metav1.ConditionTrue && u.Spec.Availability.Mode == holdfastv1.Failover {
		ur.Attention = append(ur.Attention, "held: "+c.Message)
	}
	if to := u.Annotations[holdfastv1.AnnotationFailoverTo]; to != "" {
		ur.Attention = append(ur.Attention, "failover to "+to+" requested")
	}
	return ur
}

func voterReport(ctx context.Context, c client.Client, p *holdfastv1.VoterPolicy, r *Report, now time.Time) *VoterReport {
	st := p.Status
	v := &VoterReport{
		Target: p.Spec.TargetVoters, DryRun: p.Spec.DryRun == nil || *p.Spec.DryRun,
		Voters: slices.Clone(st.Voters), Learners: slices.Clone(st.Learners), Leader: st.Leader,
	}
	if v.Voters == nil {
		v.Voters = []string{}
	}
	if t := st.ObservedTime; t != nil {
		v.ObservedTime = t.UTC().Format(time.RFC3339)
		v.ObservedAge = ago(now, t.Time)
	}
	// The gates' own rule, so status says stale exactly when a swap is refused.
	if err := policy.StatusFresh(p, now); err != nil {
		v.Stale = err.Detail
	}
	if st.EvenSince != nil {
		v.EvenSince = st.EvenSince.UTC().Format(time.RFC3339)
	}
	if ps := st.ProposedSwap; ps != nil {
		v.ProposedSwap = fmt.Sprintf("%s -> %s (%s)", ps.Outgoing, orScheduler(ps.Incoming), ps.Reason)
	}
	if ls := st.LastSwap; ls != nil {
		v.LastSwap = fmt.Sprintf("%s %s", ls.Name, ls.Phase)
		if ls.FinishedAt != nil {
			v.LastSwap += " at " + ls.FinishedAt.UTC().Format(time.RFC3339)
		}
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes, client.HasLabels{holdfastv1.LabelEtcdRole}); err != nil {
		r.Notes = append(r.Notes, fmt.Sprintf("nodes not readable: %v", err))
		return v
	}
	for _, n := range nodes.Items {
		if !slices.Contains(st.Voters, n.Name) {
			v.LabelledNotVoting = append(v.LabelledNotVoting, n.Name)
		}
	}
	sort.Strings(v.LabelledNotVoting)
	return v
}

// ago is how long before now t was, as kubectl prints ages; a t after now
// (the clocks disagree) reads "in ...".
func ago(now, t time.Time) string {
	if d := now.Sub(t); d < -time.Second {
		return "in " + duration.HumanDuration(-d)
	}
	return duration.HumanDuration(now.Sub(t)) + " ago"
}

// shortLen is how much of a recorded message the table shows; -o json
// carries all of it.
const shortLen = 80

// short is the scheduler's own words from an unplaced re-bind's message
// (the controller prefixes them with the pod's name and what it means),
// cut to shortLen runes for one table cell.
func short(msg string) string {
	if _, after, ok := strings.Cut(msg, holdfastv1.UnplacedSchedulerWords); ok {
		msg = after
	}
	if r := []rune(msg); len(r) > shortLen {
		msg = string(r[:shortLen-1]) + "…"
	}
	return msg
}

func orScheduler(node string) string {
	if node == "" {
		return "(scheduler picks)"
	}
	return node
}

func swapReport(s *holdfastv1.VoterSwap, now time.Time) SwapReport {
	sr := SwapReport{
		Name: s.Name, SwapID: s.Status.SwapID, Outgoing: s.Spec.Outgoing, Origin: string(s.Spec.Origin),
		Step: string(s.Status.Step), Phase: string(s.Status.Phase),
	}
	sr.Incoming = s.Status.Incoming
	if sr.Incoming == "" {
		sr.Incoming = orScheduler(s.Spec.Incoming)
	}
	if sr.Phase == "" {
		sr.Phase = string(holdfastv1.SwapPending)
	}
	if s.Status.StartedAt != nil {
		sr.Started = s.Status.StartedAt.UTC().Format(time.RFC3339)
	}
	if s.Status.Deadline != nil {
		sr.Deadline = s.Status.Deadline.UTC().Format(time.RFC3339)
	}
	if since := stepSince(s); since != nil {
		sr.StepSince = since.UTC().Format(time.RFC3339)
		sr.InStep = duration.HumanDuration(now.Sub(since.Time))
	}
	if h := s.Status.History; len(h) > 0 {
		last := h[len(h)-1]
		sr.Last = fmt.Sprintf("%s %s", last.Step, last.Outcome)
		if last.Message != "" {
			sr.Last += ": " + last.Message
		}
	}
	return sr
}

// stepSince is when the swap entered status.step: the first record of the
// history's last run of records at that step. Nil when the history does not
// end at the step (nothing recorded there yet).
func stepSince(s *holdfastv1.VoterSwap) *metav1.Time {
	var since *metav1.Time
	h := s.Status.History
	for i := len(h) - 1; i >= 0 && s.Status.Step != "" && h[i].Step == s.Status.Step; i-- {
		since = &h[i].At
	}
	return since
}

func leaseRef(l *coordinationv1.Lease, now time.Time) *SwapLeaseRef {
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if holder == "" {
		return nil
	}
	ref := &SwapLeaseRef{Holder: holder, SwapID: l.Annotations[holdfastv1.AnnotationSwapID], Nodes: l.Annotations[holdfastv1.AnnotationSwapNodes]}
	if l.Spec.RenewTime != nil && l.Spec.LeaseDurationSeconds != nil {
		until := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
		ref.Until = until.UTC().Format(time.RFC3339)
		if !now.Before(until) {
			ref.Until += " (expired)"
		}
	}
	return ref
}

func printReport(w io.Writer, r *Report, ns string, wide bool) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	where := "all namespaces"
	if ns != "" {
		where = "namespace " + ns
	}
	fmt.Fprintf(tw, "UNITS (%s)\n", where)
	if len(r.Units) == 0 {
		fmt.Fprintln(tw, "  none")
	} else {
		fmt.Fprintln(tw, "  NAMESPACE\tUNIT\tMODE\tNODE\tEPOCH\tLEASE\tHELD\tREADY\tUNPLACED\tATTENTION")
		for _, u := range r.Units {
			epoch := "-"
			if u.Epoch > 0 {
				epoch = fmt.Sprint(u.Epoch)
			}
			attention := "-"
			if len(u.Attention) > 0 {
				attention = u.Attention[0]
				if !wide && len(u.Attention) > 1 {
					attention += fmt.Sprintf(" (+%d more: -o wide)", len(u.Attention)-1)
				} else if wide {
					attention = strings.Join(u.Attention, "; ")
				}
			}
			unplaced := "-"
			if u.UnplacedRebinds > 0 {
				unplaced = fmt.Sprint(u.UnplacedRebinds)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", u.Namespace, u.Name, u.Mode, dash(u.Node), epoch,
				dash(u.LeaseState), dash(u.Held), dash(u.Ready), unplaced, attention)
		}
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "VOTERS (by etcd's vote)")
	if v := r.Voters; v != nil {
		observed := "never"
		if v.ObservedAge != "" {
			observed = v.ObservedAge
		}
		if v.Stale != "" {
			observed += " (stale: swaps refused)"
			if wide {
				observed += ": " + v.Stale
			}
		}
		fmt.Fprintf(tw, "  observed:\t%s\n", observed)
		voters := make([]string, 0, len(v.Voters))
		for _, n := range v.Voters {
			if n == v.Leader {
				n += " (leader)"
			}
			voters = append(voters, n)
		}
		fmt.Fprintf(tw, "  voters:\t%s\t%d of target %d\n", dash(strings.Join(voters, ", ")), len(v.Voters), v.Target)
		if len(v.Learners) > 0 {
			fmt.Fprintf(tw, "  learners:\t%s\n", strings.Join(v.Learners, ", "))
		}
		if len(v.LabelledNotVoting) > 0 {
			fmt.Fprintf(tw, "  labelled etcd, not voting:\t%s\n", strings.Join(v.LabelledNotVoting, ", "))
		}
		if v.EvenSince != "" {
			fmt.Fprintf(tw, "  EVEN VOTER COUNT since:\t%s (the next pass finishes the swap left behind)\n", v.EvenSince)
		}
		fmt.Fprintf(tw, "  automatic swaps:\t%s\n", map[bool]string{true: "dry run (proposed only)", false: "carried out"}[v.DryRun])
		if v.ProposedSwap != "" {
			fmt.Fprintf(tw, "  proposed:\t%s\n", v.ProposedSwap)
		}
		if v.LastSwap != "" {
			fmt.Fprintf(tw, "  last swap:\t%s\n", v.LastSwap)
		}
	} else {
		fmt.Fprintln(tw, "  unknown (see NOTES)")
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "SWAP IN PROGRESS")
	if l := r.Lease; l != nil {
		fmt.Fprintf(tw, "  swap Lease held by %s for %s (nodes %s) until %s\n", l.Holder, dash(l.SwapID), dash(l.Nodes), dash(l.Until))
	}
	if len(r.Swaps) == 0 {
		fmt.Fprintln(tw, "  none")
	} else {
		fmt.Fprintln(tw, "  NAME\tOUT\tIN\tSTEP\tFOR\tPHASE\tSTARTED\tDEADLINE\tLAST")
		for _, s := range r.Swaps {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Outgoing, s.Incoming, dash(s.Step), dash(s.InStep), s.Phase,
				dash(s.Started), dash(s.Deadline), dash(s.Last))
		}
	}
	if len(r.Notes) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "NOTES")
		for _, n := range r.Notes {
			fmt.Fprintf(tw, "  %s\n", n)
		}
	}
	_ = tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
