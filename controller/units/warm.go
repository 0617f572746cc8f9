package units

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

// WarmPod is a unit's warm standby pod as one pass found it: kept on its
// standby, holding no epoch (docs/design.md §3, Warm standby).
type WarmPod struct {
	Name string
	UID  types.UID
	Node string
	// Ready: scheduled on its standby, with an address, and its readiness
	// probe passing (its devices answer): promotable without a start.
	Ready bool
	// Why it is not ready, for the WarmStandby condition.
	Why string
}

// WarmStandbys are a unit's warm standbys as one pass found them.
type WarmStandbys struct {
	// Due are the standbys due a warm pod: eligible targets other than the
	// bound node, while the unit keeps warm standbys. Sorted.
	Due []string
	// Pods are the warm pods kept, by standby.
	Pods map[string]WarmPod
}

// IsWarmPod reports whether pod is a warm standby pod not yet promoted: it
// names a standby and carries no epoch.
func IsWarmPod(pod *corev1.Pod) bool {
	_, warm := pod.Labels[holdfastv1.LabelWarmStandby]
	_, epoch := pod.Labels[holdfastv1.LabelEpoch]
	return warm && !epoch
}

// WarmRuntimePod builds the unit's warm pod on node: the runtime pod of a
// binding, under the unit's promise as it is now (the promise a re-bind
// records), named after the standby, labelled with it and with no epoch,
// and told it is a warm standby, so it reads its devices and writes
// nothing until a grant binds it (L1, L7).
func WarmRuntimePod(u *holdfastv1.Unit, node string) *corev1.Pod {
	pod := RuntimePod(u, 0, Placement{Node: node})
	pod.Name = holdfastv1.WarmPodName(u.Name, node)
	delete(pod.Labels, holdfastv1.LabelEpoch)
	pod.Labels[holdfastv1.LabelWarmStandby] = node
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		c.Env = slices.Insert(c.Env, 0, corev1.EnvVar{Name: holdfastv1.RuntimeEnvWarmStandby, Value: "true"})
	}
	return pod
}

// warmDue are the standbys due a warm pod: every node that admission and
// the scheduler admit one on (policy.WarmStandbyRefusal: a designated
// standby of a warmStandby Failover unit, not its bound node), while the
// Unit is not being deleted and its binding is placed. While a binding
// waits for the scheduler none is due: a warm pod holds the runtime's host
// ports, and the scheduler must be free to place the binding's pod on any
// standby.
func warmDue(u *holdfastv1.Unit, nodes []corev1.Node) []string {
	if b := u.Status.RuntimeBinding; !u.DeletionTimestamp.IsZero() || b == nil || b.Node == "" {
		return nil
	}
	var due []string
	for i := range nodes {
		if policy.WarmStandbyRefusal(u, &nodes[i]) == "" {
			due = append(due, nodes[i].Name)
		}
	}
	slices.Sort(due)
	return due
}

// warmLost says why a warm pod can no longer become the unit's runtime, or
// "" when it still can: it failed or finished (an eviction fails it), its
// node is gone, or it runs another program than the unit names now.
func warmLost(u *holdfastv1.Unit, pod *corev1.Pod, nodeExists func(string) bool) string {
	switch {
	case pod.Status.Phase == corev1.PodFailed:
		why := "failed"
		if pod.Status.Reason != "" {
			why += " (" + pod.Status.Reason + ")"
		}
		return why
	case pod.Status.Phase == corev1.PodSucceeded:
		return "its container exited"
	case pod.Spec.NodeName != "" && !nodeExists(pod.Spec.NodeName):
		return "its node " + pod.Spec.NodeName + " is gone"
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == holdfastv1.RuntimeContainer && (c.Image != u.Spec.Runtime.Image || !slices.Equal(c.Args, u.Spec.Runtime.Args)) {
			return "it runs another image or arguments than spec.runtime"
		}
	}
	return ""
}

// promotedWarm reports whether pod is the warm pod the binding b promoted:
// the binding names it and its UID.
func promotedWarm(b *holdfastv1.RuntimeBinding, pod *corev1.Pod) bool {
	return b != nil && b.PodUID != "" && pod.Name == b.Pod && string(pod.UID) == b.PodUID
}

