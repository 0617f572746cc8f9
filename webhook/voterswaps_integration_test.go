//go:build integration

package webhook_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/audit"
	"github.com/holdfast-io/holdfast/policy"
	"github.com/holdfast-io/holdfast/webhook"
)

// healthyCluster: three Ready voters cp-1..cp-3 by etcd's own vote, a leader,
// no learner, and edge-7, an eligible, provisioned, Ready agent.
func healthyCluster(t *testing.T) {
	t.Helper()
	member := func() map[string]string {
		return map[string]string{holdfastv1.LabelEtcdRole: "true", holdfastv1.LabelControlPlaneRole: "true"}
	}
	for _, n := range []string{"cp-1", "cp-2", "cp-3"} {
		makeNode(t, n, member(), nil, true)
	}
	makeNode(t, "edge-7", map[string]string{holdfastv1.LabelVoterEligible: "true"},
		map[string]string{holdfastv1.AnnotationProvisioned: "true"}, true)
	setVoterPolicy(t, healthyStatus("cp-1", "cp-2", "cp-3"))
}

// runningSwap has the controller create an automatic swap and mark it
// Running, as it does once it holds the Lease; cleanup finishes it first.
func runningSwap(t *testing.T, name, out, in string) *holdfastv1.VoterSwap {
	t.Helper()
	ctx := context.Background()
	c := env.ClientAs(t, votersUser, nil)
	sw := &holdfastv1.VoterSwap{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       holdfastv1.VoterSwapSpec{Outgoing: out, Incoming: in, Origin: holdfastv1.SwapAutomatic, Reason: "fsync p99 above 10ms"},
	}
	if err := c.Create(ctx, sw); err != nil {
		t.Fatalf("the controller creating swap %s: %v", name, err)
	}
	sw.Status = holdfastv1.VoterSwapStatus{
		SwapID: "20261129T195900Z-" + out + "-" + in, Incoming: in, Phase: holdfastv1.SwapRunning,
		Step: holdfastv1.StepPromote, StartedAt: &metav1.Time{Time: epoch0},
	}
	if err := c.Status().Update(ctx, sw); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { finishAndDeleteSwap(t, name) })
	return sw
}

func finishAndDeleteSwap(t *testing.T, name string) {
	ctx := context.Background()
	c := env.ClientAs(t, votersUser, nil)
	var sw holdfastv1.VoterSwap
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &sw); err != nil {
		return
	}
	sw.Status.Phase = holdfastv1.SwapSucceeded
	if err := c.Status().Update(ctx, &sw); err != nil {
		t.Errorf("finishing swap %s: %v", name, err)
	}
	if err := c.Delete(ctx, &sw); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting swap %s: %v", name, err)
	}
}

const secondSwap = `apiVersion: holdfast.io/v1alpha1
kind: VoterSwap
metadata: {name: swap-cp2-edge7}
spec: {outgoing: cp-2, incoming: edge-7, reason: disk replacement}
`

func TestSecondVoterSwapRefused(t *testing.T) {
	healthyCluster(t)
	runningSwap(t, "swap-cp3-edge7", "cp-3", "edge-7")
	heldSwapLease(t, "20261129T195900Z-cp-3-edge-7", "cp-3,edge-7")

	res := env.Kubectl().Run(t, secondSwap, "create", "-f", "-")
	refusal(t, "second-swap", res,
		"VoterSwap swap-cp3-edge7 (cp-3 out, edge-7 in) is Running at step Promote; one swap at a time",
		"the swap Lease kube-system/holdfast-voter-swap is held by holdfast-controller until 2026-11-29T20:00:50Z")
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "swap-cp2-edge7"}, &holdfastv1.VoterSwap{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused swap exists: %v", err)
	}
}

func TestVoterSwapGatesListed(t *testing.T) {
	makeNode(t, "cp-1", nil, nil, true)
	makeNode(t, "cp-2", nil, nil, false)
	makeNode(t, "edge-7", map[string]string{holdfastv1.LabelPinned: "true"}, nil, true)
	st := healthyStatus("cp-1", "cp-2", "cp-3")
	st.Learners = []string{"edge-5"}
	setVoterPolicy(t, st)

	res := env.Kubectl().Run(t, `apiVersion: holdfast.io/v1alpha1
kind: VoterSwap
metadata: {name: swap-edge4-edge7}
spec: {outgoing: edge-4, incoming: edge-7}
`, "create", "-f", "-")
	refusal(t, "swap-gates", res,
		"learner present (edge-5)",
		"voter cp-2 is not Ready",
		"voter cp-3 has no Node",
		"spec.outgoing: Forbidden: edge-4 is not an etcd voter (voters: cp-1, cp-2, cp-3)",
		"spec.incoming: Forbidden: edge-7 is not voter-eligible",
		"spec.incoming: Forbidden: edge-7 is pinned",
		"spec.incoming: Forbidden: edge-7 is not provisioned")
}

