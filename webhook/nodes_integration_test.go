//go:build integration

package webhook_test

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/testenv"
	"github.com/holdfast-io/holdfast/webhook"
)

// makeNode creates a Node (Ready unless said otherwise) and removes it after
// the test. No kubelet runs: the test is the kubelet. Node reports among
// labels and annotations are written by the Node's own node plugin, as the
// webhook requires.
func makeNode(t testing.TB, name string, labels, annotations map[string]string, ready bool) *corev1.Node {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: map[string]string{}}}
	reports := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: map[string]string{}}}
	for k, v := range labels {
		if holdfastv1.IsNodeReport(k, true) {
			reports.Labels[k] = v
		} else {
			n.Labels[k] = v
		}
	}
	for k, v := range annotations {
		if holdfastv1.IsNodeReport(k, false) {
			reports.Annotations[k] = v
		} else {
			n.Annotations[k] = v
		}
	}
	if err := env.ClientAs(t, votersUser, nil).Create(ctx, n); err != nil {
		t.Fatalf("creating node %s: %v", name, err)
	}
	if len(reports.Labels)+len(reports.Annotations) > 0 {
		if err := env.ClientAs(t, nodePluginUser, map[string][]string{serviceaccount.NodeNameKey: {name}}).Patch(ctx, reports, client.Merge); err != nil {
			t.Fatalf("node %s's plugin writing its reports: %v", name, err)
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	n.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: status, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
	}}
	if err := env.Client.Status().Update(ctx, n); err != nil {
		t.Fatalf("setting node %s Ready=%s: %v", name, status, err)
	}
	return n
}

func getNode(t testing.TB, name string) *corev1.Node {
	t.Helper()
	var n corev1.Node
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, &n); err != nil {
		t.Fatal(err)
	}
	return &n
}

// setVoterPolicy creates the VoterPolicy with the given status (what the
// voter controller reports from etcd) and removes it after the test.
func setVoterPolicy(t *testing.T, st holdfastv1.VoterPolicyStatus) {
	t.Helper()
	ctx := context.Background()
	p := &holdfastv1.VoterPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: holdfastv1.VoterPolicyName},
		Spec:       holdfastv1.VoterPolicySpec{TargetVoters: 3, Etcd: holdfastv1.EtcdAccess{Endpoints: []string{"https://127.0.0.1:2379"}}},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), p) })
	p.Status = st
	if err := env.Client.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
}

func healthyStatus(voters ...string) holdfastv1.VoterPolicyStatus {
	return holdfastv1.VoterPolicyStatus{
		Voters: voters, Leader: voters[0], ObservedTime: &metav1.Time{Time: clock.Now()},
		Conditions: []metav1.Condition{{
			Type: holdfastv1.ConditionEtcdHealthy, Status: metav1.ConditionTrue, Reason: "AllMembersAnswer",
			Message: "Every member answers", LastTransitionTime: metav1.NewTime(epoch0),
		}},
	}
}

// heldSwapLease creates the swap Lease as the controller holds it during a
// swap: renewed at the suite clock, for an hour.
func heldSwapLease(t *testing.T, swapID, nodes string) *coordinationv1.Lease {
	t.Helper()
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName,
			Labels:      map[string]string{holdfastv1.LabelGuarded: "true"},
			Annotations: map[string]string{holdfastv1.AnnotationSwapID: swapID, holdfastv1.AnnotationSwapNodes: nodes},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To("holdfast-controller"),
			LeaseDurationSeconds: ptr.To[int32](60),
			AcquireTime:          &metav1.MicroTime{Time: epoch0.Add(-time.Minute)},
			RenewTime:            &metav1.MicroTime{Time: epoch0.Add(-10 * time.Second)},
		},
	}
	if err := env.ClientAs(t, votersUser, nil).Create(context.Background(), l); err != nil {
		t.Fatalf("the controller creating the held swap Lease: %v", err)
	}
	t.Cleanup(func() { removeSwapLease(t) })
	return l
}

