//go:build integration

package plugin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	plugin "github.com/holdfast-io/holdfast/kubectl-holdfast"
)

func TestSwapExitCodes(t *testing.T) {
	ctx := context.Background()
	for _, n := range []string{"sw-cp-1", "sw-cp-2", "sw-cp-3"} {
		mkNode(t, n, map[string]string{holdfastv1.LabelEtcdRole: "true"})
	}
	mkNode(t, "sw-edge-7", map[string]string{holdfastv1.LabelVoterEligible: "true"})
	mkNode(t, "sw-edge-8", nil)
	mkNode(t, "sw-edge-9", map[string]string{holdfastv1.LabelVoterEligible: "true", holdfastv1.LabelPinned: "true"})
	for _, n := range []string{"sw-cp-1", "sw-cp-2", "sw-cp-3", "sw-edge-7", "sw-edge-8", "sw-edge-9"} {
		setReady(t, n, true)
	}
	editNode(t, "sw-edge-7", func(n *corev1.Node) { n.Annotations[holdfastv1.AnnotationProvisioned] = "true" })

	swaps := func() []holdfastv1.VoterSwap {
		var l holdfastv1.VoterSwapList
		if err := env.Client.List(ctx, &l); err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	before := len(swaps())

	// Usage errors and nodes that cannot take the role: 2, nothing sent.
	wantExit(t, admin(t, "swap"), plugin.ExitUsage, "want OUT [IN]")
	wantExit(t, admin(t, "swap", "a", "b", "c"), plugin.ExitUsage, "want OUT [IN]")
	wantExit(t, admin(t, "swap", "sw-cp-1", "sw-cp-1"), plugin.ExitUsage, "name two different nodes")
	wantExit(t, admin(t, "swap", "nope", "sw-edge-7"), plugin.ExitUsage, `node "nope" (OUT) not found`)
	wantExit(t, admin(t, "swap", "sw-cp-1", "nope"), plugin.ExitUsage, `node "nope" (IN) not found`)
	wantExit(t, admin(t, "swap", "sw-cp-1", "sw-edge-8"), plugin.ExitUsage, `node "sw-edge-8" (IN) is not voter-eligible`, "holdfast.io/voter-eligible=true")
	wantExit(t, admin(t, "swap", "sw-cp-1", "sw-edge-9"), plugin.ExitUsage, `node "sw-edge-9" (IN) is pinned`)
	wantExit(t, admin(t, "swap", "sw-cp-1", "--bogus"), plugin.ExitUsage, "unknown flag")
	if n := len(swaps()); n != before {
		t.Fatalf("a refused usage created a VoterSwap: %d before, %d after", before, n)
	}

	// refused runs the plugin and wants exit 1 with exactly the gates listed,
	// each with its field path, and nothing created.
	refused := func(t *testing.T, args []string, header string, gates ...string) {
		t.Helper()
		r := admin(t, append([]string{"swap"}, args...)...)
		wantExit(t, r, plugin.ExitRefused, header)
		var got []string
		for _, l := range strings.Split(r.stderr, "\n") {
			if strings.HasPrefix(l, "  - ") {
				got = append(got, strings.TrimPrefix(l, "  - "))
			}
		}
		if strings.Join(got, "\n") != strings.Join(gates, "\n") {
			t.Errorf("failing gates:\n%s\nwant:\n%s\n%s", strings.Join(got, "\n"), strings.Join(gates, "\n"), r)
		}
		if n := len(swaps()); n != before {
			t.Fatalf("a refused swap created a VoterSwap: %d before, %d after", before, n)
		}
	}

	// No VoterPolicy yet: the controller has not observed etcd.
	refused(t, []string{"sw-cp-1", "sw-edge-7"}, "swap sw-cp-1 -> sw-edge-7 refused: 1 gate fails now (nothing created):",
		`spec: no VoterPolicy "default": create it so the voter controller observes etcd before any swap`)

	policy := &holdfastv1.VoterPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: holdfastv1.VoterPolicyName},
		Spec:       holdfastv1.VoterPolicySpec{Etcd: holdfastv1.EtcdAccess{Endpoints: []string{"https://10.0.0.1:2379"}}},
	}
	if err := env.Client.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, policy) })
	healthy := func() holdfastv1.VoterPolicyStatus {
		st := holdfastv1.VoterPolicyStatus{Voters: []string{"sw-cp-1", "sw-cp-2", "sw-cp-3"}, Leader: "sw-cp-2", ClusterID: "cafe0001"}
		meta.SetStatusCondition(&st.Conditions, cond(holdfastv1.ConditionEtcdHealthy, metav1.ConditionTrue, "AllVotersAnswer", "every voter answers"))
		return st
	}
	setPolicyStatus(t, healthy())

	// One case per kind of gate: each sets the cluster up, is refused with
	// exactly its reasons, and is undone.
	leaseRenew := time.Now()
	for _, tc := range []struct {
		name    string
		args    []string
		set     func() (undo func())
		header  string
		reasons []string
	}{
		{name: "another swap holds the Lease", args: []string{"sw-cp-1", "sw-edge-7"}, set: func() func() {
			l := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName,
					Annotations: map[string]string{holdfastv1.AnnotationSwapID: "20261130T020000Z-sw-cp-3-sw-edge-8", holdfastv1.AnnotationSwapNodes: "sw-cp-3,sw-edge-8"}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("holdfast-controller-1"), LeaseDurationSeconds: ptr.To[int32](600),
					RenewTime: &metav1.MicroTime{Time: leaseRenew}},
			}
			if err := env.Client.Create(ctx, l); err != nil {
				t.Fatal(err)
			}
			return func() { _ = env.Client.Delete(ctx, l) }
		}, reasons: []string{"spec: the swap Lease kube-system/holdfast-voter-swap is held by holdfast-controller-1 until " +
			leaseRenew.Add(600*time.Second).UTC().Format(time.RFC3339) + "; one swap at a time"}},
		{name: "a status no voters role stamped (stale)", args: []string{"sw-cp-1", "sw-edge-7"}, set: func() func() {
			setPolicyStatusAged(t, healthy(), true)
			return func() { setPolicyStatus(t, healthy()) }
		}, reasons: []string{"status.observedTime: voter policy status carries no observation time; the voters role has not observed etcd (or predates observedTime)"}},
		{name: "a voter not Ready", args: []string{"sw-cp-1", "sw-edge-7"}, set: func() func() {
			setReady(t, "sw-cp-2", false)
			return func() { setReady(t, "sw-cp-2", true) }
		}, reasons: []string{"spec: voter sw-cp-2 is not Ready; swap once every voter's Node is Ready"}},
		{name: "the incoming node has a tombstone of this cluster", args: []string{"sw-cp-1", "sw-edge-7"}, set: func() func() {
			editNode(t, "sw-edge-7", func(n *corev1.Node) {
				n.Annotations[holdfastv1.AnnotationTombstone] = `{"memberID":"8e9e05c52164694d","clusterID":"cafe0001"}`
			})
			return func() {
				editNode(t, "sw-edge-7", func(n *corev1.Node) { delete(n.Annotations, holdfastv1.AnnotationTombstone) })
			}
		}, reasons: []string{"spec.incoming: sw-edge-7 carries a tombstone of this cluster (holdfast.io/tombstone): its removed member is not finished to an agent yet"}},
		{name: "an even voter count", args: []string{"sw-cp-1", "sw-edge-7"}, set: func() func() {
			st := healthy()
			st.Voters = append(st.Voters, "sw-edge-8")
			setPolicyStatus(t, st)
			return func() { setPolicyStatus(t, healthy()) }
		}, reasons: []string{"spec: 4 voters where the target is 3; the voter set must be at its target before a swap"}},
		{name: "a node labelled a voter that does not vote", args: []string{"sw-cp-1", "sw-edge-7"}, set: func() func() {
			editNode(t, "sw-edge-8", func(n *corev1.Node) { n.Labels[holdfastv1.LabelEtcdRole] = "true" })
			return func() { editNode(t, "sw-edge-8", func(n *corev1.Node) { delete(n.Labels, holdfastv1.LabelEtcdRole) }) }
		}, reasons: []string{"spec: node sw-edge-8 is labelled node-role.kubernetes.io/etcd but has no etcd member (member but not a voter); a voter is judged by etcd's own vote"}},
		{name: "the outgoing voter pinned", args: []string{"sw-cp-1", "sw-edge-7"}, set: func() func() {
			editNode(t, "sw-cp-1", func(n *corev1.Node) { n.Labels[holdfastv1.LabelPinned] = "true" })
			return func() { editNode(t, "sw-cp-1", func(n *corev1.Node) { delete(n.Labels, holdfastv1.LabelPinned) }) }
		}, reasons: []string{"spec.outgoing: sw-cp-1 is pinned (holdfast.io/pinned); an admin must unpin it first"}},
		{name: "the incoming node unprovisioned and not Ready", args: []string{"sw-cp-1", "sw-edge-7"}, set: func() func() {
			editNode(t, "sw-edge-7", func(n *corev1.Node) { delete(n.Annotations, holdfastv1.AnnotationProvisioned) })
			setReady(t, "sw-edge-7", false)
			return func() {
				editNode(t, "sw-edge-7", func(n *corev1.Node) { n.Annotations[holdfastv1.AnnotationProvisioned] = "true" })
				setReady(t, "sw-edge-7", true)
			}
		}, header: "swap sw-cp-1 -> sw-edge-7 refused: 2 gates fail now (nothing created):", reasons: []string{
			"spec.incoming: sw-edge-7 is not provisioned (no holdfast.io/provisioned annotation from its node plugin); install the server unit first",
			"spec.incoming: sw-edge-7 is not Ready",
		}},
		{name: "etcd unhealthy without a leader, a learner, OUT not a voter: each reason (dry run)",
			args: []string{"sw-edge-8", "sw-edge-7", "--dry-run"}, set: func() func() {
				st := healthy()
				st.Leader, st.Learners = "", []string{"sw-edge-8"}
				meta.SetStatusCondition(&st.Conditions, cond(holdfastv1.ConditionEtcdHealthy, metav1.ConditionFalse, "MemberUnreachable", "sw-cp-3 does not answer"))
				setPolicyStatus(t, st)
				return func() { setPolicyStatus(t, healthy()) }
			},
			header: "swap sw-edge-8 -> sw-edge-7 refused: 4 gates fail now (dry run, nothing created):",
			reasons: []string{
				"spec: etcd is not healthy (VoterPolicy condition EtcdHealthy MemberUnreachable: sw-cp-3 does not answer); swap once every voter answers",
				"spec: etcd reports no leader; swap once it has one",
				"spec: learner present (sw-edge-8); wait until it is promoted or removed",
				"spec.outgoing: sw-edge-8 is not an etcd voter (voters: sw-cp-1, sw-cp-2, sw-cp-3); name a current voter",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			undo := tc.set()
			defer undo()
			header := tc.header
			if header == "" {
				header = "swap sw-cp-1 -> sw-edge-7 refused: 1 gate fails now (nothing created):"
			}
			refused(t, tc.args, header, tc.reasons...)
		})
	}

	// A person RBAC does not allow to create swaps: refused, 1, with the reason.
	// The gates hold for them (the Lease they may not read is left to the
	// webhook, with a note).
	r := holdfast(t, operatorKubeconfig(t), "swap", "sw-cp-1", "sw-edge-7")
	wantExit(t, r, plugin.ExitRefused, "the swap Lease kube-system/holdfast-voter-swap is not readable", "the webhook judges it",
		"creating the VoterSwap: refused", `cannot create resource "voterswaps"`)

	// Every gate holds: a dry run says so and creates nothing.
	r = admin(t, "swap", "sw-cp-1", "sw-edge-7", "--dry-run")
	wantExit(t, r, plugin.ExitOK)
	if !strings.Contains(r.stdout, "every gate holds") {
		t.Fatalf("dry run: %s", r)
	}
	if n := len(swaps()); n != before {
		t.Fatalf("--dry-run created a VoterSwap")
	}

	// Accepted: a Manual VoterSwap with the spec asked for.
	r = admin(t, "swap", "sw-cp-1", "sw-edge-7", "--reason", "fsync p99 40ms")
	wantExit(t, r, plugin.ExitOK)
	var created *holdfastv1.VoterSwap
	for _, s := range swaps() {
		if s.Spec.Outgoing == "sw-cp-1" {
			created = &s
		}
	}
	if created == nil || created.Spec.Incoming != "sw-edge-7" || created.Spec.Reason != "fsync p99 40ms" ||
		created.Spec.Origin != holdfastv1.SwapManual || !strings.HasPrefix(created.Name, "swap-sw-cp-1-sw-edge-7-") ||
		!strings.Contains(r.stdout, "voterswap.holdfast.io/"+created.Name+" created") {
		t.Fatalf("created swap %+v\n%s", created, r)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, created) })

	// No IN: the scheduler picks; only OUT is checked.
	r = admin(t, "swap", "sw-cp-1")
	wantExit(t, r, plugin.ExitOK)
	if !strings.Contains(r.stdout, "sw-cp-1 -> (scheduler picks)") {
		t.Fatalf("%s", r)
	}

	// --wait follows the swap to its outcome, as the voter controller writes it.
	for _, tc := range []struct {
		final holdfastv1.SwapPhase
		code  int
		out   string
	}{
		{holdfastv1.SwapSucceeded, plugin.ExitOK, "phase Succeeded"},
		{holdfastv1.SwapRolledBack, plugin.ExitRefused, "RolledBack: Rollback Done LearnerStalled: learner did not catch up"},
	} {
		wait := start(t, env.Kubeconfig, "swap", "sw-cp-1", "sw-edge-7", "--wait", "--timeout", "1m")
		var s holdfastv1.VoterSwap
		eventually(t, 30*time.Second, "the waited swap", func() bool {
			for _, it := range swaps() {
				if it.Spec.Outgoing == "sw-cp-1" && it.Status.Phase == "" && it.Name != created.Name && it.Spec.Incoming == "sw-edge-7" {
					s = it
					return true
				}
			}
			return false
		})
		t.Cleanup(func() { _ = env.Client.Delete(ctx, &s) })
		s.Status = holdfastv1.VoterSwapStatus{Phase: holdfastv1.SwapRunning, Step: holdfastv1.StepPromote}
		if err := env.Client.Status().Update(ctx, &s); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // the waiter's output is read only at its end: give it time to see Running
		s.Status.Phase = tc.final
		s.Status.History = []holdfastv1.SwapStepRecord{{Step: holdfastv1.StepRollback, Outcome: "Done", Reason: "LearnerStalled", Message: "learner did not catch up", At: metav1.Now()}}
		if err := env.Client.Status().Update(ctx, &s); err != nil {
			t.Fatal(err)
		}
		r := wait()
		if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.out) {
			t.Errorf("--wait for %s: want exit %d and %q, got %s", tc.final, tc.code, tc.out, r)
		}
	}

	// --wait that runs out of time: 4, and the swap stands.
	r = admin(t, "swap", "sw-cp-1", "sw-edge-7", "--wait", "--timeout", "2s")
	wantExit(t, r, plugin.ExitTimeout, "no outcome within 2s; the request stands")
}
