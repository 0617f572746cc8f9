package policy

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

func lease(holder string, renew time.Time, seconds int32, nodes string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName,
			Annotations: map[string]string{holdfastv1.AnnotationSwapNodes: nodes, holdfastv1.AnnotationSwapID: "s1"}},
		Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To(seconds)},
	}
	if holder != "" {
		l.Spec.HolderIdentity = ptr.To(holder)
	}
	if !renew.IsZero() {
		l.Spec.RenewTime = &metav1.MicroTime{Time: renew}
	}
	return l
}

// §6: node recovery leaves alone the nodes an unexpired swap Lease names.
func TestSwapLeaseNamesItsNodesOnlyWhileUnexpired(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
		node  string
		now   time.Time
		want  bool
	}{
		{"held, named", lease("ctl", t0, 60, "cp-3, edge-7"), "edge-7", t0.Add(59 * time.Second), true},
		{"held, not named", lease("ctl", t0, 60, "cp-3,edge-7"), "cp-1", t0, false},
		{"expiry instant is expired", lease("ctl", t0, 60, "cp-3"), "cp-3", t0.Add(60 * time.Second), false},
		{"expired", lease("ctl", t0, 60, "cp-3"), "cp-3", t0.Add(time.Hour), false},
		{"released", lease("", t0, 60, "cp-3"), "cp-3", t0, false},
		{"no lease", nil, "cp-3", t0, false},
		{"held without a renew time never expires", lease("ctl", time.Time{}, 60, "cp-3"), "cp-3", t0.Add(1000 * time.Hour), true},
		{"blank entries ignored", lease("ctl", t0, 60, ",,cp-3,"), "", t0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SwapLeaseNames(tc.lease, tc.node, tc.now); got != tc.want {
				t.Fatalf("SwapLeaseNames = %v, want %v", got, tc.want)
			}
		})
	}
	l := lease("ctl", time.Time{}, 30, "a")
	l.Spec.AcquireTime = &metav1.MicroTime{Time: t0}
	if exp, ok := SwapLeaseExpiry(l); !ok || !exp.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("a Lease never renewed expires from its acquisition: %v %v", exp, ok)
	}
}

func node(name string, ready bool, labels, ann map[string]string) *corev1.Node {
	s := corev1.ConditionFalse
	if ready {
		s = corev1.ConditionTrue
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: ann},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: s}}}}
}

func healthyInput() GateInput {
	p := &holdfastv1.VoterPolicy{
		Spec: holdfastv1.VoterPolicySpec{TargetVoters: 3},
		Status: holdfastv1.VoterPolicyStatus{Voters: []string{"cp-1", "cp-2", "cp-3"}, Leader: "cp-1",
			ObservedTime: &metav1.Time{Time: t0.Add(-10 * time.Second)},
			Conditions:   []metav1.Condition{{Type: holdfastv1.ConditionEtcdHealthy, Status: metav1.ConditionTrue}}},
	}
	nodes := map[string]*corev1.Node{}
	for _, n := range []string{"cp-1", "cp-2", "cp-3"} {
		nodes[n] = node(n, true, nil, nil)
	}
	nodes["edge-7"] = node("edge-7", true, map[string]string{holdfastv1.LabelVoterEligible: "true"},
		map[string]string{holdfastv1.AnnotationProvisioned: "true"})
	return GateInput{Policy: p, Nodes: nodes, Now: t0}
}

