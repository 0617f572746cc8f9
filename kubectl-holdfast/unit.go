package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

func newFailoverCommand(o *options) *cobra.Command {
	var (
		to, confirm string
		wait        bool
		timeout     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "failover UNIT --to NODE [--confirm-fenced REASON]",
		Short: "Move a unit's runtime to another node by hand",
		Long: `Ask for a manual failover of UNIT to NODE (annotation holdfast.io/failover-to).

The controller holds the unit, re-binds it at a new epoch and the scheduler
places the new runtime on NODE. Two writers must never drive one device, so:

  - an Autonomy unit never fences itself: --confirm-fenced is required, saying
    how the old node was fenced (powered off, cut from the field network);
  - a Failover unit whose runtime still holds its lease is refused without
    --confirm-fenced; once its lease expired and the margin passed, none is needed.

--confirm-fenced (annotation holdfast.io/failover-confirm-fenced) is recorded
in the audit trail with your user name, with the runtime you certify as read
here: its epoch (holdfast.io/failover-confirm-epoch) and its process, the pod's
UID and restart count (holdfast.io/failover-confirm-incarnation). If another
runtime is bound, or the kubelet restarts this one, before the request lands,
it certifies nothing.
Without it, any confirmation left on the unit from earlier is removed, so it
never certifies a fence you did not.

` + exitCodesHelp,
		Example: `  # The old node is powered off: move kiln-1 to edge-2 and wait for the re-bind
  kubectl holdfast failover kiln-1 --to edge-2 --confirm-fenced "powered off at the breaker" --wait

  # A Failover unit whose lease already expired
  kubectl holdfast failover -n plant press-2 --to standby-1`,
		Args: exactArgs(1, 1, "UNIT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to == "" {
				return usageErr("failover: --to NODE is required")
			}
			ctx := cmd.Context()
			u, err := o.getUnit(ctx, args[0])
			if err != nil {
				return err
			}
			var n corev1.Node
			if err := o.client.Get(ctx, client.ObjectKey{Name: to}, &n); err != nil {
				if apierrors.IsNotFound(err) {
					return usageErr("failover: node %q not found", to)
				}
				return apiErr("reading node "+to, err)
			}
			var epoch int64
			if b := u.Status.RuntimeBinding; b != nil {
				epoch = b.Epoch
				if b.Node == to {
					return usageErr("failover: unit %s/%s is already bound to node %s at epoch %d", u.Namespace, u.Name, to, b.Epoch)
				}
			}
			if confirm == "" && u.Spec.Availability.Mode != holdfastv1.Failover {
				return usageErr("failover: unit %s/%s is an Autonomy unit: its runtime never fences itself, so --confirm-fenced REASON "+
					"(how the old node was fenced) is required", u.Namespace, u.Name)
			}
			annotations := map[string]any{holdfastv1.AnnotationFailoverTo: to,
				holdfastv1.AnnotationFailoverConfirmFenced: nil, holdfastv1.AnnotationFailoverConfirmEpoch: nil,
				holdfastv1.AnnotationFailoverConfirmIncarnation: nil}
			if confirm != "" {
				c, _, err := o.certification(ctx, u, confirm)
				if err != nil {
					return err
				}
				maps.Copy(annotations, c)
			}
			if err := o.annotate(ctx, u, annotations); err != nil {
				return apiErr(fmt.Sprintf("asking for the failover of unit %s/%s", u.Namespace, u.Name), err)
			}
			fmt.Fprintf(o.streams.Out, "unit.holdfast.io/%s failover to %s requested at epoch %d\n", u.Name, to, epoch)
			if !wait {
				fmt.Fprintf(o.streams.Out, "Follow it with: kubectl holdfast status -n %s   or   kubectl describe unit -n %s %s\n", u.Namespace, u.Namespace, u.Name)
				return nil
			}
			return o.waitFailover(ctx, client.ObjectKeyFromObject(u), to, epoch, timeout)
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "the node to move the unit's runtime to (required)")
	cmd.Flags().StringVar(&confirm, "confirm-fenced", "", "how the old node was fenced, in your words (recorded in the audit trail)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the controller re-binds (exit 0) or refuses (exit 1)")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "with --wait, how long to wait before exiting 4 (the request stands)")
	return cmd
}