// removeSwapLease releases (as the controller) and deletes the swap Lease.
func removeSwapLease(t *testing.T) {
	ctx := context.Background()
	c := env.ClientAs(t, votersUser, nil)
	var l coordinationv1.Lease
	if err := c.Get(ctx, client.ObjectKey{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName}, &l); err != nil {
		return
	}
	l.Spec.HolderIdentity = nil
	if err := c.Update(ctx, &l); err != nil {
		t.Errorf("releasing the swap Lease: %v", err)
	}
	if err := c.Delete(ctx, &l); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting the swap Lease: %v", err)
	}
}

func TestDesiredRoleAndRoleStepsOnlyByController(t *testing.T) {
	makeNode(t, "n1", nil, nil, true)
	k := env.Kubectl()

	res := k.Run(t, "", "label", "node", "n1", "holdfast.io/desired-role=server")
	refusal(t, "desired-role-by-admin", res, `metadata.labels[holdfast.io/desired-role]: Forbidden: only the holdfast voter controller`)
	res = k.Run(t, "", "annotate", "node", "n1", "holdfast.io/role-step=promote", "holdfast.io/role-swap=20261129T200000Z-cp-3-edge-7")
	refusal(t, "role-annotations-by-admin", res,
		`metadata.annotations[holdfast.io/role-step]: Forbidden`, `metadata.annotations[holdfast.io/role-swap]: Forbidden`)
	if n := getNode(t, "n1"); n.Labels[holdfastv1.LabelDesiredRole] != "" || n.Annotations[holdfastv1.AnnotationRoleStep] != "" {
		t.Fatalf("a refused change reached the Node: %v %v", n.Labels, n.Annotations)
	}

	// The same changes by the controller's service account are allowed.
	allowed(t, kubectlAs(t, votersUser, "label", "node", "n1", "holdfast.io/desired-role=server"))
	allowed(t, kubectlAs(t, votersUser, "annotate", "node", "n1", "holdfast.io/role-step=promote"))
	// A value the node plugin would not understand is malformed, even from
	// the controller.
	res = kubectlAs(t, votersUser, "label", "node", "n1", "--overwrite", "holdfast.io/desired-role=voter")
	refusal(t, "desired-role-unknown-value", res, `Unsupported value: "voter"`)
	// Removing it is a change too.
	refusal(t, "", k.Run(t, "", "label", "node", "n1", "holdfast.io/desired-role-"), "only the holdfast voter controller")

	// nodes/status keeps metadata changes, so it is guarded the same way.
	n := getNode(t, "n1")
	n.Labels[holdfastv1.LabelDesiredRole] = holdfastv1.RoleAgent
	err := env.Client.Status().Update(context.Background(), n)
	if !apierrors.IsForbidden(err) {
		t.Fatalf("a desired-role change through nodes/status by an admin: got %v, want Forbidden", err)
	}
}

func TestEtcdRoleLabelKeptOnMember(t *testing.T) {
	etcdLabels := func() map[string]string {
		return map[string]string{holdfastv1.LabelEtcdRole: "true", holdfastv1.LabelControlPlaneRole: "true"}
	}
	makeNode(t, "cp-1", etcdLabels(), nil, true)
	makeNode(t, "cp-9", etcdLabels(), nil, true)
	setVoterPolicy(t, healthyStatus("cp-1", "cp-2", "cp-3"))
	k := env.Kubectl()

	res := k.Run(t, "", "label", "node", "cp-1", "node-role.kubernetes.io/etcd-")
	refusal(t, "etcd-label-of-member", res, "node cp-1 is still an etcd member")
	if _, ok := getNode(t, "cp-1").Labels[holdfastv1.LabelEtcdRole]; !ok {
		t.Fatal("the refused removal took the label")
	}
	// Not even the controller removes it before the member is gone.
	refusal(t, "", kubectlAs(t, votersUser, "label", "node", "cp-1", "node-role.kubernetes.io/control-plane-"), "still an etcd member")
	// A node that is no member (any more) may lose it.
	allowed(t, k.Run(t, "", "label", "node", "cp-9", "node-role.kubernetes.io/etcd-", "node-role.kubernetes.io/control-plane-"))
}