// ensureWarmPods keeps one warm pod on each standby due one: it deletes a
// warm pod that is lost or no longer due (never the one the binding
// promoted), creates a missing one, and returns what it found. A warm pod
// writes nothing, so deleting one is never a safety decision.
func (r *Reconciler) ensureWarmPods(ctx context.Context, u *holdfastv1.Unit, pods []corev1.Pod, nodes []corev1.Node) (WarmStandbys, error) {
	log := klog.FromContext(ctx)
	exists := map[string]bool{}
	for _, n := range nodes {
		exists[n.Name] = true
	}
	w := WarmStandbys{Due: warmDue(u, nodes), Pods: map[string]WarmPod{}}
	kept := map[string]bool{}
	for i := range pods {
		p := &pods[i]
		if !IsWarmPod(p) || promotedWarm(u.Status.RuntimeBinding, p) {
			continue
		}
		node := p.Labels[holdfastv1.LabelWarmStandby]
		if !p.DeletionTimestamp.IsZero() {
			kept[node] = true // its replacement waits for the name
			continue
		}
		why := warmLost(u, p, func(n string) bool { return exists[n] })
		lost := why != ""
		if !lost && !slices.Contains(w.Due, node) {
			why = fmt.Sprintf("standby %s is not due a warm pod (warmStandby off, not an eligible target, the bound node, or a binding waiting for the scheduler)", node)
		}
		if why != "" {
			if err := r.Client.Delete(ctx, p, client.Preconditions{UID: &p.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return w, fmt.Errorf("deleting warm pod %s: %w", p.Name, err)
			}
			reason := EventWarmPodRemoved
			if lost {
				reason = EventWarmPodLost
				warmReplacements.WithLabelValues(u.Namespace, u.Name).Inc()
				r.Recorder.Eventf(u, p, corev1.EventTypeWarning, reason, reason, "Warm pod %s on standby %s is lost (%s); a new one replaces it", p.Name, node, why)
			} else {
				r.Recorder.Eventf(u, p, corev1.EventTypeNormal, reason, reason, "Deleted warm pod %s: %s", p.Name, why)
			}
			log.Info("Deleted a warm pod", "pod", klog.KObj(p), "standby", node, "why", why)
			kept[node] = true
			continue
		}
		kept[node] = true
		wp := WarmPod{Name: p.Name, UID: p.UID, Node: node}
		switch {
		case p.Spec.NodeName == "":
			wp.Why = "pod " + p.Name + " is not scheduled"
		case p.Spec.NodeName != node:
			wp.Why = "pod " + p.Name + " runs on " + p.Spec.NodeName
		case p.Status.PodIP == "":
			wp.Why = "pod " + p.Name + " has no address yet"
		case !PodReady(p):
			wp.Why = "pod " + p.Name + " is not ready (its devices do not answer, or it is starting)"
		default:
			wp.Ready = true
		}
		w.Pods[node] = wp
	}
	for _, node := range w.Due {
		if kept[node] {
			continue
		}
		pod := WarmRuntimePod(u, node)
		if r.InsecurePlaintextLease {
			PlaintextLease(pod)
		}
		if err := r.Client.Create(ctx, pod); err != nil {
			if apierrors.IsAlreadyExists(err) {
				continue // the cache is behind; the watch brings it
			}
			return w, fmt.Errorf("creating warm pod %s: %w", pod.Name, err)
		}
		log.Info("Created a warm pod", "pod", klog.KObj(pod), "standby", node)
	}
	return w, nil
}

// promoteWarm is step 2 of a promotion: the binding names the warm pod and
// its UID, and the pod now takes the binding's epoch label, once. The
// write is conditional on the pod as read, so it never labels a pod the
// binding does not name. The grant (step 3) follows only from a pod that
// carries the label (runtimeTarget).
func (r *Reconciler) promoteWarm(ctx context.Context, u *holdfastv1.Unit, pod *corev1.Pod) (*corev1.Pod, error) {
	b := u.Status.RuntimeBinding
	if !promotedWarm(b, pod) {
		return nil, nil
	}
	if e, ok := PodEpoch(pod); ok {
		if e == b.Epoch {
			return pod, nil
		}
		return nil, nil
	}
	p := pod.DeepCopy()
	patch := client.MergeFromWithOptions(pod.DeepCopy(), client.MergeFromWithOptimisticLock{})
	p.Labels[holdfastv1.LabelEpoch] = fmt.Sprint(b.Epoch)
	if err := r.Client.Patch(ctx, p, patch); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil, nil // the next pass reads it again
		}
		return nil, fmt.Errorf("labelling warm pod %s with epoch %d: %w", pod.Name, b.Epoch, err)
	}
	klog.FromContext(ctx).Info("Labelled the promoted warm pod with its epoch", "pod", klog.KObj(p), "epoch", b.Epoch)
	return p, nil
}

