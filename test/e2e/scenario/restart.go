package scenario

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/holdfast-io/holdfast/test/cluster"
)

// restartedAt is the annotation `kubectl rollout restart` sets on a pod
// template.
const restartedAt = "kubectl.kubernetes.io/restartedAt"

// RollingRestart restarts every holdfast component one replica at a time,
// as an operator's `kubectl rollout restart` of every Deployment and the
// DaemonSet does, and waits until each has rolled. Installed by the chart
// that is what it does. As processes, the units role's replicas are stopped
// (SIGTERM: a deliberate stop releases leadership at once) and started again
// one after the other, then the webhook and holdfast-scheduler the same way,
// and holdfast-node's DaemonSet is rolled.
func (w *World) RollingRestart(ctx context.Context) error {
	stamp := time.Now().UTC().Format(time.RFC3339)
	if w.install == Chart {
		var deps appsv1.DeploymentList
		if err := w.Client.List(ctx, &deps, client.InNamespace(cluster.HoldfastNamespace)); err != nil {
			return err
		}
		for i := range deps.Items {
			d := &deps.Items[i]
			if err := w.restartTemplate(ctx, d, &d.Spec.Template.Annotations, stamp); err != nil {
				return err
			}
			if err := w.WaitDeployments(ctx, 5*time.Minute); err != nil {
				return err
			}
		}
	} else {
		if err := w.SetLeaseStandDown(ctx, w.standDown); err != nil {
			return err
		}
		w.Webhook.Stop(10 * time.Second)
		p, err := w.StartWebhookProcess(ctx, w.grantor.Args()...)
		if err != nil {
			return err
		}
		w.Webhook = p
		before := w.SchedulerRestarts()
		w.mu.Lock()
		sched := w.Scheduler
		w.mu.Unlock()
		sched.Stop(30 * time.Second)
		// Its supervisor starts it again, as the Deployment's kubelet would.
		if err := cluster.Poll(ctx, 2*time.Minute, func() (bool, error) { return w.SchedulerRestarts() > before, nil }); err != nil {
			return fmt.Errorf("holdfast-scheduler was not started again: %w", err)
		}
	}
	var ds appsv1.DaemonSetList
	if err := w.Client.List(ctx, &ds, client.InNamespace(cluster.HoldfastNamespace)); err != nil {
		return err
	}
	for i := range ds.Items {
		d := &ds.Items[i]
		if err := w.restartTemplate(ctx, d, &d.Spec.Template.Annotations, stamp); err != nil {
			return err
		}
		if err := w.waitDaemonSetRolled(ctx, client.ObjectKeyFromObject(d), 5*time.Minute); err != nil {
			return err
		}
	}
	return w.WaitNodePlugins(ctx, 3*time.Minute)
}

// restartTemplate sets the restart annotation on obj's pod template (ann
// points into obj).
func (w *World) restartTemplate(ctx context.Context, obj client.Object, ann *map[string]string, stamp string) error {
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	if *ann == nil {
		*ann = map[string]string{}
	}
	(*ann)[restartedAt] = stamp
	return w.Client.Patch(ctx, obj, patch)
}

// waitDaemonSetRolled waits until a DaemonSet has every pod of its current
// template ready.
func (w *World) waitDaemonSetRolled(ctx context.Context, key client.ObjectKey, timeout time.Duration) error {
	var d appsv1.DaemonSet
	err := cluster.Poll(ctx, timeout, func() (bool, error) {
		if err := w.Client.Get(ctx, key, &d); err != nil {
			return false, nil
		}
		st := d.Status
		return st.ObservedGeneration >= d.Generation && st.UpdatedNumberScheduled == st.DesiredNumberScheduled &&
			st.NumberReady == st.DesiredNumberScheduled && st.NumberAvailable == st.DesiredNumberScheduled, nil
	})
	if err != nil {
		return fmt.Errorf("DaemonSet %s did not roll: %+v: %w", key, d.Status, err)
	}
	return nil
}
