package voters

import (
	"encoding/json"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// The fixture: voters n1 (leader), n2, n3; n4 and n5 voter-eligible,
// provisioned standbys; VoterPolicy default with the CRD's defaults and
// dryRun off. Everything healthy at t0.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const me = "holdfast-controller-0"

func peer(n string) string      { return "http://" + n + ":2380" }
func clientURL(n string) string { return "http://" + n + ":2379" }

func memberID(n string) uint64 {
	var id uint64
	fmt.Sscanf(n, "n%d", &id)
	return 0x1000 + id
}

func member(n string) Member {
	return Member{ID: memberID(n), Name: n, PeerURLs: []string{peer(n)}, ClientURLs: []string{clientURL(n)}, Answered: true,
		Leader: memberID("n1"), Revision: 100}
}

func readyNode(name string, at time.Time) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: map[string]string{
			holdfastv1.AnnotationEtcdPeerURL: peer(name),
		}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			LastHeartbeatTime: metav1.NewTime(at)}}},
	}
}

func fixture() *Observation {
	o := &Observation{
		Now:      t0,
		Settings: Settings{Identity: me, LeaseDuration: 30 * time.Second, PeerPort: 2380, PeerScheme: "https"},
		Policy: &holdfastv1.VoterPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: holdfastv1.VoterPolicyName, Generation: 1},
			Spec: holdfastv1.VoterPolicySpec{TargetVoters: 3, DryRun: new(false), CooldownSeconds: new(int32(3600)), OperationTimeoutSeconds: 600,
				WorkloadDrainWaitSeconds: new(int32(900)), LearnerStallSeconds: 300,
				Fitness: holdfastv1.FitnessThresholds{WindowSeconds: 600, MaxFsyncMillis: 10, MaxPeerRTTMillis: 50},
				Etcd:    holdfastv1.EtcdAccess{Endpoints: []string{clientURL("n1"), clientURL("n2"), clientURL("n3")}}},
		},
		Nodes:      map[string]*corev1.Node{},
		Pods:       map[string][]corev1.Pod{},
		UnfitSince: map[string]time.Time{},
		Etcd:       EtcdView{ClusterID: 0xc1, Members: []Member{member("n1"), member("n2"), member("n3")}},
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		node := readyNode(n, t0.Add(-time.Second))
		node.Labels[holdfastv1.LabelEtcdRole] = "true"
		o.Nodes[n] = node
	}
	for _, n := range []string{"n4", "n5"} {
		node := readyNode(n, t0.Add(-time.Second))
		node.Labels[holdfastv1.LabelVoterEligible] = "true"
		node.Annotations[holdfastv1.AnnotationProvisioned] = "true"
		o.Nodes[n] = node
	}
	// The policy status as the previous pass recorded it.
	c := Assess(o)
	o.Policy.Status = PolicyStatus(o, &c)
	return o
}

func swap(name string, out, in string, origin holdfastv1.SwapOrigin) holdfastv1.VoterSwap {
	return holdfastv1.VoterSwap{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(-time.Minute))},
		Spec:       holdfastv1.VoterSwapSpec{Outgoing: out, Incoming: in, Origin: origin},
	}
}

const swapID = "20260301T115500Z-n1-n4"

// running is swap s1 (n1 out, n4 in) in progress at step, with the Lease
// held by this controller.
func running(o *Observation, step holdfastv1.SwapStep) *holdfastv1.VoterSwap {
	s := swap("s1", "n1", "n4", holdfastv1.SwapManual)
	s.Status = holdfastv1.VoterSwapStatus{SwapID: swapID, Incoming: "n4", Phase: holdfastv1.SwapRunning, Step: step,
		StartedAt: &metav1.Time{Time: t0.Add(-5 * time.Minute)}, Deadline: &metav1.Time{Time: t0.Add(5 * time.Minute)}}
	o.Swaps = append(o.Swaps, s)
	holdLease(o, me, swapID, t0)
	return &o.Swaps[len(o.Swaps)-1]
}

func holdLease(o *Observation, holder, id string, renewed time.Time) {
	o.Lease = &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName,
			Annotations: map[string]string{holdfastv1.AnnotationSwapID: id, holdfastv1.AnnotationSwapNodes: "n1,n4"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: new(int32(30)),
			AcquireTime: &metav1.MicroTime{Time: renewed}, RenewTime: &metav1.MicroTime{Time: renewed}},
	}
}

// withLearner lists n4 as a learner (started unless unstarted).
func withLearner(o *Observation, started bool) {
	m := member("n4")
	m.IsLearner = true
	o.Etcd.Members = append(o.Etcd.Members, m)
	if !started {
		unstarted(o, "n4")
	}
}

// withVoter lists n4 as a voter.
func withVoter(o *Observation) { o.Etcd.Members = append(o.Etcd.Members, member("n4")) }

// incomingVoter is the swap running at step once its incoming n4 is a voter
// with its Node labelled etcd.
func incomingVoter(o *Observation, step holdfastv1.SwapStep) *holdfastv1.VoterSwap {
	s := running(o, step)
	s.Status.IncomingMemberID = HexID(memberID("n4"))
	withVoter(o)
	o.Nodes["n4"].Labels[holdfastv1.LabelEtcdRole] = "true"
	return s
}

// unstarted makes member n unstarted: no name, no client URL, no answer.
func unstarted(o *Observation, n string) {
	for i := range o.Etcd.Members {
		if o.Etcd.Members[i].ID == memberID(n) {
			o.Etcd.Members[i].Name, o.Etcd.Members[i].ClientURLs, o.Etcd.Members[i].Answered = "", nil, false
		}
	}
}

func setReport(n *corev1.Node, swapID, step, phase string, startedAt *time.Time, at time.Time) {
	r := holdfastv1.ActuatorReport{Swap: swapID, Step: step, Phase: phase, At: metav1.NewTime(at)}
	if startedAt != nil {
		r.StartedAt = &metav1.Time{Time: *startedAt}
	}
	b, _ := json.Marshal(r)
	n.Annotations[holdfastv1.AnnotationActuator] = string(b)
}

func setStep(n *corev1.Node, desired, swapID, step string) {
	n.Labels[holdfastv1.LabelDesiredRole] = desired
	n.Annotations[holdfastv1.AnnotationRoleSwap] = swapID
	n.Annotations[holdfastv1.AnnotationRoleStep] = step
}

func cordon(n *corev1.Node, swapID string) {
	n.Spec.Unschedulable = true
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: holdfastv1.TaintVoterSwap, Value: swapID, Effect: corev1.TaintEffectNoSchedule})
}

func notReady(n *corev1.Node) {
	n.Status.Conditions[0].Status = corev1.ConditionUnknown
}

func pause(o *Observation, name string) {
	for i := range o.Etcd.Members {
		if o.Etcd.Members[i].Name == name {
			o.Etcd.Members[i].Answered = false
			o.Etcd.Members[i].Problem = "no Status answer within 2s"
		}
	}
}

func setLeader(o *Observation, name string) {
	for i := range o.Etcd.Members {
		o.Etcd.Members[i].Leader = memberID(name)
	}
}

func pod(name string, mutate func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name}, Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if mutate != nil {
		mutate(&p)
	}
	return p
}

func fitness(n *corev1.Node, fsyncMicros int64, at time.Time) {
	b, _ := json.Marshal(holdfastv1.Fitness{FsyncP99Micros: fsyncMicros, FsyncSamples: 100, At: metav1.NewTime(at)})
	n.Annotations[holdfastv1.AnnotationFitness] = string(b)
}
