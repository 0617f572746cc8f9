package scenario

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/holdfast-io/holdfast/test/cluster"
)

// webhookDeployment is the chart's webhook Deployment.
const webhookDeployment = "holdfast-webhook"

// StopWebhook takes holdfast-webhook away while its configuration stays
// registered (failurePolicy Fail): the process is stopped, or, installed by
// the chart, its Deployment scaled to none and its pods gone. It returns
// the way back, which waits until it answers again.
func (w *World) StopWebhook(ctx context.Context) (start func(context.Context) error, err error) {
	if w.install != Chart {
		w.Webhook.Stop(10 * time.Second)
		return func(ctx context.Context) error {
			p, err := w.StartWebhookProcess(ctx, w.grantor.Args()...)
			if err == nil {
				w.Webhook = p
			}
			return err
		}, nil
	}
	var d appsv1.Deployment
	key := client.ObjectKey{Namespace: cluster.HoldfastNamespace, Name: webhookDeployment}
	if err := w.Client.Get(ctx, key, &d); err != nil {
		return nil, err
	}
	replicas := ptr.Deref(d.Spec.Replicas, 1)
	scale := func(ctx context.Context, n int32) error {
		var d appsv1.Deployment
		if err := w.Client.Get(ctx, key, &d); err != nil {
			return err
		}
		patch := client.MergeFrom(d.DeepCopy())
		d.Spec.Replicas = &n
		return w.Client.Patch(ctx, &d, patch)
	}
	if err := scale(ctx, 0); err != nil {
		return nil, err
	}
	if err := cluster.Poll(ctx, 2*time.Minute, func() (bool, error) {
		pods, err := w.componentPods(ctx, "webhook")
		return err == nil && len(pods) == 0, nil
	}); err != nil {
		return nil, fmt.Errorf("the webhook's pods did not go: %w", err)
	}
	return func(ctx context.Context) error {
		if err := scale(ctx, replicas); err != nil {
			return err
		}
		return w.WaitDeployments(ctx, 3*time.Minute)
	}, nil
}
