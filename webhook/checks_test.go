package webhook

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

var t0 = time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)

func testOptions() *Options {
	o := DefaultOptions()
	o.Now = func() time.Time { return t0 }
	return &o
}

var (
	admin      = requester{User: "admin", Groups: []string{"system:masters", "system:authenticated"}}
	operator   = requester{User: "olivia", Groups: []string{"plant-operators", "system:authenticated"}}
	controller = requester{User: "system:serviceaccount:holdfast-system:holdfast-controller"}
)

func pluginOn(node string) requester {
	r := requester{User: "system:serviceaccount:holdfast-system:holdfast-node"}
	if node != "" {
		r.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
	}
	return r
}

// reasons is every error of a verdict, 422 ones first, as the client sees
// them.
func reasons(v verdict) string {
	var out []string
	for _, l := range []field.ErrorList{v.invalid, v.forbidden} {
		for _, e := range l {
			out = append(out, e.Error())
		}
	}
	return strings.Join(out, "\n")
}

func expect(t *testing.T, v verdict, want ...string) {
	t.Helper()
	if got := reasons(v); got != strings.Join(want, "\n") {
		t.Fatalf("reasons:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

func nodeWith(name string, labels, ann map[string]string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: ann}, Spec: corev1.NodeSpec{Taints: taints}}
}

func heldLease(nodes string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "holdfast-voter-swap",
			Labels:      map[string]string{holdfastv1.LabelGuarded: "true"},
			Annotations: map[string]string{holdfastv1.AnnotationSwapID: "s1", holdfastv1.AnnotationSwapNodes: nodes}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("ctl"), LeaseDurationSeconds: ptr.To[int32](60),
			RenewTime: &metav1.MicroTime{Time: t0.Add(-10 * time.Second)}},
	}
}

var oos = corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}

