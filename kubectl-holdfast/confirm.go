package plugin

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

func newConfirmFencedCommand(o *options) *cobra.Command {
	var how string
	cmd := &cobra.Command{
		Use:   "confirm-fenced UNIT --how REASON",
		Short: "Certify that a unit's runtime has stopped writing",
		Long: `Certify, in your words, that the runtime of UNIT's current binding has stopped
writing (annotation holdfast.io/failover-confirm-fenced): you powered its node
off, or cut it from the field network. The controller then does not wait for
evidence it may never get: a leadership hold-off, a hand-over's stop or a
deleted unit's retirement goes on at once. Use kubectl holdfast failover
--confirm-fenced to move the unit at the same time.

The certification names the runtime as read here: its epoch
(holdfast.io/failover-confirm-epoch) and its process, the runtime pod's UID and
restart count (holdfast.io/failover-confirm-incarnation, "none" when its pod is
gone). If another runtime is bound, or the kubelet restarts this one, before it
lands, it certifies nothing: the webhook refuses it and the controller removes
it. It is recorded in the audit trail with your user name; only the webhook's
confirm-fenced groups may set it.

` + exitCodesHelp,
		Example: `  # edge-1 was powered off at the breaker; its unit kiln-1 is being deleted
  kubectl holdfast confirm-fenced kiln-1 --how "edge-1 powered off at the breaker"`,
		Args: exactArgs(1, 1, "UNIT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(how) == "" {
				return usageErr("confirm-fenced: --how REASON is required: say how the runtime was stopped (powered off, cut from the field network)")
			}
			ctx := cmd.Context()
			u, err := o.getUnit(ctx, args[0])
			if err != nil {
				return err
			}
			if u.Status.RuntimeBinding == nil {
				return usageErr("confirm-fenced: unit %s/%s has no runtime binding: there is no runtime to certify", u.Namespace, u.Name)
			}
			c, running, err := o.certification(ctx, u, how)
			if err != nil {
				return err
			}
			if err := o.annotate(ctx, u, c); err != nil {
				return apiErr(fmt.Sprintf("certifying the fence of unit %s/%s", u.Namespace, u.Name), err)
			}
			fmt.Fprintf(o.streams.Out, "unit.holdfast.io/%s fence certified: the runtime of epoch %d (%s)\n",
				u.Name, u.Status.RuntimeBinding.Epoch, describeProcess(running))
			return nil
		},
	}
	cmd.Flags().StringVar(&how, "how", "", "how the runtime was stopped, in your words (required; recorded in the audit trail)")
	return cmd
}

// certification is the fence confirmation, in the words how, of the runtime
// of u's current binding as the apiserver has it now: its epoch and its
// process (policy.ConfirmedFence's terms), and that process (nil: no pod).
func (o *options) certification(ctx context.Context, u *holdfastv1.Unit, how string) (map[string]any, *holdfastv1.RuntimeIncarnation, error) {
	var epoch int64
	var running *holdfastv1.RuntimeIncarnation
	if b := u.Status.RuntimeBinding; b != nil {
		epoch = b.Epoch
		if b.Pod != "" {
			var pod corev1.Pod
			switch err := o.client.Get(ctx, client.ObjectKey{Namespace: u.Namespace, Name: b.Pod}, &pod); {
			case err == nil:
				running = policy.IncarnationOf(&pod)
			case !apierrors.IsNotFound(err):
				return nil, nil, apiErr(fmt.Sprintf("reading runtime pod %s/%s, whose process the certification names", u.Namespace, b.Pod), err)
			}
		}
	}
	c := map[string]any{}
	for k, v := range policy.ConfirmFenced(how, epoch, running) {
		c[k] = v
	}
	return c, running, nil
}

func describeProcess(i *holdfastv1.RuntimeIncarnation) string {
	if i == nil {
		return "its pod is gone"
	}
	return fmt.Sprintf("pod UID %s, restart %d", i.PodUID, i.RestartCount)
}