func newRestartCommand(o *options) *cobra.Command {
	var (
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "restart UNIT",
		Short: "Resume a held unit once its runtime is ready",
		Long: `Ask holdfast to clear a unit's Hold (annotation holdfast.io/restart, an RFC 3339
time). After a failover, an expiry or a manual request the unit is held: its
new runtime reads the device's operating point but its program does not drive
the outputs until a person restarts it. The controller clears the Hold once the
current runtime is ready (and, for a Failover unit, holds its lease).

A unit that is not held is a usage error (exit 2): there is nothing to restart.

` + exitCodesHelp,
		Example: `  # Resume kiln-1 and wait until the Hold is cleared
  kubectl holdfast restart kiln-1 --wait`,
		Args: exactArgs(1, 1, "UNIT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			u, err := o.getUnit(ctx, args[0])
			if err != nil {
				return err
			}
			held := meta.FindStatusCondition(u.Status.Conditions, holdfastv1.ConditionHeld)
			if held == nil || held.Status != metav1.ConditionTrue {
				state := "no Held condition"
				if held != nil {
					state = fmt.Sprintf("Held=%s, %s", held.Status, held.Reason)
				}
				return usageErr("restart: unit %s/%s is not held (%s): there is nothing to restart", u.Namespace, u.Name, state)
			}
			// The controller honours a restart made at or after the Hold; a
			// client clock behind the apiserver's must not make it too early.
			at := o.now().UTC().Truncate(time.Second)
			if lt := held.LastTransitionTime.UTC(); at.Before(lt) {
				at = lt
			}
			if err := o.annotate(ctx, u, map[string]any{holdfastv1.AnnotationRestart: at.Format(time.RFC3339)}); err != nil {
				return apiErr(fmt.Sprintf("asking for the restart of unit %s/%s", u.Namespace, u.Name), err)
			}
			fmt.Fprintf(o.streams.Out, "unit.holdfast.io/%s restart requested (held since %s: %s)\n", u.Name,
				held.LastTransitionTime.UTC().Format(time.RFC3339), held.Message)
			if !wait {
				return nil
			}
			return o.waitFor(ctx, timeout, "restart of unit "+u.Name, func(ctx context.Context) (bool, error) {
				var cur holdfastv1.Unit
				if err := o.client.Get(ctx, client.ObjectKeyFromObject(u), &cur); err != nil {
					return false, apiErr("reading unit "+u.Name, err)
				}
				if !meta.IsStatusConditionTrue(cur.Status.Conditions, holdfastv1.ConditionHeld) {
					fmt.Fprintf(o.streams.Out, "unit.holdfast.io/%s resumed: the Hold is cleared\n", u.Name)
					return true, nil
				}
				return false, nil
			})
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the Hold is cleared (exit 0)")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "with --wait, how long to wait before exiting 4 (the request stands)")
	return cmd
}

func (o *options) getUnit(ctx context.Context, name string) (*holdfastv1.Unit, error) {
	if err := o.connect(); err != nil {
		return nil, err
	}
	ns, _, err := o.namespace()
	if err != nil {
		return nil, err
	}
	var u holdfastv1.Unit
	if err := o.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, usageErr("unit %q not found in namespace %s", name, ns)
		}
		return nil, apiErr("reading unit "+name, err)
	}
	return &u, nil
}

// annotate sets (or, for nil values, removes) annotations with a merge
// patch, so a concurrent status write never conflicts with a person's request.
func (o *options) annotate(ctx context.Context, u *holdfastv1.Unit, kv map[string]any) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": kv}})
	if err != nil {
		return err
	}
	return o.client.Patch(ctx, u, client.RawPatch(types.MergePatchType, patch))
}

// waitFailover waits for a new binding (exit 0) or the controller's refusal
// of the consumed request (exit 1).
func (o *options) waitFailover(ctx context.Context, key client.ObjectKey, to string, epoch int64, timeout time.Duration) error {
	return o.waitFor(ctx, timeout, "failover of unit "+key.Name, func(ctx context.Context) (bool, error) {
		var u holdfastv1.Unit
		if err := o.client.Get(ctx, key, &u); err != nil {
			return false, apiErr("reading unit "+key.Name, err)
		}
		req := meta.FindStatusCondition(u.Status.Conditions, holdfastv1.ConditionFailoverRequest)
		b := u.Status.RuntimeBinding
		if b != nil && b.Epoch > epoch {
			where := "the scheduler places it on " + to
			if b.Node != "" {
				where = "bound to node " + b.Node
			}
			fmt.Fprintf(o.streams.Out, "unit.holdfast.io/%s re-bound at epoch %d: %s\n", key.Name, b.Epoch, where)
			return true, nil
		}
		_, pending := u.Annotations[holdfastv1.AnnotationFailoverTo]
		if !pending && req != nil && req.Reason == holdfastv1.ReasonRefused {
			return false, refusedErr("failover of unit %s refused by the controller: %s", key.Name, req.Message)
		}
		return false, nil
	})
}