func TestNodeRules(t *testing.T) {
	o := testOptions()
	ctl := "only the holdfast voter controller (system:serviceaccount:holdfast-system:holdfast-controller) may change it"
	reportOnly := "only the node plugin on node n1 writes it (its report of the host), and only the voter controller (system:serviceaccount:holdfast-system:holdfast-controller) clears it; " +
		"to repair one, a member of [system:masters] removes it with a reason in holdfast.io/report-repair (docs/voter-swap.md, break-glass)"
	for _, tc := range []struct {
		name     string
		r        requester
		old, new *corev1.Node
		facts    nodeFacts
		want     []string
	}{
		{"desired-role by an admin", admin, nodeWith("n1", nil, nil), nodeWith("n1", map[string]string{holdfastv1.LabelDesiredRole: "server"}, nil), nodeFacts{},
			[]string{"metadata.labels[holdfast.io/desired-role]: Forbidden: " + ctl + ": the voter controller sets the desired role during a swap; create a VoterSwap instead"}},
		{"desired-role by the controller", controller, nodeWith("n1", nil, nil), nodeWith("n1", map[string]string{holdfastv1.LabelDesiredRole: "server"}, nil), nodeFacts{}, nil},
		{"desired-role removed by an admin", admin, nodeWith("n1", map[string]string{holdfastv1.LabelDesiredRole: "server"}, nil), nodeWith("n1", nil, nil), nodeFacts{},
			[]string{"metadata.labels[holdfast.io/desired-role]: Forbidden: " + ctl + ": the voter controller sets the desired role during a swap; create a VoterSwap instead"}},
		{"desired-role unchanged among other changes", admin, nodeWith("n1", map[string]string{holdfastv1.LabelDesiredRole: "server"}, nil),
			nodeWith("n1", map[string]string{holdfastv1.LabelDesiredRole: "server", "zone": "a"}, nil), nodeFacts{}, nil},
		{"desired-role unknown value", controller, nodeWith("n1", nil, nil), nodeWith("n1", map[string]string{holdfastv1.LabelDesiredRole: "voter"}, nil), nodeFacts{},
			[]string{`metadata.labels[holdfast.io/desired-role]: Unsupported value: "voter": supported values: "server", "agent"`}},
		{"registered with desired-role", admin, nil, nodeWith("n1", map[string]string{holdfastv1.LabelDesiredRole: "agent"}, nil), nodeFacts{},
			[]string{"metadata.labels[holdfast.io/desired-role]: Forbidden: " + ctl + ": the voter controller sets the desired role during a swap; create a VoterSwap instead"}},
		{"role-step and role-join by an admin", admin, nodeWith("n1", nil, nil),
			nodeWith("n1", nil, map[string]string{holdfastv1.AnnotationRoleStep: "bogus", holdfastv1.AnnotationRoleJoin: "https://10.0.0.1:2380"}), nodeFacts{},
			[]string{
				`metadata.annotations[holdfast.io/role-step]: Unsupported value: "bogus": supported values: "promote", "step-down", "finish-demote", "rollback"`,
				"metadata.annotations[holdfast.io/role-join]: Forbidden: " + ctl + ": role steps belong to the swap in progress",
				"metadata.annotations[holdfast.io/role-step]: Forbidden: " + ctl + ": role steps belong to the swap in progress",
			}},
		{"etcd label off a member", admin, nodeWith("cp-1", map[string]string{holdfastv1.LabelEtcdRole: "true"}, nil), nodeWith("cp-1", nil, nil),
			nodeFacts{Members: map[string]bool{"cp-1": true}},
			[]string{"metadata.labels[node-role.kubernetes.io/etcd]: Forbidden: node cp-1 is still an etcd member (VoterPolicy default status); a VoterSwap removes the member first and then clears this label"}},
		{"etcd label off a former member", controller, nodeWith("cp-1", map[string]string{holdfastv1.LabelEtcdRole: "true"}, nil), nodeWith("cp-1", nil, nil),
			nodeFacts{Members: map[string]bool{"cp-2": true}}, nil},
		{"control-plane label off a learner", controller, nodeWith("cp-1", map[string]string{holdfastv1.LabelControlPlaneRole: ""}, nil), nodeWith("cp-1", nil, nil),
			nodeFacts{Members: map[string]bool{"cp-1": true}},
			[]string{"metadata.labels[node-role.kubernetes.io/control-plane]: Forbidden: node cp-1 is still an etcd member (VoterPolicy default status); a VoterSwap removes the member first and then clears this label"}},
		{"voter-eligible off a swap's node", admin, nodeWith("edge-7", map[string]string{holdfastv1.LabelVoterEligible: "true"}, nil),
			nodeWith("edge-7", map[string]string{holdfastv1.LabelVoterEligible: "false"}, nil), nodeFacts{RunningSwaps: []string{"swap-a"}},
			[]string{"metadata.labels[holdfast.io/voter-eligible]: Forbidden: node edge-7 is in the running VoterSwap swap-a; change it after the swap finishes"}},
		{"voter-eligible off with no swap", admin, nodeWith("edge-7", map[string]string{holdfastv1.LabelVoterEligible: "true"}, nil), nodeWith("edge-7", nil, nil), nodeFacts{}, nil},
		{"node plugin on its own node", pluginOn("n1"), nodeWith("n1", nil, nil),
			nodeWith("n1", map[string]string{holdfastv1.LabelRole: "agent"}, map[string]string{holdfastv1.AnnotationActuator: "{}"}), nodeFacts{}, nil},
		{"node plugin on another node", pluginOn("n2"), nodeWith("n1", nil, nil),
			nodeWith("n1", map[string]string{holdfastv1.LabelRole: "agent"}, map[string]string{holdfastv1.AnnotationTombstone: "x"}), nodeFacts{},
			[]string{
				"metadata.labels[holdfast.io/role]: Forbidden: the node plugin on node n2 may write holdfast keys only on its own Node, not on n1",
				"metadata.annotations[holdfast.io/tombstone]: Forbidden: the node plugin on node n2 may write holdfast annotations only on its own Node, not on n1",
			}},
		{"node plugin without a node name", pluginOn(""), nodeWith("n1", nil, nil), nodeWith("n1", nil, map[string]string{holdfastv1.AnnotationFitness: "x"}), nodeFacts{},
			[]string{"metadata: Forbidden: the node plugin must use a pod-bound service account token (user extra authentication.kubernetes.io/node-name names its node)"}},
		{"node plugin setting desired-role on its own node", pluginOn("n1"), nodeWith("n1", nil, nil), nodeWith("n1", map[string]string{holdfastv1.LabelDesiredRole: "server"}, nil), nodeFacts{},
			[]string{"metadata.labels[holdfast.io/desired-role]: Forbidden: " + ctl + ": the voter controller sets the desired role during a swap; create a VoterSwap instead"}},
		{"a report written by an admin", admin, nodeWith("n1", nil, nil),
			nodeWith("n1", map[string]string{holdfastv1.LabelRole: "server"}, map[string]string{holdfastv1.AnnotationActuator: `{"step":"step-down","phase":"done"}`}), nodeFacts{},
			[]string{
				"metadata.labels[holdfast.io/role]: Forbidden: " + reportOnly,
				"metadata.annotations[holdfast.io/actuator]: Forbidden: " + reportOnly,
			}},
		{"a stale report re-applied", admin, nodeWith("n1", nil, map[string]string{holdfastv1.AnnotationProvisioned: "false"}),
			nodeWith("n1", nil, map[string]string{holdfastv1.AnnotationProvisioned: "true"}), nodeFacts{},
			[]string{"metadata.annotations[holdfast.io/provisioned]: Forbidden: " + reportOnly}},
		{"a Node registered with a report", admin, nil, nodeWith("n1", nil, map[string]string{holdfastv1.AnnotationFitness: "{}"}), nodeFacts{},
			[]string{"metadata.annotations[holdfast.io/fitness]: Forbidden: " + reportOnly}},
		{"the runtimes report written by its node's plugin", pluginOn("n1"), nodeWith("n1", nil, nil),
			nodeWith("n1", nil, map[string]string{holdfastv1.AnnotationRuntimes: `{"runtimes":[]}`}), nodeFacts{}, nil},
		{"the runtimes report written by another node's plugin", pluginOn("n2"), nodeWith("n1", nil, nil),
			nodeWith("n1", nil, map[string]string{holdfastv1.AnnotationRuntimes: `{"runtimes":[]}`}), nodeFacts{},
			[]string{"metadata.annotations[holdfast.io/runtimes]: Forbidden: the node plugin on node n2 may write holdfast annotations only on its own Node, not on n1"}},
		{"a runtimes report forged by an admin (a runtime still writing hidden)", admin,
			nodeWith("n1", nil, map[string]string{holdfastv1.AnnotationRuntimes: `{"runtimes":[{"namespace":"plant","unit":"kiln-1","epoch":1}]}`}),
			nodeWith("n1", nil, map[string]string{holdfastv1.AnnotationRuntimes: `{"runtimes":[]}`}), nodeFacts{},
			[]string{"metadata.annotations[holdfast.io/runtimes]: Forbidden: " + reportOnly}},
		{"a runtimes report written by the controller", controller, nodeWith("n1", nil, nil),
			nodeWith("n1", nil, map[string]string{holdfastv1.AnnotationRuntimes: `{"runtimes":[]}`}), nodeFacts{},
			[]string{"metadata.annotations[holdfast.io/runtimes]: Forbidden: " + reportOnly}},
		{"a report written by the controller", controller, nodeWith("n1", nil, nil), nodeWith("n1", nil, map[string]string{holdfastv1.AnnotationTombstone: "{}"}), nodeFacts{},
			[]string{"metadata.annotations[holdfast.io/tombstone]: Forbidden: " + reportOnly}},
		{"reports cleared by the controller", controller,
			nodeWith("n1", map[string]string{holdfastv1.LabelRole: "agent"}, map[string]string{holdfastv1.AnnotationTombstone: "{}", holdfastv1.AnnotationActuator: "{}"}),
			nodeWith("n1", nil, nil), nodeFacts{}, nil},
		{"a report cleared by an admin without a reason", admin, nodeWith("n1", nil, map[string]string{holdfastv1.AnnotationTombstone: "{}"}), nodeWith("n1", nil, nil), nodeFacts{},
			[]string{"metadata.annotations[holdfast.io/tombstone]: Forbidden: node n1's plugin reports it; a repair removes it only with the reason in holdfast.io/report-repair set in the same request (docs/voter-swap.md, break-glass)"}},
		{"a report cleared by an admin with a reason (break-glass)", admin, nodeWith("n1", nil, map[string]string{holdfastv1.AnnotationTombstone: "{}"}),
			nodeWith("n1", nil, map[string]string{holdfastv1.AnnotationReportRepair: "host rebuilt, INC-42"}), nodeFacts{}, nil},
		{"a report rewritten by an admin with a reason", admin, nodeWith("n1", nil, map[string]string{holdfastv1.AnnotationTombstone: "{}"}),
			nodeWith("n1", nil, map[string]string{holdfastv1.AnnotationReportRepair: "host rebuilt", holdfastv1.AnnotationTombstone: `{"member":"x"}`}), nodeFacts{},
			[]string{"metadata.annotations[holdfast.io/tombstone]: Forbidden: " + reportOnly}},
		{"a report cleared with a reason outside the repair groups", operator, nodeWith("n1", nil, map[string]string{holdfastv1.AnnotationFitness: "{}"}),
			nodeWith("n1", nil, map[string]string{holdfastv1.AnnotationReportRepair: "why not"}), nodeFacts{},
			[]string{
				"metadata.annotations[holdfast.io/report-repair]: Forbidden: user olivia (groups plant-operators, system:authenticated) may not repair a node report: requires membership in one of the groups [system:masters]",
				"metadata.annotations[holdfast.io/fitness]: Forbidden: " + reportOnly,
			}},
		{"out-of-service on a swap node", admin, nodeWith("cp-3", nil, nil), nodeWith("cp-3", nil, nil, corev1.Taint{Key: "x", Effect: corev1.TaintEffectNoSchedule}, oos),
			nodeFacts{SwapLease: heldLease("cp-3,edge-7"), Now: t0},
			[]string{"spec.taints[1]: Forbidden: node cp-3 is in voter swap s1 (swap Lease kube-system/holdfast-voter-swap held by ctl until 2026-11-29T20:00:50Z); taint it out of service after the swap finishes or the Lease expires"}},
		{"out-of-service on a swap node by the controller", controller, nodeWith("cp-3", nil, nil), nodeWith("cp-3", nil, nil, oos),
			nodeFacts{SwapLease: heldLease("cp-3"), Now: t0},
			[]string{"spec.taints[0]: Forbidden: node cp-3 is in voter swap s1 (swap Lease kube-system/holdfast-voter-swap held by ctl until 2026-11-29T20:00:50Z); taint it out of service after the swap finishes or the Lease expires"}},
		{"out-of-service after the Lease expired", admin, nodeWith("cp-3", nil, nil), nodeWith("cp-3", nil, nil, oos),
			nodeFacts{SwapLease: heldLease("cp-3"), Now: t0.Add(50 * time.Second)}, nil},
		{"out-of-service already there", admin, nodeWith("cp-3", nil, nil, oos), nodeWith("cp-3", map[string]string{"a": "b"}, nil, oos),
			nodeFacts{SwapLease: heldLease("cp-3"), Now: t0}, nil},
		{"out-of-service on another node", admin, nodeWith("cp-1", nil, nil), nodeWith("cp-1", nil, nil, oos), nodeFacts{SwapLease: heldLease("cp-3"), Now: t0}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, _ := checkNode(o, tc.r, tc.old, tc.new, tc.facts)
			expect(t, v, tc.want...)
		})
	}
}

