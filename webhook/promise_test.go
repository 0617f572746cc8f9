package webhook

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// L11: the binding's promise and hand-over are the controller's record;
// anyone else who rewrites them could make it judge a runtime stopped
// before it is.
func TestL11ThePromiseIsTheControllersRecord(t *testing.T) {
	old := unitBound(holdfastv1.Failover, holdfastv1.LeaseHeld)
	old.Status.RuntimeBinding.Promise = &holdfastv1.RuntimePromise{Mode: holdfastv1.Failover, LeaseDurationSeconds: 30, HoldBoundMillis: 15000, RebindMarginMillis: 20000}
	with := bindingEdit(old)
	checkBindingEdits(t, old, []bindingCase{
		{"lease lowered", statusAdmin, with(func(b *holdfastv1.RuntimeBinding) { b.Promise.LeaseDurationSeconds = 10 }), []string{
			"status.runtimeBinding.promise: Forbidden: only the holdfast controller records the promise the runtime at epoch 3 holds (mode Failover, lease 30s, hold bound 15s): its expiry, Hold and margin decisions read it; change spec.availability instead"}},
		{"promise removed", statusAdmin, with(func(b *holdfastv1.RuntimeBinding) { b.Promise = nil }), []string{
			"status.runtimeBinding.promise: Forbidden: only the holdfast controller records the promise the runtime at epoch 3 holds (mode Failover, lease 30s, hold bound 15s): its expiry, Hold and margin decisions read it; change spec.availability instead"}},
		{"hand-over forged", statusAdmin, with(func(b *holdfastv1.RuntimeBinding) {
			b.HandOver = &holdfastv1.HandOver{Reason: "x", Since: metav1.NewTime(t0)}
		}), []string{
			"status.runtimeBinding.handOver: Forbidden: only the holdfast controller starts or ends the hand-over of epoch 3; change spec.availability.mode or spec.runtime instead"}},
		{"a new binding has its own", statusAdmin, with(func(b *holdfastv1.RuntimeBinding) {
			b.Epoch, b.LeaseEstablishedBy, b.Promise = 4, nil, &holdfastv1.RuntimePromise{Mode: holdfastv1.Autonomy}
		}), nil},
		{"the controller records it", controller, with(func(b *holdfastv1.RuntimeBinding) { b.Promise.LeaseDurationSeconds = 60 }), nil},
	})
}
