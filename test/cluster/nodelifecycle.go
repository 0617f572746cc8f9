package cluster

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// untaintReady does for a Ready node what the kube-controller-manager's node
// lifecycle controller would (there is none here): it removes the
// node.kubernetes.io/not-ready:NoSchedule taint the kubelet registers the
// node with, so a scheduler honouring taints (holdfast-scheduler keeps the
// default TaintToleration) can place pods there.
func (c *Cluster) untaintReady(ctx context.Context, name string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var n corev1.Node
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
			return err
		}
		kept := slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool {
			return t.Key == corev1.TaintNodeNotReady && t.Effect == corev1.TaintEffectNoSchedule
		})
		if len(kept) == len(n.Spec.Taints) {
			return nil
		}
		n.Spec.Taints = kept
		return c.Client.Update(ctx, &n)
	})
	if err != nil {
		return fmt.Errorf("removing the not-ready taint of node %s: %w", name, err)
	}
	return nil
}
