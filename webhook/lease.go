package webhook

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

var leaseGVR = coordinationv1.SchemeGroupVersion.WithResource("leases").GroupResource()
var leaseGK = coordinationv1.SchemeGroupVersion.WithKind("Lease").GroupKind()

func leaseHeldUntil(l *coordinationv1.Lease) string {
	if exp, ok := policy.SwapLeaseExpiry(l); ok {
		return "until " + exp.UTC().Format(time.RFC3339)
	}
	return "with no expiry"
}

// checkSwapLease applies the swap Lease rules of docs/design.md §7 to a create (old
// nil), an update, or a delete (newL nil). Other Leases pass.
func checkSwapLease(o *Options, r requester, old, newL *coordinationv1.Lease, now time.Time) verdict {
	var v verdict
	obj := newL
	if obj == nil {
		obj = old
	}
	if !policy.IsSwapLease(obj.Namespace, obj.Name) {
		return v
	}
	holderPath := field.NewPath("spec", "holderIdentity")
	annPath := field.NewPath("metadata", "annotations")
	// The voters role alone runs swaps.
	isVoters := r.User == o.VotersUser()
	oldHeld := old != nil && policy.SwapLeaseHeld(old, now)

	if newL == nil {
		if oldHeld {
			v.forbid(field.Forbidden(holderPath, fmt.Sprintf(
				"the swap Lease is held by %s %s for swap %s; it may be deleted only once released or expired",
				policy.SwapLeaseHolder(old), leaseHeldUntil(old), old.Annotations[holdfastv1.AnnotationSwapID])))
		}
		return v
	}

	if newL.Labels[holdfastv1.LabelGuarded] != "true" {
		v.forbid(field.Forbidden(field.NewPath("metadata", "labels").Key(holdfastv1.LabelGuarded),
			`must be "true" on the swap Lease, so that every change of it is checked`))
	}

	var oldSpec coordinationv1.LeaseSpec
	var oldAnn map[string]string
	if old != nil {
		oldSpec, oldAnn = old.Spec, old.Annotations
	}
	if !isVoters && !equality.Semantic.DeepEqual(oldSpec, newL.Spec) {
		v.forbid(field.Forbidden(holderPath, fmt.Sprintf(
			"only the holdfast voter controller (%s) may acquire, renew or release the swap Lease", o.VotersUser())))
	}
	swapKeys := changedKeys(oldAnn, newL.Annotations, func(k string) bool {
		return k == holdfastv1.AnnotationSwapID || k == holdfastv1.AnnotationSwapNodes
	})
	if !isVoters {
		for _, k := range swapKeys {
			v.forbid(field.Forbidden(annPath.Key(k), fmt.Sprintf("only the holdfast voter controller (%s) may change it", o.VotersUser())))
		}
	}

	newHolder := policy.SwapLeaseHolder(newL)
	if oldHeld && newHolder != "" {
		if oldHolder := policy.SwapLeaseHolder(old); newHolder != oldHolder {
			v.forbid(field.Forbidden(holderPath, fmt.Sprintf(
				"the swap Lease is held by %s %s; another holder may take it only after it expires or is released",
				oldHolder, leaseHeldUntil(old))))
		}
		// During a swap its record stays: the ID never changes and no node is
		// dropped (node recovery would then take it out of service).
		if ov, nv := old.Annotations[holdfastv1.AnnotationSwapID], newL.Annotations[holdfastv1.AnnotationSwapID]; ov != nv {
			v.forbid(field.Forbidden(annPath.Key(holdfastv1.AnnotationSwapID), fmt.Sprintf(
				"swap %s is in progress; it may change only when the Lease is released", ov)))
		}
		kept := map[string]bool{}
		for _, n := range policy.SwapLeaseNodes(newL) {
			kept[n] = true
		}
		for _, n := range policy.SwapLeaseNodes(old) {
			if !kept[n] {
				v.forbid(field.Forbidden(annPath.Key(holdfastv1.AnnotationSwapNodes), fmt.Sprintf(
					"may not drop node %s while swap %s holds the Lease; nodes may only be added", n, old.Annotations[holdfastv1.AnnotationSwapID])))
			}
		}
	}

	if newHolder != "" {
		if newL.Annotations[holdfastv1.AnnotationSwapID] == "" {
			v.invalidf(field.Required(annPath.Key(holdfastv1.AnnotationSwapID), "a held swap Lease names its swap"))
		}
		if len(policy.SwapLeaseNodes(newL)) == 0 {
			v.invalidf(field.Required(annPath.Key(holdfastv1.AnnotationSwapNodes),
				"a held swap Lease lists the swap's nodes (comma separated), which node recovery leaves alone"))
		}
	}
	for _, n := range policy.SwapLeaseNodes(newL) {
		if msgs := validation.IsDNS1123Subdomain(n); len(msgs) > 0 {
			v.invalidf(field.Invalid(annPath.Key(holdfastv1.AnnotationSwapNodes), n, "not a node name: "+msgs[0]))
		}
	}
	return v
}

// LeaseValidator guards the voter swap Lease.
type LeaseValidator struct {
	Options *Options
}

var _ admission.Validator[*coordinationv1.Lease] = &LeaseValidator{}

func (lv *LeaseValidator) ValidateCreate(ctx context.Context, l *coordinationv1.Lease) (admission.Warnings, error) {
	return lv.validate(ctx, nil, l)
}

func (lv *LeaseValidator) ValidateUpdate(ctx context.Context, old, l *coordinationv1.Lease) (admission.Warnings, error) {
	return lv.validate(ctx, old, l)
}

func (lv *LeaseValidator) ValidateDelete(ctx context.Context, l *coordinationv1.Lease) (admission.Warnings, error) {
	return lv.validate(ctx, l, nil)
}

func (lv *LeaseValidator) validate(ctx context.Context, old, l *coordinationv1.Lease) (admission.Warnings, error) {
	r, err := requesterFrom(ctx)
	if err != nil {
		return nil, err
	}
	v := checkSwapLease(lv.Options, r, old, l, lv.Options.Now())
	name := ""
	if l != nil {
		name = l.Name
	} else {
		name = old.Name
	}
	return nil, v.err(leaseGVR, leaseGK, name)
}
