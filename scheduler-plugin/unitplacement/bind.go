package unitplacement

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/pluginmetrics"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/runtimepod"
)

// Bind records the runtime's node in its unit's binding and then binds the
// pod as DefaultBinder does; it skips every other pod, which DefaultBinder
// (after it in the profile's bind order) binds. The record is taken here
// rather than at PreBind because kube-scheduler patches a pod's
// status.nominatedNodeName before any PreBind that has work to do: one more
// apiserver write per runtime, which nothing of holdfast reads.
func (pl *UnitPlacement) Bind(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodeName string) *fwk.Status {
	if _, ok := policy.RuntimeUnit(pod); !ok {
		return fwk.NewStatus(fwk.Skip)
	}
	if _, warm := policy.WarmStandbyNode(pod); warm {
		if status := pl.confirmWarm(ctx, pod, nodeName); !status.IsSuccess() {
			return status
		}
		return pl.binder.Bind(ctx, state, pod, nodeName)
	}
	if status := pl.record(ctx, pod, nodeName); !status.IsSuccess() {
		return status
	}
	return pl.binder.Bind(ctx, state, pod, nodeName)
}

// errRecheck sends record round its retry loop to decide on the
// apiserver's copy of the Unit.
var errRecheck = apierrors.NewConflict(holdfastv1.GroupVersion.WithResource("units").GroupResource(), "", fmt.Errorf("re-read from the apiserver"))

// record writes nodeName, the pod and the time into the unit's binding with
// an update conditioned on the Unit's resourceVersion, re-reading and
// re-checking on every conflict: of two pods or two schedulers racing for
// one epoch exactly one write lands, and the other finds the epoch bound and
// is refused, so its pod is never bound. The ledger is the controller's: it
// adds the recorded node of an Automatic binding to unsettledRebinds. The
// record is never undone, even when the binding that follows fails (a bind
// reported as failed may have landed): the pod, scheduled again, may go to
// the recorded node only (placement.boundNode), and record accepts it there
// without a second write.
func (pl *UnitPlacement) record(ctx context.Context, pod *corev1.Pod, nodeName string) *fwk.Status {
	logger := klog.FromContext(ctx)
	key, _ := policy.RuntimeUnit(pod)
	display := runtimepod.Display(key, pod.Namespace)
	node, err := pl.handle.SharedInformerFactory().Core().V1().Nodes().Lister().Get(nodeName)
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("reading node %s: %w", nodeName, err))
	}
	var refusal *fwk.Status
	already := false
	// The first attempt starts from the informer's copy, which saves a
	// round trip on the path every runtime takes; a conflict, or a refusal
	// read from that copy, is decided again on the apiserver's.
	cached := true
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		reader := client.Reader(pl.live)
		if cached {
			reader = pl.units
			defer func() { cached = false }()
		}
		refusal, already = nil, false
		var u holdfastv1.Unit
		if err := reader.Get(ctx, key, &u); err != nil {
			if apierrors.IsNotFound(err) && !cached {
				refusal = unschedulable("unit %s not found", display)
				return nil
			}
			if cached {
				return errRecheck
			}
			return err
		}
		p, status := authorise(&u, pod)
		if !status.IsSuccess() {
			if cached {
				return errRecheck
			}
			refusal = status
			return nil
		}
		if reason, _ := p.unitRefusal(node); reason != "" {
			if cached {
				return errRecheck
			}
			refusal = unschedulable("node %s: %s", nodeName, reason)
			return nil
		}
		if p.boundNode == nodeName {
			already = true // recorded by an earlier attempt of this pod
			return nil
		}
		b := u.Status.RuntimeBinding
		b.Node = nodeName
		b.Pod = pod.Name
		b.BoundAt = &metav1.Time{Time: pl.clock.Now()}
		return pl.live.Status().Update(ctx, &u)
	})
	if err != nil {
		pluginmetrics.BindingRecords.WithLabelValues(pluginmetrics.Error).Inc()
		return fwk.AsStatus(fmt.Errorf("recording node %s in the binding of unit %s: %w", nodeName, display, err))
	}
	if refusal != nil {
		pluginmetrics.BindingRecords.WithLabelValues(pluginmetrics.Refused).Inc()
		logger.V(2).Info("Runtime pod refused at Bind", "pod", klog.KObj(pod), "unit", key, "node", nodeName, "reason", refusal.Message())
		return refusal
	}
	if already {
		pluginmetrics.BindingRecords.WithLabelValues(pluginmetrics.AlreadyRecorded).Inc()
	} else {
		pluginmetrics.BindingRecords.WithLabelValues(pluginmetrics.Recorded).Inc()
	}
	logger.V(2).Info("Recorded the runtime binding", "pod", klog.KObj(pod), "unit", key, "node", nodeName)
	return nil
}

// confirmWarm decides a warm standby pod's node again on the apiserver's
// copy of its Unit before it is bound (the unit may have been re-bound to
// that very node since PreFilter). A warm pod holds no epoch: nothing is
// written to the binding.
func (pl *UnitPlacement) confirmWarm(ctx context.Context, pod *corev1.Pod, nodeName string) *fwk.Status {
	key, _ := policy.RuntimeUnit(pod)
	node, err := pl.handle.SharedInformerFactory().Core().V1().Nodes().Lister().Get(nodeName)
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("reading node %s: %w", nodeName, err))
	}
	var u holdfastv1.Unit
	if err := pl.live.Get(ctx, key, &u); err != nil {
		if apierrors.IsNotFound(err) {
			return unschedulable("unit %s not found", runtimepod.Display(key, pod.Namespace))
		}
		return fwk.AsStatus(err)
	}
	p, status := authorise(&u, pod)
	if !status.IsSuccess() {
		return status
	}
	if reason, _ := p.unitRefusal(node); reason != "" {
		klog.FromContext(ctx).V(2).Info("Warm standby pod refused at Bind", "pod", klog.KObj(pod), "unit", key, "node", nodeName, "reason", reason)
		return unschedulable("node %s: %s", nodeName, reason)
	}
	return nil
}