func TestNodeNeedsReadOnlyWhatTheChangeCallsFor(t *testing.T) {
	old := nodeWith("n", map[string]string{holdfastv1.LabelEtcdRole: "", holdfastv1.LabelVoterEligible: "true"}, nil)
	if got := needsForNode(old, nodeWith("n", map[string]string{holdfastv1.LabelEtcdRole: "", holdfastv1.LabelVoterEligible: "true", "x": "y"}, nil)); got != (nodeNeeds{}) {
		t.Fatalf("an unrelated change reads %+v", got)
	}
	if got := needsForNode(old, nodeWith("n", nil, nil, oos)); got != (nodeNeeds{members: true, swaps: true, lease: true}) {
		t.Fatalf("removing both labels and adding the taint reads %+v", got)
	}
}

func TestSwapLeaseRules(t *testing.T) {
	o := testOptions()
	held := heldLease("cp-3,edge-7")
	with := func(f func(*coordinationv1.Lease)) *coordinationv1.Lease { l := held.DeepCopy(); f(l); return l }
	renewed := with(func(l *coordinationv1.Lease) { l.Spec.RenewTime = &metav1.MicroTime{Time: t0} })
	onlyCtl := "spec.holderIdentity: Forbidden: only the holdfast voter controller (system:serviceaccount:holdfast-system:holdfast-controller) may acquire, renew or release the swap Lease"
	heldBy := "spec.holderIdentity: Forbidden: the swap Lease is held by ctl until 2026-11-29T20:00:50Z; another holder may take it only after it expires or is released"
	for _, tc := range []struct {
		name     string
		r        requester
		old, new *coordinationv1.Lease
		now      time.Time
		want     []string
	}{
		{"controller renews", controller, held, renewed, t0, nil},
		{"admin renews", admin, held, renewed, t0, []string{onlyCtl}},
		{"admin takes it", admin, held, with(func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("me") }), t0, []string{onlyCtl, heldBy}},
		{"controller takes it over while held", controller, held, with(func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("ctl-2") }), t0, []string{heldBy}},
		{"controller takes it over once expired", controller, held, with(func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity = ptr.To("ctl-2")
			l.Annotations[holdfastv1.AnnotationSwapID] = "s2"
			l.Annotations[holdfastv1.AnnotationSwapNodes] = "cp-2"
		}), t0.Add(50 * time.Second), nil},
		{"controller releases, clearing the record", controller, held, with(func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity = nil
			l.Annotations = nil
		}), t0, nil},
		{"controller drops a node and renames the swap", controller, held, with(func(l *coordinationv1.Lease) {
			l.Annotations[holdfastv1.AnnotationSwapNodes] = "cp-3"
			l.Annotations[holdfastv1.AnnotationSwapID] = "s9"
		}), t0, []string{
			"metadata.annotations[holdfast.io/swap-id]: Forbidden: swap s1 is in progress; it may change only when the Lease is released",
			"metadata.annotations[holdfast.io/swap-nodes]: Forbidden: may not drop node edge-7 while swap s1 holds the Lease; nodes may only be added",
		}},
		{"controller adds a node", controller, held, with(func(l *coordinationv1.Lease) { l.Annotations[holdfastv1.AnnotationSwapNodes] = "cp-3,edge-7,edge-8" }), t0, nil},
		{"admin edits the record", admin, held, with(func(l *coordinationv1.Lease) { l.Annotations[holdfastv1.AnnotationSwapNodes] = "cp-3,edge-7,x" }), t0,
			[]string{"metadata.annotations[holdfast.io/swap-nodes]: Forbidden: only the holdfast voter controller (system:serviceaccount:holdfast-system:holdfast-controller) may change it"}},
		{"guard label removed", controller, held, with(func(l *coordinationv1.Lease) { l.Labels = nil }), t0,
			[]string{`metadata.labels[holdfast.io/guarded]: Forbidden: must be "true" on the swap Lease, so that every change of it is checked`}},
		{"held without a record", controller, nil, with(func(l *coordinationv1.Lease) {
			l.Annotations = map[string]string{holdfastv1.AnnotationSwapNodes: "Bad_Node"}
		}), t0, []string{
			"metadata.annotations[holdfast.io/swap-id]: Required value: a held swap Lease names its swap",
			`metadata.annotations[holdfast.io/swap-nodes]: Invalid value: "Bad_Node": not a node name: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
		}},
		{"deleted while held", controller, held, nil, t0,
			[]string{"spec.holderIdentity: Forbidden: the swap Lease is held by ctl until 2026-11-29T20:00:50Z for swap s1; it may be deleted only once released or expired"}},
		{"deleted once expired", admin, held, nil, t0.Add(time.Minute), nil},
		{"another Lease", admin, nil, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-scheduler"}}, t0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expect(t, checkSwapLease(o, tc.r, tc.old, tc.new, tc.now), tc.want...)
		})
	}
}

func unitBound(mode holdfastv1.AvailabilityMode, state holdfastv1.LeaseState) *holdfastv1.Unit {
	return &holdfastv1.Unit{
		ObjectMeta: metav1.ObjectMeta{Namespace: "plant", Name: "kiln-1"},
		Spec: holdfastv1.UnitSpec{NodeSelector: map[string]string{"dev": "kiln-1"}, Availability: holdfastv1.Availability{
			Mode: mode, LeaseDurationSeconds: 30, RuntimeStartupGraceSeconds: 120,
			Targets: &holdfastv1.FailoverTargets{Nodes: []string{"edge-2", "edge-3"}},
		}},
		Status: holdfastv1.UnitStatus{RuntimeBinding: &holdfastv1.RuntimeBinding{Node: "edge-1", Epoch: 3, LeaseState: state,
			LeaseEstablishedBy: &holdfastv1.RuntimeIncarnation{PodUID: "uid-3"}}},
	}
}

func readyNode(name string, ready bool, labels map[string]string) corev1.Node {
	s := corev1.ConditionTrue
	if !ready {
		s = corev1.ConditionFalse
	}
	n := nodeWith(name, labels, nil)
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: s}}
	return *n
}

func TestUnitRules(t *testing.T) {
	o := testOptions()
	o.FailoverGroups = []string{"system:masters", "shift-leads"}
	nodes := unitFacts{Nodes: []corev1.Node{
		readyNode("edge-1", true, map[string]string{"dev": "kiln-1"}), readyNode("edge-2", true, nil), readyNode("edge-3", false, nil), readyNode("edge-9", true, nil),
	}}
	ann := func(u *holdfastv1.Unit, kv ...string) *holdfastv1.Unit {
		u = u.DeepCopy()
		u.Annotations = map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			u.Annotations[kv[i]] = kv[i+1]
		}
		return u
	}
	// The runtime of epoch 3 restarted once in its pod.
	nodes.Running = &holdfastv1.RuntimeIncarnation{PodUID: "pod-uid-3", RestartCount: 1}
	held := unitBound(holdfastv1.Failover, holdfastv1.LeaseHeld)
	expired := unitBound(holdfastv1.Failover, holdfastv1.LeaseExpired)
	fence := holdfastv1.AnnotationFailoverConfirmFenced
	epoch := holdfastv1.AnnotationFailoverConfirmEpoch
	inc := holdfastv1.AnnotationFailoverConfirmIncarnation
	to := holdfastv1.AnnotationFailoverTo
	for _, tc := range []struct {
		name     string
		r        requester
		old, new *holdfastv1.Unit
		want     []string
		audits   []string
	}{
		{"failover of a held lease without a fence", admin, held, ann(held, to, "edge-2"), []string{
			"metadata.annotations[holdfast.io/failover-to]: Forbidden: the runtime on edge-1 still holds its control lease (Held at epoch 3); set holdfast.io/failover-confirm-fenced (with holdfast.io/failover-confirm-epoch: \"3\" and holdfast.io/failover-confirm-incarnation: \"pod-uid-3/1\") to how edge-1 was fenced, or wait for the lease to expire",
		}, nil},
		{"failover of a held lease with a fence", admin, held, ann(held, to, "edge-2", fence, "breaker off", epoch, "3", inc, "pod-uid-3/1"), nil,
			[]string{AuditConfirmFenced, AuditManualFailover}},
		// A confirmation certifies the runtime of the epoch it names, the
		// binding's: a stale one re-applied (GitOps) or one naming none is
		// refused, and certifies nothing for the failover beside it.
		{"failover of a held lease with a fence of an earlier epoch", admin, held, ann(held, to, "edge-2", fence, "breaker off", epoch, "2"), []string{
			`metadata.annotations[holdfast.io/failover-confirm-epoch]: Invalid value: "2": holdfast.io/failover-confirm-fenced certifies the runtime of epoch 2, but the binding is at epoch 3: a confirmation of one runtime says nothing of another; if the runtime of epoch 3 has stopped, set holdfast.io/failover-confirm-epoch to 3`,
			"metadata.annotations[holdfast.io/failover-to]: Forbidden: the runtime on edge-1 still holds its control lease (Held at epoch 3); set holdfast.io/failover-confirm-fenced (with holdfast.io/failover-confirm-epoch: \"3\" and holdfast.io/failover-confirm-incarnation: \"pod-uid-3/1\") to how edge-1 was fenced, or wait for the lease to expire",
		}, nil},
		{"a fence naming no epoch", admin, held, ann(held, fence, "breaker off"), []string{
			`metadata.annotations[holdfast.io/failover-confirm-epoch]: Invalid value: "": holdfast.io/failover-confirm-fenced names no epoch: set holdfast.io/failover-confirm-epoch to 3, the epoch of the runtime that was fenced (kubectl holdfast failover --confirm-fenced sets both)`,
		}, nil},
		{"a fence whose epoch is not a number", admin, held, ann(held, fence, "breaker off", epoch, "three"), []string{
			`metadata.annotations[holdfast.io/failover-confirm-epoch]: Invalid value: "three": holdfast.io/failover-confirm-epoch: "three" is not an epoch (a whole number from 1): set it to 3, the epoch of the runtime that was fenced`,
		}, nil},
		{"the same words moved to the binding's epoch are a new certification", admin, ann(held, fence, "breaker off", epoch, "2"),
			ann(held, fence, "breaker off", epoch, "3", inc, "pod-uid-3/1"), nil, []string{AuditConfirmFenced}},
		// It certifies one process: one written before the kubelet
		// restarted the runtime (refused then, applied later by a GitOps
		// tool) or naming none is refused.
		{"a fence written before the kubelet restarted the runtime", admin, held, ann(held, to, "edge-2", fence, "breaker off", epoch, "3", inc, "pod-uid-3/0"), []string{
			`metadata.annotations[holdfast.io/failover-confirm-incarnation]: Invalid value: "pod-uid-3/0": holdfast.io/failover-confirm-fenced certifies pod pod-uid-3 restart 0, but the runtime of epoch 3 is pod pod-uid-3 restart 1: the kubelet restarted it since; a confirmation of one process says nothing of another; if it has stopped too, set holdfast.io/failover-confirm-incarnation to "pod-uid-3/1"`,
			"metadata.annotations[holdfast.io/failover-to]: Forbidden: the runtime on edge-1 still holds its control lease (Held at epoch 3); set holdfast.io/failover-confirm-fenced (with holdfast.io/failover-confirm-epoch: \"3\" and holdfast.io/failover-confirm-incarnation: \"pod-uid-3/1\") to how edge-1 was fenced, or wait for the lease to expire",
		}, nil},
		{"a fence naming no process", admin, held, ann(held, fence, "breaker off", epoch, "3"), []string{
			`metadata.annotations[holdfast.io/failover-confirm-incarnation]: Invalid value: "": holdfast.io/failover-confirm-fenced names no runtime process: set holdfast.io/failover-confirm-incarnation to "pod-uid-3/1", the runtime of epoch 3 as its pod reads now (kubectl holdfast failover --confirm-fenced sets it)`,
		}, nil},
		{"a fence of no pod while one runs", admin, held, ann(held, fence, "breaker off", epoch, "3", inc, "none"), []string{
			`metadata.annotations[holdfast.io/failover-confirm-incarnation]: Invalid value: "none": holdfast.io/failover-confirm-fenced certifies no runtime pod, but the runtime of epoch 3 is pod pod-uid-3 restart 1: a runtime pod exists since; a confirmation of one process says nothing of another; if it has stopped too, set holdfast.io/failover-confirm-incarnation to "pod-uid-3/1"`,
		}, nil},
		{"the same words naming the process now running are a new certification", admin, ann(held, fence, "breaker off", epoch, "3", inc, "pod-uid-3/0"),
			ann(held, fence, "breaker off", epoch, "3", inc, "pod-uid-3/1"), nil, []string{AuditConfirmFenced}},
		{"failover of an expired lease", admin, expired, ann(expired, to, "edge-2"), nil, []string{AuditManualFailover}},
		{"failover of an Autonomy runtime needs a fence", admin, unitBound(holdfastv1.Autonomy, ""), ann(unitBound(holdfastv1.Autonomy, ""), to, "edge-2"), []string{
			"metadata.annotations[holdfast.io/failover-to]: Forbidden: the runtime on edge-1 is an Autonomy runtime and never fences itself; set holdfast.io/failover-confirm-fenced (with holdfast.io/failover-confirm-epoch: \"3\" and holdfast.io/failover-confirm-incarnation: \"pod-uid-3/1\") to how edge-1 was fenced",
		}, nil},
		{"failover outside the groups, to a NotReady node", operator, expired, ann(expired, to, "edge-3"), []string{
			"metadata.annotations[holdfast.io/failover-to]: Forbidden: edge-3 is NotReady; name a Ready target",
			"metadata.annotations[holdfast.io/failover-to]: Forbidden: user olivia (groups plant-operators, system:authenticated) may not request a manual failover: requires membership in one of the groups [system:masters, shift-leads]",
		}, nil},
		{"failover to the current node and a non-target", admin, expired, ann(expired, to, "edge-1"), []string{
			"metadata.annotations[holdfast.io/failover-to]: Forbidden: edge-1 is the node the runtime is bound to now; name a failover target",
			"metadata.annotations[holdfast.io/failover-to]: Forbidden: edge-1 is not a failover target of this unit (spec.availability.targets)",
		}, nil},
		{"failover to a missing node", admin, expired, ann(expired, to, "edge-99"), []string{
			"metadata.annotations[holdfast.io/failover-to]: Forbidden: node edge-99 does not exist",
		}, nil},
		{"failover to a malformed name", admin, expired, ann(expired, to, "Edge 2"), []string{
			`metadata.annotations[holdfast.io/failover-to]: Invalid value: "Edge 2": not a node name: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
		}, nil},
		{"blank fence and a bad restart time", admin, held, ann(held, fence, "  ", holdfastv1.AnnotationRestart, "tomorrow"), []string{
			`metadata.annotations[holdfast.io/failover-confirm-fenced]: Invalid value: "  ": must say how the old node was fenced`,
			`metadata.annotations[holdfast.io/restart]: Invalid value: "tomorrow": must be an RFC 3339 time, e.g. 2026-11-29T20:15:00Z`,
		}, nil},
		{"fence outside the groups", operator, held, ann(held, fence, "breaker off", epoch, "3", inc, "pod-uid-3/1"), []string{
			"metadata.annotations[holdfast.io/failover-confirm-fenced]: Forbidden: user olivia (groups plant-operators, system:authenticated) may not confirm a fence: requires membership in one of the groups [system:masters]",
		}, nil},
		// A deleted Autonomy Unit (or a hand-over) waits on its node's report
		// or this certification: admitted on a Terminating Unit, to the same
		// groups only.
		{"a fence certified on a Unit being deleted", admin, deleting(unitBound(holdfastv1.Autonomy, "")),
			ann(deleting(unitBound(holdfastv1.Autonomy, "")), fence, "powered off at the breaker", epoch, "3", inc, "pod-uid-3/1"), nil, []string{AuditConfirmFenced}},
		{"a fence certified on a Unit being deleted, outside the groups", operator, deleting(unitBound(holdfastv1.Autonomy, "")),
			ann(deleting(unitBound(holdfastv1.Autonomy, "")), fence, "powered off at the breaker", epoch, "3", inc, "pod-uid-3/1"), []string{
				"metadata.annotations[holdfast.io/failover-confirm-fenced]: Forbidden: user olivia (groups plant-operators, system:authenticated) may not confirm a fence: requires membership in one of the groups [system:masters]",
			}, nil},
		{"a restart by anyone allowed to patch the unit is audited", operator, held, ann(held, holdfastv1.AnnotationRestart, "2026-11-29T20:15:00Z"), nil,
			[]string{AuditRestart}},
		{"a restart the controller writes is not a person's", controller, held, ann(held, holdfastv1.AnnotationRestart, "2026-11-29T20:15:00Z"), nil, nil},
		{"clearing a request is always allowed", operator, ann(held, to, "edge-2", fence, "x"), held, nil, nil},
		{"an unchanged request is not judged again", controller, ann(held, to, "edge-2"), ann(held, to, "edge-2", "note", "x"), nil, nil},
		{"Failover to Autonomy while a re-bind is pending", admin, expired, func() *holdfastv1.Unit {
			u := expired.DeepCopy()
			u.Spec.Availability.Mode = holdfastv1.Autonomy
			return u
		}(), []string{"spec.availability.mode: Forbidden: a re-bind is pending (lease Expired at epoch 3); switch to Autonomy once the new runtime holds its lease"}, nil},
		{"Failover to Autonomy while held", admin, held, func() *holdfastv1.Unit {
			u := held.DeepCopy()
			u.Spec.Availability.Mode = holdfastv1.Autonomy
			return u
		}(), nil, nil},
		{"targets include the primary and L3 margin too short", admin, nil, func() *holdfastv1.Unit {
			u := held.DeepCopy()
			u.Spec.Availability.Targets.Nodes = []string{"edge-1"}
			u.Spec.Availability.RebindMarginSeconds = ptr.To[int32](3)
			return u
		}(), []string{
			"spec.availability.rebindMarginSeconds: Invalid value: 3: must be at least the hold bound 15s (half the lease, clamped to 5s..30s), so a new writer starts only after the old one has fenced",
			`spec.availability.targets.nodes[0]: Invalid value: "edge-1": is a primary node of this unit (matches spec.nodeSelector); a failover target must be another node`,
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, audits := checkUnit(o, tc.r, tc.old, tc.new, nodes)
			expect(t, v, tc.want...)
			var kinds []string
			for _, a := range audits {
				kinds = append(kinds, a.Reason)
			}
			if strings.Join(kinds, ",") != strings.Join(tc.audits, ",") {
				t.Fatalf("audit records %v, want %v", kinds, tc.audits)
			}
		})
	}
}

