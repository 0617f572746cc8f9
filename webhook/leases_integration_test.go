//go:build integration

package webhook_test

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

func getSwapLease(t *testing.T) *coordinationv1.Lease {
	t.Helper()
	var l coordinationv1.Lease
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName}, &l); err != nil {
		t.Fatal(err)
	}
	return &l
}

func TestSwapLeaseHolderChangesOnlyByControllerAfterExpiry(t *testing.T) {
	heldSwapLease(t, "20261129T195900Z-cp-3-edge-7", "cp-3,edge-7")
	k := env.Kubectl()
	lease := []string{"-n", holdfastv1.SwapLeaseNamespace, "lease", holdfastv1.SwapLeaseName}

	res := k.Run(t, "", append([]string{"patch"}, append(lease, "--type=merge", "-p", `{"spec":{"holderIdentity":"ops-script"}}`)...)...)
	refusal(t, "swap-lease-holder-by-admin", res,
		"spec.holderIdentity: Forbidden: only the holdfast voter controller (system:serviceaccount:holdfast-system:holdfast-controller-voters) may acquire, renew or release the swap Lease",
		"spec.holderIdentity: Forbidden: the swap Lease is held by holdfast-controller until 2026-11-29T20:00:50Z")

	// kubectl edit goes through the same check.
	t.Setenv("KUBE_EDITOR", "sed -i s/holderIdentity:.*/holderIdentity:\\ ops-script/")
	res = k.Run(t, "", append([]string{"edit"}, lease...)...)
	refusal(t, "", res, "only the holdfast voter controller")

	// Not even the controller changes the holder while the Lease is held.
	res = kubectlAs(t, votersUser, append([]string{"patch"}, append(lease, "--type=merge", "-p", `{"spec":{"holderIdentity":"holdfast-controller-2"}}`)...)...)
	refusal(t, "swap-lease-holder-while-held", res, "another holder may take it only after it expires or is released")

	// The swap's record stays put during the swap.
	res = k.Run(t, "", append([]string{"annotate", "--overwrite"}, append(lease, "holdfast.io/swap-nodes=cp-3")...)...)
	refusal(t, "swap-lease-annotation-by-admin", res, "metadata.annotations[holdfast.io/swap-nodes]: Forbidden: only the holdfast voter controller")
	res = kubectlAs(t, votersUser, append([]string{"annotate", "--overwrite"}, append(lease, "holdfast.io/swap-nodes=cp-3", "holdfast.io/swap-id=other")...)...)
	refusal(t, "swap-lease-annotations-during-swap", res,
		"may not drop node edge-7 while swap 20261129T195900Z-cp-3-edge-7 holds the Lease",
		"metadata.annotations[holdfast.io/swap-id]: Forbidden: swap 20261129T195900Z-cp-3-edge-7 is in progress")
	// Adding a node (the scheduler's pick) is allowed.
	allowed(t, kubectlAs(t, votersUser, append([]string{"annotate", "--overwrite"}, append(lease, "holdfast.io/swap-nodes=cp-3,edge-7,edge-8")...)...))

	// Deleting it while held is refused to everyone.
	refusal(t, "swap-lease-delete-while-held", k.Run(t, "", append([]string{"delete"}, lease...)...), "it may be deleted only once released or expired")
	refusal(t, "", kubectlAs(t, votersUser, append([]string{"delete"}, lease...)...), "it may be deleted only once released or expired")

	// The controller renews it.
	ctx := context.Background()
	ctrl := env.ClientAs(t, votersUser, nil)
	l := getSwapLease(t)
	l.Spec.RenewTime = &metav1.MicroTime{Time: epoch0}
	if err := ctrl.Update(ctx, l); err != nil {
		t.Fatalf("the controller's renewal: %v", err)
	}
	// Once it expired, another holder may take it.
	clock.Set(epoch0.Add(61 * time.Second))
	t.Cleanup(func() { clock.Set(epoch0) })
	l = getSwapLease(t)
	l.Spec.HolderIdentity = ptr.To("holdfast-controller-2")
	l.Spec.AcquireTime = &metav1.MicroTime{Time: epoch0.Add(61 * time.Second)}
	l.Annotations[holdfastv1.AnnotationSwapID] = "20261129T200101Z-cp-2-edge-8"
	l.Annotations[holdfastv1.AnnotationSwapNodes] = "cp-2,edge-8"
	if err := ctrl.Update(ctx, l); err != nil {
		t.Fatalf("taking over an expired swap Lease: %v", err)
	}
}

func TestSwapLeaseMustBeGuarded(t *testing.T) {
	ctx := context.Background()
	unlabelled := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName}}
	err := env.ClientAs(t, votersUser, nil).Create(ctx, unlabelled)
	if !apierrors.IsForbidden(err) {
		t.Fatalf("creating the swap Lease without %s: got %v, want Forbidden", holdfastv1.LabelGuarded, err)
	}
	res := env.Kubectl().Run(t, `apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: holdfast-voter-swap, namespace: kube-system}
spec: {holderIdentity: ops-script, leaseDurationSeconds: 3600}
`, "create", "-f", "-")
	refusal(t, "swap-lease-unguarded", res, `metadata.labels[holdfast.io/guarded]: Forbidden: must be "true" on the swap Lease`,
		"only the holdfast voter controller")

	heldSwapLease(t, "20261129T195900Z-cp-3-edge-7", "cp-3,edge-7")
	res = kubectlAs(t, votersUser, "label", "-n", "kube-system", "lease", "holdfast-voter-swap", "holdfast.io/guarded-")
	refusal(t, "", res, `must be "true" on the swap Lease`)

	// A held Lease names its swap and its nodes, or node recovery could not
	// leave them alone.
	res = kubectlAs(t, votersUser, "annotate", "-n", "kube-system", "lease", "holdfast-voter-swap", "--overwrite", "holdfast.io/swap-nodes=,")
	refusal(t, "", res, "may not drop node cp-3")
}
