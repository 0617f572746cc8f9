//go:build integration

package webhook_test

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// The two holdfast-controller roles run under their own accounts and
// neither holds the other's rights. The units role's account (the grantor)
// may not drive a role switch, hold the swap Lease or ask for an Automatic
// swap: those move etcd voters.
func TestVotersRightsRefusedToUnitsAccount(t *testing.T) {
	ctx := context.Background()
	healthyCluster(t)
	wantVoters := "only the holdfast voter controller (" + votersUser + ")"

	// Node desired role and role steps.
	refusal(t, "", kubectlAs(t, controllerUser, "label", "node", "edge-7", "holdfast.io/desired-role=server"),
		"metadata.labels[holdfast.io/desired-role]: Forbidden: "+wantVoters)
	refusal(t, "", kubectlAs(t, controllerUser, "annotate", "node", "edge-7", "holdfast.io/role-step=promote"),
		"metadata.annotations[holdfast.io/role-step]: Forbidden: "+wantVoters)
	if n := getNode(t, "edge-7"); n.Labels[holdfastv1.LabelDesiredRole] != "" || n.Annotations[holdfastv1.AnnotationRoleStep] != "" {
		t.Fatalf("a refused change reached the Node: %v %v", n.Labels, n.Annotations)
	}
	allowed(t, kubectlAs(t, votersUser, "label", "node", "edge-7", "holdfast.io/desired-role=server"))
	allowed(t, kubectlAs(t, votersUser, "annotate", "node", "edge-7", "holdfast.io/role-step=promote"))

	// An Automatic VoterSwap.
	units := env.ClientAs(t, controllerUser, nil)
	sw := &holdfastv1.VoterSwap{
		ObjectMeta: metav1.ObjectMeta{Name: "swap-by-units"},
		Spec:       holdfastv1.VoterSwapSpec{Outgoing: "cp-3", Incoming: "edge-7", Origin: holdfastv1.SwapAutomatic, Reason: "fsync p99 above 10ms"},
	}
	if err := units.Create(ctx, sw); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "spec.origin: Forbidden: "+wantVoters) {
		t.Fatalf("the units account creating an Automatic swap: got %v, want Forbidden naming %s", err, votersUser)
	}

	// The swap Lease: neither acquired nor renewed (its renewals do not
	// skip the webhook either: the configuration exempts only the voters
	// account's).
	heldSwapLease(t, "20261129T195900Z-cp-3-edge-7", "cp-3,edge-7")
	l := getSwapLease(t)
	l.Spec.RenewTime = &metav1.MicroTime{Time: epoch0}
	if err := units.Update(ctx, l); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "spec.holderIdentity: Forbidden: "+wantVoters) {
		t.Fatalf("the units account renewing the swap Lease: got %v, want Forbidden naming %s", err, votersUser)
	}
	refusal(t, "", kubectlAs(t, controllerUser, "annotate", "-n", holdfastv1.SwapLeaseNamespace, "lease", holdfastv1.SwapLeaseName,
		"--overwrite", "holdfast.io/swap-nodes=cp-3,edge-7,edge-8"), "metadata.annotations[holdfast.io/swap-nodes]: Forbidden: "+wantVoters)
	if err := env.ClientAs(t, votersUser, nil).Update(ctx, getSwapLease(t)); err != nil {
		t.Fatalf("the voters account renewing the swap Lease: %v", err)
	}
}

// The voters role's account may not write what only the grantor writes: a
// Unit's epoch backwards or its leaseEstablishedBy (its status writes are
// checked like anyone's; only the units account's skip the webhook).
func TestUnitsRightsRefusedToVotersAccount(t *testing.T) {
	kilnCluster(t)
	ns := env.Namespace(t)
	boundUnit(t, ns, holdfastv1.LeaseHeld)
	status := func(as, patch string) []string {
		return []string{"--as=" + as, "patch", "-n", ns, "unit", "kiln-1", "--subresource=status", "--type=merge", "-p", patch}
	}
	k := env.Kubectl()
	refusal(t, "", k.Run(t, "", status(votersUser, `{"status":{"runtimeBinding":{"epoch":2}}}`)...),
		"status.runtimeBinding.epoch: Forbidden: may not go backwards (from 3 to 2)")
	refusal(t, "", k.Run(t, "", status(votersUser, `{"status":{"runtimeBinding":{"leaseEstablishedBy":{"podUID":"forged","restartCount":4}}}}`)...),
		"status.runtimeBinding.leaseEstablishedBy: Forbidden: is written once per binding")
	// A re-bind (epoch forward, leaseEstablishedBy reset) is the grantor's.
	allowed(t, k.Run(t, "", status(controllerUser, `{"status":{"runtimeBinding":{"epoch":4,"node":"","leaseEstablishedBy":null,"leaseState":"Pending"}}}`)...))
	refusal(t, "", k.Run(t, "", status(votersUser, `{"status":{"runtimeBinding":{"epoch":3}}}`)...),
		"status.runtimeBinding.epoch: Forbidden: may not go backwards (from 4 to 3)")
}
