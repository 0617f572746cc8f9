package webhook

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// checkPromiseRecord keeps a binding's promise and hand-over the
// controller's alone (docs/design.md §3 L11): every expiry, Hold and margin
// decision about the runtime reads the promise, so a record weakened by
// anyone else would start a new writer before the runtime stops.
func checkPromiseRecord(v *verdict, bindPath *field.Path, old, u *holdfastv1.Unit) {
	ob, nb := old.Status.RuntimeBinding, u.Status.RuntimeBinding
	if ob == nil || nb == nil || ob.Epoch != nb.Epoch {
		return
	}
	if !equality.Semantic.DeepEqual(ob.Promise, nb.Promise) {
		what := "what the runtime holds"
		if p := ob.Promise; p != nil {
			what = fmt.Sprintf("mode %s, lease %ds, hold bound %v", p.Mode, p.LeaseDurationSeconds, p.HoldBound())
		}
		v.forbid(field.Forbidden(bindPath.Child("promise"), fmt.Sprintf(
			"only the holdfast controller records the promise the runtime at epoch %d holds (%s): its expiry, Hold and margin decisions read it; change spec.availability instead", ob.Epoch, what)))
	}
	if !equality.Semantic.DeepEqual(ob.HandOver, nb.HandOver) {
		v.forbid(field.Forbidden(bindPath.Child("handOver"), fmt.Sprintf(
			"only the holdfast controller starts or ends the hand-over of epoch %d; change spec.availability.mode or spec.runtime instead", ob.Epoch)))
	}
}