func TestNodePluginWritesOnlyItsOwnNode(t *testing.T) {
	makeNode(t, "n1", nil, nil, true)
	makeNode(t, "n2", nil, nil, true)
	report := `holdfast.io/actuator={"phase":"done"}`
	asPlugin := func(node string, args ...string) testenv.Result {
		extra := []string{"--as=" + nodePluginUser}
		if node != "" {
			extra = append(extra, "--as-user-extra=authentication.kubernetes.io/node-name="+node)
		}
		return env.Kubectl().Run(t, "", append(extra, args...)...)
	}
	res := asPlugin("n2", "annotate", "node", "n1", report)
	refusal(t, "node-plugin-other-node", res, "the node plugin on node n2 may write holdfast annotations only on its own Node, not on n1")
	res = asPlugin("", "annotate", "node", "n1", report)
	refusal(t, "node-plugin-without-node-name", res, "pod-bound service account token")
	allowed(t, asPlugin("n1", "annotate", "node", "n1", report))
	allowed(t, asPlugin("n1", "label", "node", "n1", "holdfast.io/role=agent"))
	if got := getNode(t, "n1").Annotations[holdfastv1.AnnotationActuator]; got != `{"phase":"done"}` {
		t.Fatalf("the node plugin's own report was not written: %q", got)
	}
	if _, ok := getNode(t, "n2").Annotations[holdfastv1.AnnotationActuator]; ok {
		t.Fatal("n2 got a report")
	}
}

func TestVoterEligibleKeptDuringSwap(t *testing.T) {
	healthyCluster(t)
	makeNode(t, "edge-8", map[string]string{holdfastv1.LabelVoterEligible: "true"}, nil, true)
	runningSwap(t, "swap-running", "cp-3", "edge-7")

	res := env.Kubectl().Run(t, "", "label", "node", "edge-7", "holdfast.io/voter-eligible-")
	refusal(t, "voter-eligible-during-swap", res, "node edge-7 is in the running VoterSwap swap-running")
	allowed(t, env.Kubectl().Run(t, "", "label", "node", "edge-8", "holdfast.io/voter-eligible-"))
}

func TestOutOfServiceTaintLeavesSwapNodesAlone(t *testing.T) {
	makeNode(t, "cp-3", nil, nil, false)
	makeNode(t, "edge-9", nil, nil, false)
	heldSwapLease(t, "20261129T195900Z-cp-3-edge-7", "cp-3,edge-7")
	k := env.Kubectl()
	taint := "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"

	res := k.Run(t, "", "taint", "node", "cp-3", taint)
	refusal(t, "out-of-service-swap-node", res, "node cp-3 is in voter swap 20261129T195900Z-cp-3-edge-7", "until 2026-11-29T20:00:50Z")
	// Node recovery goes on for nodes outside the swap.
	allowed(t, k.Run(t, "", "taint", "node", "edge-9", taint))
	// Once the Lease expired, the swap no longer protects the node.
	clock.Set(epoch0.Add(51 * time.Second))
	t.Cleanup(func() { clock.Set(epoch0) })
	allowed(t, k.Run(t, "", "taint", "node", "cp-3", taint))
}