// labelPromoted is step 2 right after the promotion's binding is written,
// on the warm pod as the cache has it; a pod the cache does not show yet is
// labelled by the next pass (ensurePods).
func (r *Reconciler) labelPromoted(ctx context.Context, u *holdfastv1.Unit) error {
	b := u.Status.RuntimeBinding
	var wp corev1.Pod
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: u.Namespace, Name: b.Pod}, &wp); err != nil {
		return client.IgnoreNotFound(err)
	}
	lp, err := r.promoteWarm(ctx, u, &wp)
	if err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Promoted a warm pod", "pod", klog.KObj(&wp), "epoch", b.Epoch, "node", b.Node, "labelled", lp != nil)
	return nil
}

// warmFor is the ready warm pod an automatic re-bind promotes: on the
// first untried free standby, in the order the standbys are named, that
// runs one; nil when none does (the re-bind is cold).
func warmFor(in *Inputs, untried []string) *WarmPod {
	for _, n := range untried {
		if w, ok := in.Warm.Pods[n]; ok && w.Ready {
			return &w
		}
	}
	return nil
}

// noteWarm is the WarmStandby condition and gauges: how many standbys due
// a warm pod run a ready one, and why each other does not.
func noteWarm(p *Plan, in *Inputs) {
	u := in.Unit
	if !u.Spec.Availability.WarmStandby {
		meta.RemoveStatusCondition(&p.Status.Conditions, holdfastv1.ConditionWarmStandby)
		warmGauge.DeletePartialMatch(map[string]string{"namespace": u.Namespace, "unit": u.Name})
		return
	}
	w := in.Warm
	ready := 0
	var why []string
	for _, n := range w.Due {
		wp, ok := w.Pods[n]
		switch {
		case !ok:
			why = append(why, n+": no warm pod yet")
		case wp.Ready:
			ready++
		default:
			why = append(why, n+": "+wp.Why)
		}
	}
	c := metav1.Condition{Type: holdfastv1.ConditionWarmStandby, Status: metav1.ConditionFalse}
	switch {
	case len(w.Due) == 0:
		c.Reason, c.Message = holdfastv1.ReasonWarmNoStandby, "No eligible standby other than the bound node: no warm pod is kept, and a re-bind would be cold"
	case ready == len(w.Due):
		c.Status, c.Reason = metav1.ConditionTrue, holdfastv1.ReasonWarmAllReady
		c.Message = fmt.Sprintf("%d of %d standbys run a ready warm pod (%s)", ready, len(w.Due), strings.Join(w.Due, ", "))
	default:
		c.Reason = holdfastv1.ReasonWarmNotAllReady
		c.Message = fmt.Sprintf("%d of %d standbys run a ready warm pod; a re-bind to one without is cold (%s)", ready, len(w.Due), strings.Join(why, "; "))
	}
	c.Message = truncate(c.Message, 1000)
	setCondition(&p.Status, c, in.Now)
	warmGauge.WithLabelValues(u.Namespace, u.Name, "due").Set(float64(len(w.Due)))
	warmGauge.WithLabelValues(u.Namespace, u.Name, "ready").Set(float64(ready))
}

// Warm standby Event reasons.
const (
	// EventWarmPodLost: a warm pod failed, was evicted, lost its node or
	// runs an outdated program; it is deleted and replaced.
	EventWarmPodLost = "WarmPodLost"
	// EventWarmPodRemoved: a warm pod no longer due (warmStandby turned
	// off, its standby left the targets) is deleted.
	EventWarmPodRemoved = "WarmPodRemoved"
)

var (
	warmGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "holdfast_unit_warm_standbys",
		Help: "Warm standbys of each unit with warmStandby: due (eligible standbys other than the bound node) and ready (running a ready warm pod).",
	}, []string{"namespace", "unit", "state"})
	warmReplacements = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_unit_warm_pods_lost_total",
		Help: "Warm pods deleted for replacement: failed, evicted, their node gone, or running an outdated program.",
	}, []string{"namespace", "unit"})
	warmPromotions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_unit_warm_promotions_total",
		Help: "Automatic re-binds that promoted a ready warm pod instead of creating a runtime pod.",
	}, []string{"namespace", "unit"})
)

func init() {
	metrics.Registry.MustRegister(warmGauge, warmReplacements, warmPromotions)
}