func messages(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

// §6 step 1: every gate a swap fails now is listed, with its field.
func TestSwapGates(t *testing.T) {
	spec := &holdfastv1.VoterSwapSpec{Outgoing: "cp-3", Incoming: "edge-7"}
	for _, tc := range []struct {
		name   string
		mutate func(*GateInput, *holdfastv1.VoterSwapSpec)
		want   []string
	}{
		{"every gate holds", func(*GateInput, *holdfastv1.VoterSwapSpec) {}, nil},
		{"no incoming: the scheduler picks", func(_ *GateInput, s *holdfastv1.VoterSwapSpec) { s.Incoming = "" }, nil},
		{"no policy", func(in *GateInput, _ *holdfastv1.VoterSwapSpec) { in.Policy = nil },
			[]string{`spec: Forbidden: no VoterPolicy "default": create it so the voter controller observes etcd before any swap`}},
		{"etcd unhealthy", func(in *GateInput, _ *holdfastv1.VoterSwapSpec) {
			in.Policy.Status.Conditions[0] = metav1.Condition{Type: holdfastv1.ConditionEtcdHealthy, Status: metav1.ConditionFalse,
				Reason: "MemberUnreachable", Message: "cp-2 does not answer"}
		}, []string{"spec: Forbidden: etcd is not healthy (VoterPolicy condition EtcdHealthy MemberUnreachable: cp-2 does not answer); swap once every voter answers"}},
		{"status observed exactly MaxStatusAge ago is still trusted", func(in *GateInput, _ *holdfastv1.VoterSwapSpec) {
			in.Policy.Status.ObservedTime = &metav1.Time{Time: t0.Add(-MaxStatusAge)}
		}, nil},
		{"stale status: EtcdHealthy True but nobody observed etcd for 2m10s", func(in *GateInput, _ *holdfastv1.VoterSwapSpec) {
			in.Policy.Status.ObservedTime = &metav1.Time{Time: t0.Add(-130 * time.Second)}
		}, []string{"status.observedTime: Forbidden: voter policy status is 2m10s old; the voters role is not observing etcd (its status may be at most 1m0s old)"}},
		{"status never stamped", func(in *GateInput, _ *holdfastv1.VoterSwapSpec) { in.Policy.Status.ObservedTime = nil },
			[]string{"status.observedTime: Forbidden: voter policy status carries no observation time; the voters role has not observed etcd (or predates observedTime)"}},
		{"status stamped in the future beyond the bound", func(in *GateInput, _ *holdfastv1.VoterSwapSpec) {
			in.Policy.Status.ObservedTime = &metav1.Time{Time: t0.Add(5 * time.Minute)}
		}, []string{"status.observedTime: Forbidden: voter policy status is stamped 5m0s in the future; the voters role's clock and this one disagree"}},
		{"no leader", func(in *GateInput, _ *holdfastv1.VoterSwapSpec) { in.Policy.Status.Leader = "" },
			[]string{"spec: Forbidden: etcd reports no leader; swap once it has one"}},
		{"learner", func(in *GateInput, _ *holdfastv1.VoterSwapSpec) { in.Policy.Status.Learners = []string{"edge-5"} },
			[]string{"spec: Forbidden: learner present (edge-5); wait until it is promoted or removed"}},
		{"even count left behind", func(in *GateInput, _ *holdfastv1.VoterSwapSpec) {
			in.Policy.Status.Voters = append(in.Policy.Status.Voters, "cp-4")
			in.Nodes["cp-4"] = node("cp-4", true, nil, nil)
		}, []string{"spec: Forbidden: 4 voters where the target is 3; the voter set must be at its target before a swap"}},
		{"voter NotReady", func(in *GateInput, _ *holdfastv1.VoterSwapSpec) { in.Nodes["cp-2"] = node("cp-2", false, nil, nil) },
			[]string{"spec: Forbidden: voter cp-2 is not Ready; swap once every voter's Node is Ready"}},
		{"lease held", func(in *GateInput, _ *holdfastv1.VoterSwapSpec) { in.SwapLease = lease("ctl", t0, 60, "cp-1") },
			[]string{"spec: Forbidden: the swap Lease kube-system/holdfast-voter-swap is held by ctl until 2026-11-29T20:01:00Z; one swap at a time"}},
		{"lease expired", func(in *GateInput, _ *holdfastv1.VoterSwapSpec) {
			in.SwapLease = lease("ctl", t0.Add(-time.Hour), 60, "cp-1")
		}, nil},
		{"outgoing not a voter, pinned incoming not eligible nor provisioned nor Ready", func(in *GateInput, s *holdfastv1.VoterSwapSpec) {
			s.Outgoing = "edge-4"
			in.Nodes["edge-4"] = node("edge-4", true, nil, nil)
			in.Nodes["edge-7"] = node("edge-7", false, map[string]string{holdfastv1.LabelPinned: "true"}, nil)
		}, []string{
			"spec.outgoing: Forbidden: edge-4 is not an etcd voter (voters: cp-1, cp-2, cp-3); name a current voter",
			"spec.incoming: Forbidden: edge-7 is not voter-eligible (VoterPolicy eligibleSelector); an admin labels eligible nodes",
			"spec.incoming: Forbidden: edge-7 is pinned (holdfast.io/pinned); an admin must unpin it first",
			"spec.incoming: Forbidden: edge-7 is not provisioned (no holdfast.io/provisioned annotation from its node plugin); install the server unit first",
			"spec.incoming: Forbidden: edge-7 is not Ready",
		}},
		{"outgoing pinned", func(in *GateInput, _ *holdfastv1.VoterSwapSpec) {
			in.Nodes["cp-3"] = node("cp-3", true, map[string]string{holdfastv1.LabelPinned: "true"}, nil)
		}, []string{"spec.outgoing: Forbidden: cp-3 is pinned (holdfast.io/pinned); an admin must unpin it first"}},
		{"outgoing host reported not provisioned", func(in *GateInput, _ *holdfastv1.VoterSwapSpec) {
			in.Nodes["cp-3"] = node("cp-3", true, nil, map[string]string{holdfastv1.AnnotationProvisioned: "false"})
		}, []string{`spec.outgoing: Forbidden: cp-3: its node plugin reports the host not provisioned (holdfast.io/provisioned "false"), ` +
			`so its step-down could stall the swap with the member still voting; ` +
			`the reason is in the NotProvisioned Event on Node cp-3 and holdfast-node's log there: fix the host first`}},
		// A voter's node plugin that never reported (or one from before
		// the report) does not refuse its step-down.
		{"outgoing host with no provisioned report", func(in *GateInput, _ *holdfastv1.VoterSwapSpec) {
			in.Nodes["cp-3"] = node("cp-3", true, nil, map[string]string{holdfastv1.AnnotationFitness: "{}"})
		}, nil},
		{"outgoing host reported provisioned", func(in *GateInput, _ *holdfastv1.VoterSwapSpec) {
			in.Nodes["cp-3"] = node("cp-3", true, nil, map[string]string{holdfastv1.AnnotationProvisioned: "true"})
		}, nil},
		{"incoming already a member", func(in *GateInput, s *holdfastv1.VoterSwapSpec) { s.Incoming = "cp-1" }, []string{
			"spec.incoming: Forbidden: cp-1 is already an etcd member; name a node that is not",
			"spec.incoming: Forbidden: cp-1 is not voter-eligible (VoterPolicy eligibleSelector); an admin labels eligible nodes",
			"spec.incoming: Forbidden: cp-1 is not provisioned (no holdfast.io/provisioned annotation from its node plugin); install the server unit first",
		}},
		{"incoming missing", func(_ *GateInput, s *holdfastv1.VoterSwapSpec) { s.Incoming = "edge-99" },
			[]string{"spec.incoming: Forbidden: node edge-99 does not exist"}},
		{"outgoing node missing", func(in *GateInput, _ *holdfastv1.VoterSwapSpec) { delete(in.Nodes, "cp-3") }, []string{
			"spec: Forbidden: voter cp-3 has no Node of that name (holdfast knows a voter by its etcd member name, which must be its Node's name); swap once every voter's Node is Ready",
			"spec.outgoing: Forbidden: node cp-3 does not exist",
		}},
		{"a labelled node that does not vote blocks", func(in *GateInput, _ *holdfastv1.VoterSwapSpec) {
			in.Nodes["edge-5"] = node("edge-5", true, map[string]string{holdfastv1.LabelEtcdRole: "true"}, nil)
			in.Nodes["edge-6"] = node("edge-6", true, map[string]string{holdfastv1.LabelEtcdRole: "true"}, nil)
			in.Policy.Status.Learners = []string{"edge-6"}
		}, []string{
			"spec: Forbidden: learner present (edge-6); wait until it is promoted or removed",
			"spec: Forbidden: node edge-5 is labelled node-role.kubernetes.io/etcd but has no etcd member (member but not a voter); a voter is judged by etcd's own vote",
			"spec: Forbidden: node edge-6 is labelled node-role.kubernetes.io/etcd but is a learner (member but not a voter); a voter is judged by etcd's own vote",
		}},
		{"a tombstone of this cluster on the incoming node", func(in *GateInput, _ *holdfastv1.VoterSwapSpec) {
			in.Policy.Status.ClusterID = "c1"
			in.Nodes["edge-7"].Annotations[holdfastv1.AnnotationTombstone] = `{"memberID":"1","clusterID":"c1"}`
		}, []string{"spec.incoming: Forbidden: edge-7 carries a tombstone of this cluster (holdfast.io/tombstone): its removed member is not finished to an agent yet"}},
		{"a tombstone of another cluster on the incoming node", func(in *GateInput, _ *holdfastv1.VoterSwapSpec) {
			in.Policy.Status.ClusterID = "c1"
			in.Nodes["edge-7"].Annotations[holdfastv1.AnnotationTombstone] = `{"memberID":"1","clusterID":"c2"}`
		}, nil},
		{"custom eligibility selector", func(in *GateInput, _ *holdfastv1.VoterSwapSpec) {
			in.Policy.Spec.EligibleSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"site/voter": "yes"}}
		}, []string{"spec.incoming: Forbidden: edge-7 is not voter-eligible (VoterPolicy eligibleSelector); an admin labels eligible nodes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := healthyInput()
			s := *spec
			tc.mutate(&in, &s)
			got := messages(SwapGates(&s, in))
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("SwapGates:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// A removed member never comes back by doubt: the one tombstone rule the
// gates, the voter controller and holdfast-scheduler share.
func TestTombstoneOfCluster(t *testing.T) {
	for _, tc := range []struct {
		name, annotation, cluster string
		has, want                 bool
	}{
		{name: "no tombstone", cluster: "c1"},
		{name: "this cluster", annotation: `{"memberID":"1","clusterID":"c1"}`, cluster: "c1", has: true, want: true},
		{name: "another cluster", annotation: `{"memberID":"1","clusterID":"c2"}`, cluster: "c1", has: true},
		{name: "cluster not yet known", annotation: `{"memberID":"1","clusterID":"c2"}`, has: true, want: true},
		{name: "names no cluster", annotation: `{"memberID":"1"}`, cluster: "c1", has: true, want: true},
		{name: "does not parse", annotation: "removed", cluster: "c1", has: true, want: true},
		{name: "empty", cluster: "c1", has: true, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := map[string]string{}
			if tc.has {
				ann[holdfastv1.AnnotationTombstone] = tc.annotation
			}
			if got := TombstoneOfCluster(node("n", true, nil, ann), tc.cluster); got != tc.want {
				t.Fatalf("TombstoneOfCluster(%q, %q) = %v, want %v", tc.annotation, tc.cluster, got, tc.want)
			}
		})
	}
}

// L3: the re-bind margin is never below the hold bound; L4: the start-up
// grace never below the lease. Both judged through api/v1alpha1's HoldBound.
func TestL3L4AvailabilityInequalities(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    holdfastv1.Availability
		want []string
	}{
		{"defaults", holdfastv1.Availability{LeaseDurationSeconds: 30, RuntimeStartupGraceSeconds: 120}, nil},
		{"margin equals the hold bound", holdfastv1.Availability{LeaseDurationSeconds: 30, RuntimeStartupGraceSeconds: 30, RebindMarginSeconds: ptr.To[int32](15)}, nil},
		{"L3 margin below the hold bound", holdfastv1.Availability{LeaseDurationSeconds: 30, RuntimeStartupGraceSeconds: 30, RebindMarginSeconds: ptr.To[int32](14)},
			[]string{"spec.availability.rebindMarginSeconds: Invalid value: 14: must be at least the hold bound 15s (half the lease, clamped to 5s..30s), so a new writer starts only after the old one has fenced"}},
		{"L3 clamp at 30s for long leases", holdfastv1.Availability{LeaseDurationSeconds: 600, RuntimeStartupGraceSeconds: 600, RebindMarginSeconds: ptr.To[int32](29)},
			[]string{"spec.availability.rebindMarginSeconds: Invalid value: 29: must be at least the hold bound 30s (half the lease, clamped to 5s..30s), so a new writer starts only after the old one has fenced"}},
		{"L3 clamp at 5s for short leases", holdfastv1.Availability{LeaseDurationSeconds: 10, RuntimeStartupGraceSeconds: 10, RebindMarginSeconds: ptr.To[int32](5)}, nil},
		{"L4 grace below the lease", holdfastv1.Availability{LeaseDurationSeconds: 60, RuntimeStartupGraceSeconds: 59},
			[]string{"spec.availability.runtimeStartupGraceSeconds: Invalid value: 59: must be at least leaseDurationSeconds (60)"}},
		{"lease out of range", holdfastv1.Availability{LeaseDurationSeconds: 9, RuntimeStartupGraceSeconds: 9},
			[]string{"spec.availability.leaseDurationSeconds: Invalid value: 9: must be between 10 and 600 seconds"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := messages(AvailabilityErrors(field.NewPath("spec", "availability"), &tc.a))
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("AvailabilityErrors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
	// Every margin the rule accepts is at least HoldBound, at every lease.
	for lease := int32(10); lease <= 600; lease++ {
		for margin := int32(0); margin <= 40; margin++ {
			a := holdfastv1.Availability{LeaseDurationSeconds: lease, RuntimeStartupGraceSeconds: 600, RebindMarginSeconds: ptr.To(margin)}
			ok := len(AvailabilityErrors(field.NewPath("a"), &a)) == 0
			if want := time.Duration(margin)*time.Second >= holdfastv1.HoldBound(time.Duration(lease)*time.Second); ok != want {
				t.Fatalf("lease %ds margin %ds: accepted %v, HoldBound says %v", lease, margin, ok, want)
			}
		}
	}
}

func TestTargetsIncludingPrimary(t *testing.T) {
	u := &holdfastv1.Unit{Spec: holdfastv1.UnitSpec{NodeSelector: map[string]string{"dev": "kiln-1"},
		Availability: holdfastv1.Availability{Targets: &holdfastv1.FailoverTargets{
			Nodes:    []string{"edge-2", "edge-1", "gone"},
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "a"}},
		}}}}
	nodes := []corev1.Node{
		*node("edge-1", true, map[string]string{"dev": "kiln-1", "zone": "a"}, nil),
		*node("edge-2", true, map[string]string{"zone": "a"}, nil),
		*node("edge-3", true, map[string]string{"dev": "kiln-1", "zone": "a"}, nil),
	}
	want := []string{
		`spec.availability.targets.nodes[1]: Invalid value: "edge-1": is a primary node of this unit (matches spec.nodeSelector); a failover target must be another node`,
		`spec.availability.targets.selector: Invalid value: "zone=a": selects primary nodes of this unit (edge-1, edge-3); a failover target must be another node`,
	}
	if got := messages(TargetsIncludingPrimary(u, nodes)); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !EligibleTarget(u, &nodes[1]) || EligibleTarget(u, node("edge-9", true, nil, nil)) {
		t.Fatal("EligibleTarget by name and selector")
	}
}

func TestRebindPending(t *testing.T) {
	u := &holdfastv1.Unit{}
	if RebindPending(u) {
		t.Fatal("an unbound unit has no re-bind pending")
	}
	u.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{Epoch: 2, LeaseState: holdfastv1.LeaseHeld}
	if RebindPending(u) {
		t.Fatal("a held lease has no re-bind pending")
	}
	u.Status.RuntimeBinding.LeaseState = holdfastv1.LeaseExpired
	if !RebindPending(u) {
		t.Fatal("an expired lease is a pending re-bind")
	}
	u.Status.RuntimeBinding.LeaseState = holdfastv1.LeaseHeld
	u.Status.Conditions = []metav1.Condition{{Type: holdfastv1.ConditionFailoverRequest, Status: metav1.ConditionTrue, Reason: holdfastv1.ReasonLeadershipHoldOff}}
	if !RebindPending(u) {
		t.Fatal("a leadership hold-off is a pending re-bind")
	}
}
