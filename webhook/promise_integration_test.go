//go:build integration

package webhook_test

import (
	"context"
	"testing"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// L11 through the real apiserver and kubectl: the binding's promise and
// hand-over are written by the controller alone.
func TestThePromiseIsTheControllersRecord(t *testing.T) {
	kilnCluster(t)
	ns := env.Namespace(t)
	u := boundUnit(t, ns, holdfastv1.LeaseHeld)
	u.Status.RuntimeBinding.Promise = &holdfastv1.RuntimePromise{Mode: holdfastv1.Failover, LeaseDurationSeconds: 30, HoldBoundMillis: 15000, RebindMarginMillis: 20000}
	if err := env.ClientAs(t, controllerUser, nil).Status().Update(context.Background(), u); err != nil {
		t.Fatalf("the controller recording the promise: %v", err)
	}
	patch := func(p string) []string {
		return []string{"patch", "-n", ns, "unit", "kiln-1", "--subresource=status", "--type=merge", "-p", p}
	}
	res := env.Kubectl().Run(t, "", patch(`{"status":{"runtimeBinding":{"promise":{"leaseDurationSeconds":10}}}}`)...)
	refusal(t, "binding-promise-rewritten", res,
		"status.runtimeBinding.promise: Forbidden: only the holdfast controller records the promise the runtime at epoch 3 holds (mode Failover, lease 30s, hold bound 15s)")
	res = env.Kubectl().Run(t, "", patch(`{"status":{"runtimeBinding":{"handOver":{"reason":"by hand","since":"2026-11-29T20:00:00Z"}}}}`)...)
	refusal(t, "binding-handover-forged", res,
		"status.runtimeBinding.handOver: Forbidden: only the holdfast controller starts or ends the hand-over of epoch 3")
	allowed(t, kubectlAs(t, controllerUser, patch(`{"status":{"runtimeBinding":{"promise":{"leaseDurationSeconds":60,"holdBoundMillis":30000}}}}`)...))
}