// The webhook's record names the requester and the controller's names what
// it did; both carry the person's holdfast.io/request-id so they join.
func TestAuditRecordsCarryTheRequestID(t *testing.T) {
	o := testOptions()
	o.FailoverGroups = []string{"system:masters"}
	nodes := unitFacts{Nodes: []corev1.Node{readyNode("edge-1", true, map[string]string{"dev": "kiln-1"}), readyNode("edge-2", true, nil)},
		Running: &holdfastv1.RuntimeIncarnation{PodUID: "pod-uid-3"}}
	old := unitBound(holdfastv1.Failover, holdfastv1.LeaseHeld)
	u := old.DeepCopy()
	u.Annotations = map[string]string{
		holdfastv1.AnnotationFailoverTo:                 "edge-2",
		holdfastv1.AnnotationFailoverConfirmFenced:      "breaker off",
		holdfastv1.AnnotationFailoverConfirmEpoch:       "3",
		holdfastv1.AnnotationFailoverConfirmIncarnation: "pod-uid-3/0",
		holdfastv1.AnnotationRestart:                    "2026-11-29T20:15:00Z",
		holdfastv1.AnnotationRequestID:                  "req-7f3a",
	}
	v, audits := checkUnit(o, admin, old, u, nodes)
	expect(t, v)
	if len(audits) != 3 {
		t.Fatalf("audit records %+v, want a fence confirmation, a failover and a restart", audits)
	}
	for _, a := range audits {
		if a.RequestID != "req-7f3a" {
			t.Errorf("%s record carries request %q, want the unit's holdfast.io/request-id req-7f3a", a.Reason, a.RequestID)
		}
	}
}