// TestNodeReportsAreWrittenOnlyByTheirNodesPlugin: a node plugin's reports
// of its host (the holdfast.io/role label; the actuator, provisioned,
// tombstone and fitness annotations) are written only by that node's
// plugin. An admin, a GitOps tool re-applying stale annotations, the voter
// controller or another node's plugin is refused with the reason and
// changes nothing: a forged step-down report would have the controller
// remove a member whose host never stepped down. The voter controller
// clears them; a member of the report-repair groups removes one with a
// reason in holdfast.io/report-repair (break-glass, audited), never
// writes one.
func TestNodeReportsAreWrittenOnlyByTheirNodesPlugin(t *testing.T) {
	makeNode(t, "rp-1", nil, nil, true)
	makeNode(t, "rp-2", nil, nil, true)
	k := env.Kubectl()
	forged := `holdfast.io/actuator={"step":"step-down","phase":"done"}`
	reportOnly := "only the node plugin on node rp-1 writes it (its report of the host)"

	refusal(t, "node-report-by-admin", k.Run(t, "", "annotate", "node", "rp-1", forged), "metadata.annotations[holdfast.io/actuator]: Forbidden: "+reportOnly)
	for _, kv := range []string{"holdfast.io/provisioned=true", "holdfast.io/tombstone={}", `holdfast.io/fitness={"fsyncP99Millis":1}`} {
		refusal(t, "", k.Run(t, "", "annotate", "node", "rp-1", kv), reportOnly)
	}
	refusal(t, "", k.Run(t, "", "label", "node", "rp-1", "holdfast.io/role=server"), "metadata.labels[holdfast.io/role]: Forbidden: "+reportOnly)
	refusal(t, "", kubectlAs(t, votersUser, "annotate", "node", "rp-1", forged), reportOnly)
	refusal(t, "", k.Run(t, "", "annotate", "node", "rp-1", "--as="+nodePluginUser,
		"--as-user-extra=authentication.kubernetes.io/node-name=rp-2", forged), "the node plugin on node rp-2 may write holdfast annotations only on its own Node, not on rp-1")
	if n := getNode(t, "rp-1"); n.Annotations[holdfastv1.AnnotationActuator] != "" || n.Labels[holdfastv1.LabelRole] != "" {
		t.Fatalf("a refused report reached the Node: %v %v", n.Labels, n.Annotations)
	}

	// Its own plugin writes them.
	asPlugin := func(args ...string) testenv.Result {
		return k.Run(t, "", append([]string{"--as=" + nodePluginUser, "--as-user-extra=authentication.kubernetes.io/node-name=rp-1"}, args...)...)
	}
	allowed(t, asPlugin("annotate", "node", "rp-1", `holdfast.io/actuator={"step":"promote","phase":"done"}`, "holdfast.io/tombstone={}", "holdfast.io/provisioned=true"))
	allowed(t, asPlugin("label", "node", "rp-1", "holdfast.io/role=server"))
	// A stale copy re-applied over it (a GitOps tool) is refused.
	refusal(t, "", k.Run(t, "", "annotate", "node", "rp-1", "--overwrite", forged), reportOnly)
	refusal(t, "", k.Run(t, "", "annotate", "node", "rp-1", "--overwrite", "holdfast.io/provisioned=false"), reportOnly)

	// The voter controller clears one; nobody else does without break-glass.
	allowed(t, kubectlAs(t, votersUser, "annotate", "node", "rp-1", "holdfast.io/actuator-"))
	refusal(t, "node-report-cleared-without-reason", k.Run(t, "", "annotate", "node", "rp-1", "holdfast.io/tombstone-"),
		"a repair removes it only with the reason in holdfast.io/report-repair set in the same request")
	refusal(t, "", k.Run(t, "", "annotate", "node", "rp-1", "--as=olivia", "--as-group=plant-operators", "holdfast.io/tombstone-", "holdfast.io/report-repair=why not"),
		"may not repair a node report: requires membership in one of the groups [system:masters]")
	// Break-glass: a cluster admin removes it, giving the reason; audited.
	allowed(t, k.Run(t, "", "annotate", "node", "rp-1", "holdfast.io/tombstone-", "holdfast.io/report-repair=host rebuilt from scratch, INC-42"))
	n := getNode(t, "rp-1")
	if _, ok := n.Annotations[holdfastv1.AnnotationTombstone]; ok || n.Annotations[holdfastv1.AnnotationProvisioned] != "true" || n.Labels[holdfastv1.LabelRole] != "server" {
		t.Fatalf("after the break-glass removal: labels %v annotations %v, want only the tombstone gone", n.Labels, n.Annotations)
	}
	if rec := lastAudit(t, webhook.AuditReportRepair); rec.Object.Name != "rp-1" || rec.Message != "host rebuilt from scratch, INC-42 (removed metadata.annotations[holdfast.io/tombstone])" {
		t.Errorf("the break-glass removal's audit record %+v: want rp-1 with the reason and what was removed", rec)
	}
	// Break-glass never writes one.
	refusal(t, "", k.Run(t, "", "annotate", "node", "rp-1", "--overwrite", "holdfast.io/provisioned=false", "holdfast.io/report-repair=another reason"), reportOnly)
}
