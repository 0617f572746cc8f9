//go:build integration

package webhook_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/audit"
	"github.com/holdfast-io/holdfast/test/testenv"
	"github.com/holdfast-io/holdfast/webhook"
)

func unitYAML(ns, name, availability string) string {
	return fmt.Sprintf(`apiVersion: holdfast.io/v1alpha1
kind: Unit
metadata: {name: %s, namespace: %s}
spec:
  runtime: {image: holdfast.local/unit-runtime:dev}
  nodeSelector: {holdfast.io/device: kiln-1}
  availability:
%s
`, name, ns, availability)
}

// kilnCluster: edge-1 reaches kiln-1 (primary), edge-2 is a Ready standby,
// edge-3 a NotReady standby, edge-9 a Ready node that is no target.
func kilnCluster(t *testing.T) {
	t.Helper()
	makeNode(t, "edge-1", map[string]string{"holdfast.io/device": "kiln-1"}, nil, true)
	makeNode(t, "edge-2", map[string]string{"site/standby": "true"}, nil, true)
	makeNode(t, "edge-3", map[string]string{"site/standby": "true"}, nil, false)
	makeNode(t, "edge-9", nil, nil, true)
}

// boundUnit creates a Failover unit bound to edge-1 at epoch 3 with its lease
// in the given state, as the controller reports it.
func boundUnit(t *testing.T, ns string, state holdfastv1.LeaseState) *holdfastv1.Unit {
	t.Helper()
	env.Kubectl().MustRun(t, unitYAML(ns, "kiln-1", "    mode: Failover\n    targets: {nodes: [edge-2, edge-3]}"), "apply", "-f", "-")
	ctx := context.Background()
	var u holdfastv1.Unit
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kiln-1"}, &u); err != nil {
		t.Fatal(err)
	}
	u.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{
		Node: "edge-1", Epoch: 3, Pod: "kiln-1-runtime-e3", LeaseState: state, LeaseStateEpoch: 3,
		LeaseEstablishedBy: &holdfastv1.RuntimeIncarnation{PodUID: "0d6c7f0e-runtime-e3", RestartCount: 0},
	}
	if err := env.ClientAs(t, controllerUser, nil).Status().Update(ctx, &u); err != nil {
		t.Fatalf("the controller writing the binding: %v", err)
	}
	return &u
}

func TestUnitTargetsExcludePrimary(t *testing.T) {
	kilnCluster(t)
	ns := env.Namespace(t)
	res := env.Kubectl().Run(t, unitYAML(ns, "kiln-1", "    mode: Failover\n    targets: {nodes: [edge-2, edge-1]}"), "apply", "-f", "-")
	refusal(t, "unit-target-is-primary", res,
		`spec.availability.targets.nodes[1]: Invalid value: "edge-1": is a primary node of this unit`)
	res = env.Kubectl().Run(t, unitYAML(ns, "kiln-1", "    mode: Failover\n    targets: {selector: {matchLabels: {holdfast.io/device: kiln-1}}}"), "apply", "-f", "-")
	refusal(t, "", res, "spec.availability.targets.selector", "selects primary nodes of this unit (edge-1)")
	allowed(t, env.Kubectl().Run(t, unitYAML(ns, "kiln-1", "    mode: Failover\n    targets: {selector: {matchLabels: {site/standby: \"true\"}}}"), "apply", "-f", "-"))
}

// The inequalities of docs/design.md §3 are refused by the CRD's own rules before
// any webhook runs; the webhook states them again in Go (unit tests).
func TestUnitInequalitiesRefused(t *testing.T) {
	ns := env.Namespace(t)
	res := env.Kubectl().Run(t, unitYAML(ns, "kiln-1", "    leaseDurationSeconds: 60\n    runtimeStartupGraceSeconds: 30"), "create", "-f", "-")
	refusal(t, "unit-grace-below-lease", res, "spec.availability.runtimeStartupGraceSeconds", "must be at least leaseDurationSeconds")
	res = env.Kubectl().Run(t, unitYAML(ns, "kiln-1", "    leaseDurationSeconds: 30\n    rebindMarginSeconds: 14"), "create", "-f", "-")
	refusal(t, "unit-margin-below-hold-bound", res, "spec.availability.rebindMarginSeconds", "must be at least the hold bound")
}

