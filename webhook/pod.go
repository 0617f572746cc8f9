package webhook

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

var podGVR = corev1.SchemeGroupVersion.WithResource("pods").GroupResource()
var podGK = corev1.SchemeGroupVersion.WithKind("Pod").GroupKind()

// checkRuntimePodCreate: a runtime pod is created by the holdfast controller
// (or a cluster admin) only, since a second pod of a unit could write to its
// devices; it is placed by holdfast-scheduler only, so it may not name a node
// or another scheduler; and its name and labels must agree (the binding
// webhook recognises runtime pods by name).
func checkRuntimePodCreate(o *Options, r requester, p *corev1.Pod) verdict {
	var v verdict
	unit, ok := p.Labels[holdfastv1.LabelUnit]
	if !ok {
		return v
	}
	labelPath := field.NewPath("metadata", "labels")
	if r.User != o.Controller && !inAnyGroup(r.Groups, []string{ClusterAdminGroup}) {
		v.forbid(field.Forbidden(labelPath.Key(holdfastv1.LabelUnit), fmt.Sprintf(
			"only the holdfast controller (%s) creates the runtime pod of unit %s: a pod outside its binding could write to the unit's devices", o.Controller, unit)))
	}
	if msgs := validation.IsDNS1123Subdomain(unit); len(msgs) > 0 {
		v.invalidf(field.Invalid(labelPath.Key(holdfastv1.LabelUnit), unit, "not a Unit name: "+msgs[0]))
	}
	epochText := p.Labels[holdfastv1.LabelEpoch]
	epoch, err := holdfastv1.ParseEpoch(epochText)
	if err != nil {
		v.invalidf(field.Invalid(labelPath.Key(holdfastv1.LabelEpoch), epochText, "must be the binding's epoch, a positive integer"))
	} else if want := holdfastv1.RuntimePodName(unit, epoch); p.Name != want {
		v.invalidf(field.Invalid(field.NewPath("metadata", "name"), p.Name, fmt.Sprintf("a runtime pod of unit %s at epoch %d is named %s", unit, epoch, want)))
	}
	checkPlacedByHoldfastScheduler(&v, p)
	return v
}

// checkRuntimePodUpdate: the unit, epoch and warm standby labels are set at
// creation only; a runtime whose epoch label changed could escape the fence
// agent (L7). The one exception, a warm pod's promotion, is checkPromotion's.
func checkRuntimePodUpdate(old, p *corev1.Pod) verdict {
	var v verdict
	labelPath := field.NewPath("metadata", "labels")
	promotion := isPromotion(old, p)
	for _, k := range changedKeys(old.Labels, p.Labels, func(k string) bool {
		return k == holdfastv1.LabelUnit || k == holdfastv1.LabelEpoch || k == holdfastv1.LabelWarmStandby
	}) {
		if promotion && k == holdfastv1.LabelEpoch {
			continue
		}
		v.forbid(field.Forbidden(labelPath.Key(k), "is set when the runtime pod is created and never changes: the fence agent stops runtimes by it"))
	}
	return v
}

// PodValidator guards the runtime pods (labelled holdfast.io/unit), warm
// standby pods among them.
type PodValidator struct {
	Options *Options
	Reader  client.Reader
}

var _ admission.Validator[*corev1.Pod] = PodValidator{}

func (pv PodValidator) ValidateCreate(ctx context.Context, p *corev1.Pod) (admission.Warnings, error) {
	r, err := requesterFrom(ctx)
	if err != nil {
		return nil, err
	}
	if _, warm := policy.WarmStandbyNode(p); !warm {
		v := checkRuntimePodCreate(pv.Options, r, p)
		return nil, v.err(podGVR, podGK, p.Name)
	}
	u, err := pv.unit(ctx, p)
	if err != nil {
		return nil, err
	}
	var n *corev1.Node
	var node corev1.Node
	if err := pv.Reader.Get(ctx, client.ObjectKey{Name: p.Labels[holdfastv1.LabelWarmStandby]}, &node); err == nil {
		n = &node
	} else if !apierrors.IsNotFound(err) {
		return nil, readFailed("reading the warm standby pod's node", err)
	}
	v := checkWarmPodCreate(pv.Options, r, p, u, n)
	return nil, v.err(podGVR, podGK, p.Name)
}

func (pv PodValidator) ValidateUpdate(ctx context.Context, old, p *corev1.Pod) (admission.Warnings, error) {
	v := checkRuntimePodUpdate(old, p)
	if isPromotion(old, p) {
		r, err := requesterFrom(ctx)
		if err != nil {
			return nil, err
		}
		u, err := pv.unit(ctx, p)
		if err != nil {
			return nil, err
		}
		pv := checkPromotion(pv.Options, r, p, u)
		v.forbidAll(pv.forbidden)
	}
	return nil, v.err(podGVR, podGK, p.Name)
}

func (PodValidator) ValidateDelete(context.Context, *corev1.Pod) (admission.Warnings, error) {
	return nil, nil
}

// unit reads the Unit a runtime pod's label names; nil when absent.
func (pv PodValidator) unit(ctx context.Context, p *corev1.Pod) (*holdfastv1.Unit, error) {
	var u holdfastv1.Unit
	err := pv.Reader.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: p.Labels[holdfastv1.LabelUnit]}, &u)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, readFailed("reading the runtime pod's Unit", err)
	}
	return &u, nil
}

// checkBinding: only holdfast-scheduler binds a runtime pod.
func checkBinding(o *Options, r requester, b *corev1.Binding, pod *corev1.Pod) verdict {
	var v verdict
	if pod == nil || r.User == o.Scheduler {
		return v
	}
	if unit, ok := pod.Labels[holdfastv1.LabelUnit]; ok {
		v.forbid(field.Forbidden(field.NewPath("target"), fmt.Sprintf(
			"pod %s is the runtime of unit %s; only %s (%s) binds it to a node", pod.Name, unit, holdfastv1.SchedulerName, o.Scheduler)))
	}
	return v
}

// BindingValidator guards pods/binding for runtime pods.
type BindingValidator struct {
	Options *Options
	Reader  client.Reader
}

var _ admission.Validator[*corev1.Binding] = &BindingValidator{}

func (bv *BindingValidator) ValidateCreate(ctx context.Context, b *corev1.Binding) (admission.Warnings, error) {
	r, err := requesterFrom(ctx)
	if err != nil {
		return nil, err
	}
	if r.User == bv.Options.Scheduler {
		return nil, nil
	}
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return nil, err
	}
	// The Binding carries the pod's name, not its labels.
	var pod corev1.Pod
	if err := bv.Reader.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: req.Name}, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, readFailed("reading the pod to bind", err)
	}
	v := checkBinding(bv.Options, r, b, &pod)
	return nil, v.err(podGVR, podGK, pod.Name)
}

func (bv *BindingValidator) ValidateUpdate(context.Context, *corev1.Binding, *corev1.Binding) (admission.Warnings, error) {
	return nil, nil
}

func (bv *BindingValidator) ValidateDelete(context.Context, *corev1.Binding) (admission.Warnings, error) {
	return nil, nil
}