// L7: the epoch, the fencing token, never goes backwards, and the runtime
// incarnation that established a binding's lease is written once.
func TestL7EpochAndLeaseEstablishedBy(t *testing.T) {
	old := unitBound(holdfastv1.Failover, holdfastv1.LeaseHeld)
	with := bindingEdit(old)
	checkBindingEdits(t, old, []bindingCase{
		{"epoch back", statusAdmin, with(func(b *holdfastv1.RuntimeBinding) { b.Epoch = 2 }), []string{
			"status.runtimeBinding.epoch: Forbidden: may not go backwards (from 3 to 2): the epoch is the fencing token every runtime and device checks"}},
		{"binding removed", statusAdmin, func() *holdfastv1.Unit { u := old.DeepCopy(); u.Status.RuntimeBinding = nil; return u }(), []string{
			"status.runtimeBinding.epoch: Forbidden: may not go backwards (from 3 to 0): the epoch is the fencing token every runtime and device checks"}},
		{"incarnation rewritten", statusAdmin, with(func(b *holdfastv1.RuntimeBinding) { b.LeaseEstablishedBy.RestartCount = 1 }), []string{
			"status.runtimeBinding.leaseEstablishedBy: Forbidden: is written once per binding and already names pod uid-3 restart 0 at epoch 3"}},
		{"incarnation cleared", statusAdmin, with(func(b *holdfastv1.RuntimeBinding) { b.LeaseEstablishedBy = nil }), []string{
			"status.runtimeBinding.leaseEstablishedBy: Forbidden: is written once per binding and already names pod uid-3 restart 0 at epoch 3"}},
		{"re-bind resets the incarnation", statusAdmin, with(func(b *holdfastv1.RuntimeBinding) { b.Epoch = 4; b.LeaseEstablishedBy = nil }), nil},
		{"the controller is trusted", controller, with(func(b *holdfastv1.RuntimeBinding) { b.Epoch = 1 }), nil},
	})
}