// L14: a Failover unit whose lease the installed grantor cannot keep
// through a leader change is refused, with the arithmetic; the floor itself
// is taken, and an Autonomy unit holds no lease.
func TestUnitLeaseBelowTheFloorRefused(t *testing.T) {
	kilnCluster(t)
	ns := env.Namespace(t)
	res := env.Kubectl().Run(t, unitYAML(ns, "kiln-1", "    mode: Failover\n    leaseDurationSeconds: 20\n    targets: {nodes: [edge-2]}"), "create", "-f", "-")
	refusal(t, "unit-lease-below-floor", res, "spec.availability.leaseDurationSeconds: Invalid value: 20: must be at least 30",
		"after a renewal a runtime has lease - 2 x lease/6 = 13.333s", "plus 5s to spare = 19.9s; at 30s it has 20s")
	allowed(t, env.Kubectl().Run(t, unitYAML(ns, "kiln-2", "    leaseDurationSeconds: 20\n    targets: {nodes: [edge-2]}"), "create", "-f", "-"))
	allowed(t, env.Kubectl().Run(t, unitYAML(ns, "kiln-1", "    mode: Failover\n    leaseDurationSeconds: 30\n    targets: {nodes: [edge-2]}"), "create", "-f", "-"))
}

// L13: a unit's name must leave its runtime pods' names DNS labels at every
// epoch.
func TestUnitNameTooLongRefused(t *testing.T) {
	ns := env.Namespace(t)
	long := "boiler-3-feedwater-pump-b-line-2-north"
	res := env.Kubectl().Run(t, unitYAML(ns, long+"-a", "    mode: Autonomy"), "create", "-f", "-")
	refusal(t, "unit-name-too-long", res, "metadata.name: Too long", "must be at most 38 characters")
	allowed(t, env.Kubectl().Run(t, unitYAML(ns, long, "    mode: Autonomy"), "create", "-f", "-"))
}

