package webhook

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

// checkWarmPodCreate: a warm standby pod (docs/design.md §3, Warm standby)
// is the controller's alone, holds no epoch, and stands by on a designated
// standby of a unit that keeps warm standbys, other than its bound node. u
// and n are the Unit and the Node its labels name, nil when absent.
func checkWarmPodCreate(o *Options, r requester, p *corev1.Pod, u *holdfastv1.Unit, n *corev1.Node) verdict {
	var v verdict
	unit := p.Labels[holdfastv1.LabelUnit]
	node := p.Labels[holdfastv1.LabelWarmStandby]
	labelPath := field.NewPath("metadata", "labels")
	warmPath := labelPath.Key(holdfastv1.LabelWarmStandby)
	if r.User != o.Controller {
		v.forbid(field.Forbidden(warmPath, fmt.Sprintf(
			"only the holdfast controller (%s) creates a warm standby pod of unit %s: a grant may make it the unit's writer", o.Controller, unit)))
	}
	if msgs := validation.IsDNS1123Subdomain(unit); len(msgs) > 0 {
		v.invalidf(field.Invalid(labelPath.Key(holdfastv1.LabelUnit), unit, "not a Unit name: "+msgs[0]))
	}
	if msgs := validation.IsDNS1123Subdomain(node); len(msgs) > 0 {
		v.invalidf(field.Invalid(warmPath, node, "must name the standby node the pod is kept on: "+msgs[0]))
	} else if want := holdfastv1.WarmPodName(unit, node); p.Name != want {
		v.invalidf(field.Invalid(field.NewPath("metadata", "name"), p.Name, fmt.Sprintf("the warm standby pod of unit %s on node %s is named %s", unit, node, want)))
	}
	if e, ok := p.Labels[holdfastv1.LabelEpoch]; ok {
		v.forbid(field.Forbidden(labelPath.Key(holdfastv1.LabelEpoch), fmt.Sprintf(
			"a warm standby pod is created without an epoch (not %q): the controller labels it once a binding promotes it", e)))
	}
	checkPlacedByHoldfastScheduler(&v, p)
	switch {
	case u == nil:
		v.forbid(field.Forbidden(labelPath.Key(holdfastv1.LabelUnit), fmt.Sprintf(
			"unit %s does not exist: a warm standby pod stands by for a Unit with spec.availability.warmStandby", unit)))
	case n == nil:
		v.forbid(field.Forbidden(warmPath, fmt.Sprintf("node %s does not exist: name a designated standby of unit %s", node, unit)))
	default:
		if why := policy.WarmStandbyRefusal(u, n); why != "" {
			v.forbid(field.Forbidden(warmPath, why))
		}
	}
	return v
}

// checkPlacedByHoldfastScheduler: a runtime pod, warm or not, names no node
// and no other scheduler.
func checkPlacedByHoldfastScheduler(v *verdict, p *corev1.Pod) {
	if p.Spec.NodeName != "" {
		v.forbid(field.Forbidden(field.NewPath("spec", "nodeName"), fmt.Sprintf(
			"must be empty: %s places runtime pods, so a failover never lands on a node its rules refuse", holdfastv1.SchedulerName)))
	}
	if p.Spec.SchedulerName != holdfastv1.SchedulerName {
		v.forbid(field.Forbidden(field.NewPath("spec", "schedulerName"), fmt.Sprintf(
			"must be %s: another scheduler would bypass the unit's placement rules", holdfastv1.SchedulerName)))
	}
}

// isPromotion: the one label change a runtime pod may see, a warm standby
// pod given its first epoch with its unit and standby labels unchanged.
func isPromotion(old, p *corev1.Pod) bool {
	_, wasWarm := old.Labels[holdfastv1.LabelWarmStandby]
	_, hadEpoch := old.Labels[holdfastv1.LabelEpoch]
	_, hasEpoch := p.Labels[holdfastv1.LabelEpoch]
	return wasWarm && !hadEpoch && hasEpoch &&
		len(changedKeys(old.Labels, p.Labels, func(k string) bool { return k == holdfastv1.LabelUnit || k == holdfastv1.LabelWarmStandby })) == 0
}

// checkPromotion: the controller labels a warm pod with an epoch only after
// the binding of that epoch recorded this pod (name and UID), so a warm
// runtime bound to an epoch always has a binding that named it and the fence
// agent stops it by that epoch once the binding moves on (L7). u is the
// pod's Unit, nil when absent.
func checkPromotion(o *Options, r requester, p *corev1.Pod, u *holdfastv1.Unit) verdict {
	var v verdict
	path := field.NewPath("metadata", "labels").Key(holdfastv1.LabelEpoch)
	label := p.Labels[holdfastv1.LabelEpoch]
	if r.User != o.Controller {
		v.forbid(field.Forbidden(path, fmt.Sprintf(
			"only the holdfast controller (%s) labels a warm standby pod with the epoch of the binding that promoted it", o.Controller)))
		return v
	}
	unit := p.Labels[holdfastv1.LabelUnit]
	var b *holdfastv1.RuntimeBinding
	if u != nil {
		b = u.Status.RuntimeBinding
	}
	switch {
	case b == nil:
		v.forbid(field.Forbidden(path, fmt.Sprintf(
			"unit %s has no binding: a warm standby pod is labelled with an epoch only once the binding of that epoch records it", unit)))
	case label != strconv.FormatInt(b.Epoch, 10) || b.Pod != p.Name || b.PodUID != string(p.UID):
		v.forbid(field.Forbidden(path, fmt.Sprintf(
			"may be set only to the epoch of unit %s's binding that records this pod by name and UID (the binding is epoch %d, pod %q, podUID %q; this label is %q): record the binding first",
			unit, b.Epoch, b.Pod, b.PodUID, label)))
	}
	return v
}
