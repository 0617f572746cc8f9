package plugin

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

func newSwapCommand(o *options) *cobra.Command {
	var (
		reason  string
		wait    bool
		timeout time.Duration
		dryRun  bool
	)
	cmd := &cobra.Command{
		Use:   "swap OUT [IN]",
		Short: "Replace the etcd voter on node OUT with node IN (or a node the scheduler picks)",
		Long: `Ask for a manual voter swap: a VoterSwap that demotes the etcd voter on node OUT
to an agent and promotes node IN (when IN is left out, holdfast-scheduler picks
a voter-eligible node). One swap runs at a time; quorum is never lost.

Before anything is sent, OUT and IN must exist and IN must be voter-eligible
(VoterPolicy default's eligibleSelector) and not pinned: otherwise exit 2.
Then the plugin reads VoterPolicy default (etcd's own view of its members, as
the voter controller records it), the Nodes and the Lease
kube-system/holdfast-voter-swap, and judges every gate of the swap with the
rules the webhook and the controller apply (etcd healthy with a leader and no
learner, the voters at their target, every voter's Node Ready, no node
labelled as a voter that does not vote, the swap Lease free, OUT a voter that
is not pinned and whose node plugin does not report it not provisioned, IN not
a member, eligible, provisioned, Ready and without a tombstone of this
cluster). If any gate fails it prints each one with its
field path and reason, creates nothing and exits 1. The webhook checks the
gates again when the VoterSwap is created (and refuses a second swap): exit 1
with each reason. Exit 0 means every gate held and the swap was created;
with --wait, that it succeeded.

A manual swap is carried out even when VoterPolicy says dryRun.

` + exitCodesHelp,
		Example: `  # Replace cp-3 by edge-7 and follow it to the end
  kubectl holdfast swap cp-3 edge-7 --reason "fsync p99 40ms" --wait

  # Let the scheduler pick the incoming node
  kubectl holdfast swap cp-3

  # Would the gates hold now? (nothing is created)
  kubectl holdfast swap cp-3 edge-7 --dry-run && echo "gates hold"`,
		Args: exactArgs(1, 2, "OUT [IN]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			out, in := args[0], ""
			if len(args) == 2 {
				in = args[1]
			}
			if out == in {
				return usageErr("swap: OUT and IN are both %q: name two different nodes", out)
			}
			if err := o.connect(); err != nil {
				return err
			}
			ctx := cmd.Context()
			cl, err := readSwapCluster(ctx, o.client, o.now())
			if err != nil {
				return err
			}
			if err := checkSwapNodes(cl, out, in); err != nil {
				return err
			}
			for _, note := range cl.notes {
				fmt.Fprintln(o.streams.ErrOut, "note: "+note)
			}
			spec := holdfastv1.VoterSwapSpec{Outgoing: out, Incoming: in, Reason: reason, Origin: holdfastv1.SwapManual}
			if errs := policy.SwapGates(&spec, cl.gates); len(errs) > 0 {
				return gatesRefused(out, in, dryRun, errs)
			}
			s := &holdfastv1.VoterSwap{
				ObjectMeta: metav1.ObjectMeta{GenerateName: swapNamePrefix(out, in)},
				Spec:       spec,
			}
			var opts []client.CreateOption
			if dryRun {
				opts = append(opts, client.DryRunAll)
			}
			if err := o.client.Create(ctx, s, opts...); err != nil {
				return apiErr("creating the VoterSwap", err)
			}
			if dryRun {
				fmt.Fprintf(o.streams.Out, "voterswap %s -> %s: every gate holds now (dry run, nothing created)\n", out, orScheduler(in))
				return nil
			}
			fmt.Fprintf(o.streams.Out, "voterswap.holdfast.io/%s created: %s -> %s\n", s.Name, out, orScheduler(in))
			if !wait {
				fmt.Fprintf(o.streams.Out, "Follow it with: kubectl get voterswap %s -w   or   kubectl holdfast status\n", s.Name)
				return nil
			}
			return o.waitSwap(ctx, s.Name, timeout)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the record (VoterSwap spec.reason)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the swap finishes: exit 0 when it succeeded, 1 when refused, rolled back or abandoned")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "with --wait, how long to wait before exiting 4 (the swap goes on)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "judge every gate now (and ask the webhook with a server dry run), creating nothing: exit 0 when every gate holds, 1 with each failing gate")
	return cmd
}

// swapNamePrefix is a readable generateName: swap-<out>-<in>-, cut to fit.
func swapNamePrefix(out, in string) string {
	p := "swap-" + out
	if in != "" {
		p += "-" + in
	}
	if len(p) > 200 {
		p = p[:200]
	}
	return strings.TrimRight(p, "-.") + "-"
}

// swapCluster is what the swap gates are judged on: VoterPolicy default,
// the Nodes and the swap Lease, as the cluster holds them now.
type swapCluster struct {
	gates policy.GateInput
	// notes say what could not be read and is left to the webhook.
	notes []string
}

func readSwapCluster(ctx context.Context, c client.Client, now time.Time) (*swapCluster, error) {
	cl := &swapCluster{gates: policy.GateInput{Nodes: map[string]*corev1.Node{}, Now: now}}
	var p holdfastv1.VoterPolicy
	switch err := c.Get(ctx, client.ObjectKey{Name: holdfastv1.VoterPolicyName}, &p); {
	case err == nil:
		cl.gates.Policy = &p
	case !apierrors.IsNotFound(err):
		return nil, apiErr("reading VoterPolicy default", err)
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return nil, apiErr("listing the Nodes", err)
	}
	for i := range nodes.Items {
		cl.gates.Nodes[nodes.Items[i].Name] = &nodes.Items[i]
	}
	var l coordinationv1.Lease
	switch err := c.Get(ctx, client.ObjectKey{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName}, &l); {
	case err == nil:
		cl.gates.SwapLease = &l
	case apierrors.IsForbidden(err):
		// Whoever may not read the Lease still gets every other gate; the
		// webhook judges the Lease when the VoterSwap is created.
		cl.notes = append(cl.notes, fmt.Sprintf("the swap Lease %s/%s is not readable (%v); the webhook judges it",
			holdfastv1.SwapLeaseNamespace, holdfastv1.SwapLeaseName, err))
	case !apierrors.IsNotFound(err):
		return nil, apiErr("reading the swap Lease", err)
	}
	return cl, nil
}

// checkSwapNodes refuses, before anything is judged or sent, a node that does
// not exist or an incoming node the VoterPolicy does not allow to vote (exit
// 2): a usage error, not a gate that may hold later.
func checkSwapNodes(cl *swapCluster, out, in string) error {
	if cl.gates.Nodes[out] == nil {
		return usageErr("swap: node %q (OUT) not found", out)
	}
	if in == "" {
		return nil
	}
	n := cl.gates.Nodes[in]
	if n == nil {
		return usageErr("swap: node %q (IN) not found", in)
	}
	if !policy.NodeEligible(cl.gates.Policy, n) {
		return usageErr("swap: node %q (IN) is not voter-eligible: its labels do not match %s; an admin labels eligible nodes",
			in, eligibleSelector(cl.gates.Policy))
	}
	if policy.NodePinned(n) {
		return usageErr("swap: node %q (IN) is pinned (%s); an admin must unpin it first", in, holdfastv1.LabelPinned)
	}
	return nil
}

// eligibleSelector names the selector rules.NodeEligible applied, for the
// message: VoterPolicy default's eligibleSelector, or the default one.
func eligibleSelector(p *holdfastv1.VoterPolicy) string {
	if p == nil || p.Spec.EligibleSelector == nil {
		return fmt.Sprintf("the default eligibleSelector %q", holdfastv1.LabelVoterEligible+"=true")
	}
	sel, err := metav1.LabelSelectorAsSelector(p.Spec.EligibleSelector)
	if err != nil {
		return fmt.Sprintf("VoterPolicy default's eligibleSelector, which does not parse (%v)", err)
	}
	return fmt.Sprintf("VoterPolicy default's eligibleSelector %q", sel.String())
}

// gatesRefused is exit 1 with every failing gate, each on its own line with
// its field path and reason.
func gatesRefused(out, in string, dryRun bool, errs field.ErrorList) error {
	what := "nothing created"
	if dryRun {
		what = "dry run, nothing created"
	}
	gate := "gates fail"
	if len(errs) == 1 {
		gate = "gate fails"
	}
	lines := []string{fmt.Sprintf("swap %s -> %s refused: %d %s now (%s):", out, orScheduler(in), len(errs), gate, what)}
	for _, e := range errs {
		lines = append(lines, fmt.Sprintf("  - %s: %s", e.Field, e.Detail))
	}
	return &exitError{code: ExitRefused, msg: strings.Join(lines, "\n")}
}

func (o *options) waitSwap(ctx context.Context, name string, timeout time.Duration) error {
	last := ""
	return o.waitFor(ctx, timeout, "swap "+name, func(ctx context.Context) (bool, error) {
		var s holdfastv1.VoterSwap
		if err := o.client.Get(ctx, client.ObjectKey{Name: name}, &s); err != nil {
			if apierrors.IsNotFound(err) {
				return false, refusedErr("swap %s: the VoterSwap was deleted before it finished", name)
			}
			return false, apiErr("reading VoterSwap "+name, err)
		}
		if line := swapLine(&s); line != last {
			fmt.Fprintln(o.streams.Out, line)
			last = line
		}
		switch s.Status.Phase {
		case holdfastv1.SwapSucceeded:
			return true, nil
		case holdfastv1.SwapRolledBack, holdfastv1.SwapAbandoned, holdfastv1.SwapRefused:
			return false, refusedErr("swap %s %s: %s", name, s.Status.Phase, lastHistory(&s))
		}
		return false, nil
	})
}

func swapLine(s *holdfastv1.VoterSwap) string {
	phase := s.Status.Phase
	if phase == "" {
		phase = holdfastv1.SwapPending
	}
	line := fmt.Sprintf("%s: phase %s", s.Name, phase)
	if s.Status.Step != "" {
		line += ", step " + string(s.Status.Step)
	}
	if h := lastHistory(s); h != "" {
		line += " (" + h + ")"
	}
	return line
}

func lastHistory(s *holdfastv1.VoterSwap) string {
	h := s.Status.History
	if len(h) == 0 {
		return ""
	}
	r := h[len(h)-1]
	out := fmt.Sprintf("%s %s", r.Step, r.Outcome)
	if r.Reason != "" {
		out += " " + r.Reason
	}
	if r.Message != "" {
		out += ": " + r.Message
	}
	return out
}

// waitFor polls check every o.poll until it reports done or an error, or
// timeout passes (exit 4).
func (o *options) waitFor(ctx context.Context, timeout time.Duration, what string, check func(context.Context) (bool, error)) error {
	deadline := o.now().Add(timeout)
	for {
		done, err := check(ctx)
		if err != nil || done {
			return err
		}
		if !o.now().Before(deadline) {
			return &exitError{code: ExitTimeout, msg: fmt.Sprintf("%s: no outcome within %v; the request stands", what, timeout)}
		}
		select {
		case <-ctx.Done():
			return &exitError{code: ExitTimeout, msg: fmt.Sprintf("%s: interrupted before an outcome; the request stands", what)}
		case <-time.After(o.poll):
		}
	}
}