func TestManualFailoverNeedsGroupTargetAndFence(t *testing.T) {
	kilnCluster(t)
	ns := env.Namespace(t)
	boundUnit(t, ns, holdfastv1.LeaseHeld)
	operator, err := env.KubectlAs("olivia", operatorGroup)
	if err != nil {
		t.Fatal(err)
	}
	lead, err := env.KubectlAs("sam", shiftLeadGroup)
	if err != nil {
		t.Fatal(err)
	}
	unit := []string{"-n", ns, "unit", "kiln-1"}
	annotate := func(k *testenv.Kubectl, kv ...string) testenv.Result {
		return k.Run(t, "", append(append([]string{"annotate", "--overwrite"}, unit...), kv...)...)
	}

	res := annotate(operator, "holdfast.io/failover-to=edge-2")
	refusal(t, "failover-outside-groups", res,
		"user olivia (groups plant-operators, system:authenticated) may not request a manual failover: requires membership in one of the groups [system:masters, shift-leads]",
		"the runtime on edge-1 still holds its control lease")
	res = annotate(lead, "holdfast.io/failover-to=edge-2")
	refusal(t, "failover-while-lease-held", res,
		`the runtime on edge-1 still holds its control lease (Held at epoch 3); set holdfast.io/failover-confirm-fenced (with holdfast.io/failover-confirm-epoch: "3" and holdfast.io/failover-confirm-incarnation: "none") to how edge-1 was fenced`)
	res = annotate(lead, "holdfast.io/failover-to=edge-9", "holdfast.io/failover-confirm-fenced=powered off at the breaker", "holdfast.io/failover-confirm-epoch=3", "holdfast.io/failover-confirm-incarnation=none")
	refusal(t, "failover-to-non-target", res, "edge-9 is not a failover target of this unit")
	res = annotate(lead, "holdfast.io/failover-to=edge-3", "holdfast.io/failover-confirm-fenced=powered off at the breaker", "holdfast.io/failover-confirm-epoch=3", "holdfast.io/failover-confirm-incarnation=none")
	refusal(t, "failover-to-not-ready", res, "edge-3 is NotReady")
	res = annotate(operator, "holdfast.io/failover-confirm-fenced=powered off at the breaker", "holdfast.io/failover-confirm-epoch=3", "holdfast.io/failover-confirm-incarnation=none")
	refusal(t, "confirm-fenced-outside-groups", res, "may not confirm a fence: requires membership in one of the groups [system:masters, shift-leads]")
	// A confirmation re-applied after its runtime was replaced (a GitOps
	// tool's stale copy) names an epoch that is not the binding's.
	res = annotate(lead, "holdfast.io/failover-confirm-fenced=powered off at the breaker", "holdfast.io/failover-confirm-epoch=2", "holdfast.io/failover-confirm-incarnation=none")
	refusal(t, "confirm-fenced-stale-epoch", res, "certifies the runtime of epoch 2, but the binding is at epoch 3")

	// It names one process: written while no runtime pod existed, it says
	// nothing once one runs; written for a restart the kubelet has gone
	// past (refused then, applied later by a GitOps tool), nothing of the
	// process now running.
	pod := runtimePodOf(t, ns, "kiln-1", 3)
	res = annotate(lead, "holdfast.io/failover-confirm-fenced=powered off at the breaker", "holdfast.io/failover-confirm-epoch=3", "holdfast.io/failover-confirm-incarnation=none")
	refusal(t, "", res, "certifies no runtime pod, but the runtime of epoch 3 is pod "+string(pod.UID)+" restart 0: a runtime pod exists since")
	restarted(t, pod)
	res = annotate(lead, "holdfast.io/failover-confirm-fenced=powered off at the breaker", "holdfast.io/failover-confirm-epoch=3", "holdfast.io/failover-confirm-incarnation="+string(pod.UID)+"/0")
	refusal(t, "", res, "certifies pod "+string(pod.UID)+" restart 0, but the runtime of epoch 3 is pod "+string(pod.UID)+" restart 1: the kubelet restarted it since")
	res = annotate(lead, "holdfast.io/failover-confirm-fenced=powered off at the breaker", "holdfast.io/failover-confirm-epoch=3", "holdfast.io/failover-confirm-incarnation=0d6c7f0e-runtime-e3/0")
	// The example shows one pod UID whatever this run's.
	res.Stderr = strings.ReplaceAll(res.Stderr, string(pod.UID), "5b1e3d2a-9c47-4f0e-8a61-2f7d9c3e4b10")
	refusal(t, "confirm-fenced-stale-process", res, "the runtime of epoch 3 is pod 5b1e3d2a-9c47-4f0e-8a61-2f7d9c3e4b10 restart 1: its pod was re-created since")

	var u holdfastv1.Unit
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "kiln-1"}, &u); err != nil {
		t.Fatal(err)
	}
	if _, ok := u.Annotations[holdfastv1.AnnotationFailoverTo]; ok {
		t.Fatalf("a refused failover request reached the Unit: %v", u.Annotations)
	}

	allowed(t, annotate(lead, "holdfast.io/failover-to=edge-2", "holdfast.io/failover-confirm-fenced=powered off at the breaker", "holdfast.io/failover-confirm-epoch=3",
		"holdfast.io/failover-confirm-incarnation="+string(pod.UID)+"/1"))
	for _, kind := range []string{webhook.AuditManualFailover, webhook.AuditConfirmFenced} {
		rec := lastAudit(t, kind)
		if rec.Actor != "sam" || !contains(rec.Groups, shiftLeadGroup) || *rec.Object != *audit.Unit(ns, "kiln-1") ||
			rec.Node != "edge-2" || rec.Message != "powered off at the breaker" {
			t.Errorf("%s audit record %+v does not say who asked, for which unit, where to and why", kind, rec)
		}
	}
}

