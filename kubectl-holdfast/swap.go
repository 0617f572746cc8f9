package plugin

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
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
(VoterPolicy default's eligibleSelector): otherwise exit 2. The webhook then
checks every gate of the swap (etcd healthy, voters Ready, no other swap...)
and refuses with each failed gate: exit 1. Exit 0 means every gate held and the
swap was accepted; with --wait, that it succeeded.

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
			if err := checkSwapNodes(ctx, o.client, out, in); err != nil {
				return err
			}
			s := &holdfastv1.VoterSwap{
				ObjectMeta: metav1.ObjectMeta{GenerateName: swapNamePrefix(out, in)},
				Spec:       holdfastv1.VoterSwapSpec{Outgoing: out, Incoming: in, Reason: reason, Origin: holdfastv1.SwapManual},
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
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "ask the webhook whether every gate holds now, without creating the swap")
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

// checkSwapNodes refuses, before sending anything, a node that does not
// exist or an incoming node the VoterPolicy does not allow to vote.
func checkSwapNodes(ctx context.Context, c client.Client, out, in string) error {
	var n corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: out}, &n); err != nil {
		if apierrors.IsNotFound(err) {
			return usageErr("swap: node %q (OUT) not found", out)
		}
		return apiErr("reading node "+out, err)
	}
	if in == "" {
		return nil
	}
	if err := c.Get(ctx, client.ObjectKey{Name: in}, &n); err != nil {
		if apierrors.IsNotFound(err) {
			return usageErr("swap: node %q (IN) not found", in)
		}
		return apiErr("reading node "+in, err)
	}
	sel, what, err := eligibleSelector(ctx, c)
	if err != nil {
		return err
	}
	if !sel.Matches(labels.Set(n.Labels)) {
		return usageErr("swap: node %q (IN) is not voter-eligible: its labels do not match %s %q; an admin labels eligible nodes",
			in, what, sel.String())
	}
	if n.Labels[holdfastv1.LabelPinned] == "true" {
		return usageErr("swap: node %q (IN) is pinned (%s=true); an admin must unpin it first", in, holdfastv1.LabelPinned)
	}
	return nil
}

// eligibleSelector is VoterPolicy default's eligibleSelector, or the CRD's
// default (holdfast.io/voter-eligible=true) when there is no policy yet.
func eligibleSelector(ctx context.Context, c client.Client) (labels.Selector, string, error) {
	def := labels.SelectorFromSet(labels.Set{holdfastv1.LabelVoterEligible: "true"})
	var p holdfastv1.VoterPolicy
	switch err := c.Get(ctx, client.ObjectKey{Name: holdfastv1.VoterPolicyName}, &p); {
	case apierrors.IsNotFound(err):
		return def, "the default eligibleSelector", nil
	case err != nil:
		return nil, "", apiErr("reading VoterPolicy default", err)
	case p.Spec.EligibleSelector == nil:
		return def, "the default eligibleSelector", nil
	}
	sel, err := metav1.LabelSelectorAsSelector(p.Spec.EligibleSelector)
	if err != nil {
		return nil, "", refusedErr("VoterPolicy default: spec.eligibleSelector: %v", err)
	}
	return sel, "VoterPolicy default's eligibleSelector", nil
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