// A VoterPolicy status nobody refreshed says nothing about etcd now: with
// EtcdHealthy still True it is refused by its age alone, judged on the
// webhook's (injected) clock, and nothing is created; fresh again, the same
// swap is admitted.
func TestVoterSwapRefusedOnStaleStatus(t *testing.T) {
	healthyCluster(t)
	clock.Set(epoch0.Add(130 * time.Second))
	t.Cleanup(func() { clock.Set(epoch0) })
	res := env.Kubectl().Run(t, secondSwap, "create", "-f", "-")
	refusal(t, "swap-stale-status", res,
		"status.observedTime: Forbidden: voter policy status is 2m10s old; the voters role is not observing etcd")
	if strings.Contains(res.Stderr, "spec: ") || strings.Contains(res.Stderr, "spec.") {
		t.Errorf("a stale but otherwise healthy status fails only its age:\n%s", res.Stderr)
	}
	err := env.Client.Get(context.Background(), client.ObjectKey{Name: "swap-cp2-edge7"}, &holdfastv1.VoterSwap{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("the refused swap exists (or could not be read): %v", err)
	}

	// Within the bound (the voters role stamps it every 15 s) it is trusted.
	clock.Set(epoch0.Add(policy.MaxStatusAge))
	allowed(t, env.Kubectl().Run(t, secondSwap, "create", "-f", "-"))
	t.Cleanup(func() { finishAndDeleteSwap(t, "swap-cp2-edge7") })
}

func TestManualSwapOnlyByConfiguredGroups(t *testing.T) {
	healthyCluster(t)
	operator, err := env.KubectlAs("olivia", operatorGroup)
	if err != nil {
		t.Fatal(err)
	}
	res := operator.Run(t, secondSwap, "create", "-f", "-")
	refusal(t, "manual-swap-outside-groups", res,
		"user olivia (groups plant-operators, system:authenticated) may not request a manual swap: requires membership in one of the groups [system:masters]")

	res = env.Kubectl().Run(t, strings.Replace(secondSwap, "reason: disk replacement", "reason: x, origin: Automatic", 1), "create", "-f", "-")
	refusal(t, "automatic-swap-by-person", res, "spec.origin: Forbidden: only the holdfast voter controller")

	// An admin's swap passes every gate, and is audited.
	allowed(t, env.Kubectl().Run(t, secondSwap, "create", "-f", "-"))
	t.Cleanup(func() { finishAndDeleteSwap(t, "swap-cp2-edge7") })
	rec := lastAudit(t, webhook.AuditManualSwap)
	if rec.Actor != "admin" || rec.Object.Name != "swap-cp2-edge7" || rec.Node != "edge-7" || rec.Message != "disk replacement" ||
		!contains(rec.Groups, "system:masters") || rec.AdmissionUID == "" {
		t.Fatalf("audit record %+v does not say who asked for which swap and why", rec)
	}
}

func TestRunningVoterSwapNotDeleted(t *testing.T) {
	healthyCluster(t)
	runningSwap(t, "swap-cp3-edge7", "cp-3", "edge-7")
	res := env.Kubectl().Run(t, "", "delete", "voterswap", "swap-cp3-edge7")
	refusal(t, "delete-running-swap", res, "a swap in progress is always finished or rolled back")
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "swap-cp3-edge7"}, &holdfastv1.VoterSwap{}); err != nil {
		t.Fatalf("the running swap is gone: %v", err)
	}
	// Its spec never changes (the CRD's own rule answers first; the webhook
	// holds the same rule in Go).
	res = env.Kubectl().Run(t, "", "patch", "voterswap", "swap-cp3-edge7", "--type=merge", "-p", `{"spec":{"incoming":"edge-8"}}`)
	refusal(t, "swap-spec-change", res, "spec is immutable: delete this VoterSwap and create a new one")
}

// lastAudit is the newest audit line of a kind.
func lastAudit(t *testing.T, kind string) audit.Record {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(auditOut.String()), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		var rec audit.Record
		if err := json.Unmarshal([]byte(lines[i]), &rec); err != nil {
			t.Fatalf("audit line %q is not one JSON record: %v", lines[i], err)
		}
		if rec.Reason == kind {
			return rec
		}
	}
	t.Fatalf("no %s audit record in:\n%s", kind, auditOut.String())
	return audit.Record{}
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}