func TestModeKeptWhileRebindPending(t *testing.T) {
	kilnCluster(t)
	ns := env.Namespace(t)
	boundUnit(t, ns, holdfastv1.LeaseExpired)
	res := env.Kubectl().Run(t, "", "patch", "-n", ns, "unit", "kiln-1", "--type=merge", "-p", `{"spec":{"availability":{"mode":"Autonomy"}}}`)
	refusal(t, "mode-change-while-rebind-pending", res, "spec.availability.mode: Forbidden: a re-bind is pending (lease Expired at epoch 3)")
}

func TestEpochNeverGoesBackwards(t *testing.T) {
	kilnCluster(t)
	ns := env.Namespace(t)
	boundUnit(t, ns, holdfastv1.LeaseHeld)
	// As the admin, or impersonating a user.
	status := func(as, patch string) testenv.Result {
		args := []string{"patch", "-n", ns, "unit", "kiln-1", "--subresource=status", "--type=merge", "-p", patch}
		if as != "" {
			args = append([]string{"--as=" + as}, args...)
		}
		return env.Kubectl().Run(t, "", args...)
	}
	res := status("", `{"status":{"runtimeBinding":{"epoch":2}}}`)
	refusal(t, "epoch-backwards", res, "status.runtimeBinding.epoch: Forbidden: may not go backwards (from 3 to 2)")
	res = status("", `{"status":{"runtimeBinding":{"leaseEstablishedBy":{"podUID":"forged","restartCount":4}}}}`)
	refusal(t, "lease-established-by-rewritten", res,
		"status.runtimeBinding.leaseEstablishedBy: Forbidden: is written once per binding and already names pod 0d6c7f0e-runtime-e3 restart 0 at epoch 3")
	// The controller moves the binding forward (a re-bind resets
	// leaseEstablishedBy with the new epoch).
	allowed(t, status(controllerUser, `{"status":{"runtimeBinding":{"epoch":4,"node":"","leaseEstablishedBy":null,"leaseState":"Pending"}}}`))
	// An ordinary status write that keeps both is allowed to anyone RBAC lets.
	allowed(t, status("", `{"status":{"runtimeBinding":{"unsettledRebinds":["edge-2"]}}}`))
}

// runtimePodOf creates the runtime pod of the unit's binding at epoch, as
// the controller does, and reports its runtime container started once.
func runtimePodOf(t *testing.T, ns, unit string, epoch int64) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: holdfastv1.RuntimePodName(unit, epoch),
			Labels: map[string]string{holdfastv1.LabelUnit: unit, holdfastv1.LabelEpoch: strconv.FormatInt(epoch, 10)}},
		Spec: corev1.PodSpec{SchedulerName: "holdfast-scheduler",
			Containers: []corev1.Container{{Name: holdfastv1.RuntimeContainer, Image: "unit-runtime:dev"}}},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatalf("creating the runtime pod: %v", err)
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: holdfastv1.RuntimeContainer, Image: "unit-runtime:dev"}}
	if err := env.Client.Status().Update(ctx, p); err != nil {
		t.Fatalf("reporting the runtime container: %v", err)
	}
	return p
}

// restarted reports the pod's runtime container restarted, as its kubelet
// does.
func restarted(t *testing.T, p *corev1.Pod) {
	t.Helper()
	p.Status.ContainerStatuses[0].RestartCount++
	if err := env.Client.Status().Update(context.Background(), p); err != nil {
		t.Fatalf("reporting the restart: %v", err)
	}
}