// statusAdmin is the admin writing a Unit's status.
var statusAdmin = requester{User: "admin", Groups: admin.Groups, SubResource: "status"}

// bindingEdit is old with its binding edited by f.
func bindingEdit(old *holdfastv1.Unit) func(func(*holdfastv1.RuntimeBinding)) *holdfastv1.Unit {
	return func(f func(*holdfastv1.RuntimeBinding)) *holdfastv1.Unit {
		u := old.DeepCopy()
		f(u.Status.RuntimeBinding)
		return u
	}
}

type bindingCase struct {
	name string
	r    requester
	new  *holdfastv1.Unit
	want []string
}

// checkBindingEdits judges each change of old's status by its requester.
func checkBindingEdits(t *testing.T, old *holdfastv1.Unit, cases []bindingCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, _ := checkUnit(testOptions(), tc.r, old, tc.new, unitFacts{})
			expect(t, v, tc.want...)
		})
	}
}

// deleting is u as the apiserver keeps it while its finalizer holds it.
func deleting(u *holdfastv1.Unit) *holdfastv1.Unit {
	u = u.DeepCopy()
	at := metav1.NewTime(t0)
	u.DeletionTimestamp = &at
	u.Finalizers = []string{holdfastv1.FinalizerRuntimeStopped}
	return u
}
