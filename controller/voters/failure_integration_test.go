//go:build integration

package voters_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/voters"
	"github.com/holdfast-io/holdfast/node-plugin/role"
	"github.com/holdfast-io/holdfast/policy"
	"github.com/holdfast-io/holdfast/test/etcdwatch"
	"github.com/holdfast-io/holdfast/test/poll"
)

// waitStep waits until the swap reaches step (or a later phase), and
// returns it.
func waitStep(t testing.TB, name string, step holdfastv1.SwapStep, within time.Duration) *holdfastv1.VoterSwap {
	t.Helper()
	var s *holdfastv1.VoterSwap
	poll.Until(t, within, "swap "+name+" at step "+string(step), func() (bool, string) {
		s = getSwap(t, name)
		if s.Status.Phase.Finished() {
			t.Fatalf("swap %s finished %s before step %s: %s\nhistory:\n%s", name, s.Status.Phase, step, describe(s), history(s))
		}
		return s.Status.Step == step, describe(s)
	})
	return s
}

// waitWaiting waits until the swap waits for reason.
func waitWaiting(t testing.TB, name, reason string, within time.Duration) {
	t.Helper()
	poll.Until(t, within, "swap "+name+" waiting for "+reason, func() (bool, string) {
		s := getSwap(t, name)
		if s.Status.Phase.Finished() {
			t.Fatalf("swap %s finished %s while waiting for %s: %s\nhistory:\n%s", name, s.Status.Phase, reason, describe(s), history(s))
		}
		c := meta.FindStatusCondition(s.Status.Conditions, holdfastv1.ConditionProgressing)
		return c != nil && c.Reason == reason, describe(s)
	})
}

// TestRollbackOfACandidateWhosePeerPortIsUnreachable: the candidate's etcd
// member cannot reach any peer, so its learner never starts and the node
// plugin's promote, done only once the member joined, waits on it; past
// the learner stall time plus the operation timeout the swap rolls back:
// the learner removed, the host back to an agent, the members and voters
// exactly as before.
func TestRollbackOfACandidateWhosePeerPortIsUnreachable(t *testing.T) {
	c := newCluster(t, []string{"r1", "r2", "r3"}, []string{"r4"})
	c.hosts["r4"].blocked = true
	c.policy(t, nil)
	startController(t, ctrlOpts{})
	waitHealthyStatus(t, "r1", "r2", "r3")
	cli := c.client("r1", "r2", "r3")
	before, _, clusterID := etcdMembers(t, cli)

	name := createSwap(t, "r1", "r4")
	poll.Until(t, 90*time.Second, "swap "+name+" waiting for r4's promote, which waits for its member to join", func() (bool, string) {
		s := getSwap(t, name)
		if s.Status.Phase.Finished() {
			t.Fatalf("swap %s finished %s: %s\nhistory:\n%s", name, s.Status.Phase, describe(s), history(s))
		}
		c := meta.FindStatusCondition(s.Status.Conditions, holdfastv1.ConditionProgressing)
		return c != nil && c.Reason == holdfastv1.SwapReasonWaitingForNodePlugin &&
			strings.Contains(c.Message, "last report promote running") && strings.Contains(c.Message, "etcd member"), describe(s)
	})
	// The learner stall time plus the operation timeout pass.
	shifted.Advance(2 * time.Minute)
	s := waitPhase(t, name, holdfastv1.SwapRolledBack, 2*time.Minute)
	t.Logf("history:\n%s", history(s))

	after, learners, id := etcdMembers(t, cli)
	if !slices.Equal(after, before) || len(learners) > 0 || id != clusterID {
		t.Fatalf("after the rollback: voters %v learners %v cluster %x, want %v, none, %x", after, learners, id, before, clusterID)
	}
	h4 := c.hosts["r4"]
	if role, _ := h4.state.Role(); role != holdfastv1.RoleAgent {
		t.Errorf("r4's role file says %q", role)
	}
	if st := h4.sd.ActiveState(serverUnit); st == "active" {
		t.Errorf("r4's server unit is %s", st)
	}
	if st := h4.sd.ActiveState(agentUnit); st != "active" {
		t.Errorf("r4's agent unit is %s", st)
	}
	n4 := getNode(t, "r4")
	if _, ok := n4.Labels[holdfastv1.LabelEtcdRole]; ok || n4.Spec.Unschedulable || hasSwapTaint(n4) {
		t.Errorf("r4 left with the etcd label, cordoned or tainted: %v %v %v", n4.Labels, n4.Spec.Unschedulable, n4.Spec.Taints)
	}
	n1 := getNode(t, "r1")
	if n1.Spec.Unschedulable || n1.Labels[holdfastv1.LabelDesiredRole] != "" {
		t.Errorf("r1 was touched: cordoned %v desired role %q", n1.Spec.Unschedulable, n1.Labels[holdfastv1.LabelDesiredRole])
	}
	if !strings.Contains(history(s), holdfastv1.SwapReasonNotVoterByDeadline) {
		t.Errorf("history does not say %s", holdfastv1.SwapReasonNotVoterByDeadline)
	}
}

// TestRemovalCompletesWithTheOutgoingVoterPaused: the outgoing host is
// SIGSTOPped (etcd member, node plugin, kubelet) once the candidate votes;
// the removal goes on because the voters that stay are healthy, the swap
// ends with three voters and the outgoing host pending. On its return its
// tombstone guard keeps its server out: the members stay three.
//
// The swap is held where the candidate votes (its kubelet stand-in writes
// no heartbeat after the server start, so promote waits for one) while p1
// is paused: the test acts on a state it observed, never on a one-pass step.
func TestRemovalCompletesWithTheOutgoingVoterPaused(t *testing.T) {
	c := newCluster(t, []string{"p1", "p2", "p3"}, []string{"p4"})
	c.policy(t, nil)
	startController(t, ctrlOpts{})
	waitHealthyStatus(t, "p1", "p2", "p3")
	cli := c.client("p2", "p3")
	_, _, clusterID := etcdMembers(t, cli)
	w := startWriter(cli)

	h4 := c.hosts["p4"]
	h4.quiet.Store(true)
	name := createSwap(t, "p1", "p4")
	waitWaiting(t, name, holdfastv1.SwapReasonWaitingForNodeReady, 90*time.Second)
	if v, _, _ := etcdMembers(t, cli); !slices.Contains(v, "p4") {
		t.Fatalf("the swap waits for p4's Ready while p4 is no voter: voters %v", v)
	}
	h1 := c.hosts["p1"]
	h1.pause(t)
	h4.quiet.Store(false)
	poll.Until(t, time.Minute, "p1's member removed", func() (bool, string) {
		// A read may time out while the voters that stay elect a leader
		// in p1's place.
		v, _, _, err := etcdwatch.Members(context.Background(), cli)
		if err != nil {
			return false, err.Error()
		}
		return slices.Equal(v, []string{"p2", "p3", "p4"}), strings.Join(v, ",")
	})
	// The operation timeout of finish-demote passes with p1 away.
	shifted.Advance(2 * time.Minute)
	s := waitPhase(t, name, holdfastv1.SwapSucceeded, time.Minute)
	checkWriter(t, w)
	if !strings.Contains(history(s), holdfastv1.SwapReasonOutgoingDown) || !strings.Contains(history(s), holdfastv1.SwapReasonOutgoingPending) {
		t.Errorf("history does not say %s and %s:\n%s", holdfastv1.SwapReasonOutgoingDown, holdfastv1.SwapReasonOutgoingPending, history(s))
	}
	n1 := getNode(t, "p1")
	if _, ok := n1.Labels[holdfastv1.LabelEtcdRole]; ok {
		t.Error("p1 keeps the etcd role label although its member is gone")
	}
	if n1.Annotations[holdfastv1.AnnotationRoleStep] != holdfastv1.RoleStepFinishDemote {
		t.Errorf("p1's role step %q: want finish-demote kept for its return", n1.Annotations[holdfastv1.AnnotationRoleStep])
	}

	// p1 comes back: its removed member never serves again, and its host
	// finishes its demotion (TestAHostDownForItsWholeSwapFinishesOnReturn
	// checks the whole host).
	h1.resume(t)
	poll.Until(t, 2*time.Minute, "p1 finished its demotion with its server stopped", func() (bool, string) {
		n := getNode(t, "p1")
		st := h1.sd.ActiveState(serverUnit)
		rep := holdfastv1.ActuatorReportOf(n.Annotations)
		done := rep != nil && rep.Step == holdfastv1.RoleStepFinishDemote && rep.Phase == holdfastv1.ActuatorDone
		return done && st != "active", "server " + st + ", report " + n.Annotations[holdfastv1.AnnotationActuator]
	})
	v, learners, id := etcdMembers(t, cli)
	if !slices.Equal(v, []string{"p2", "p3", "p4"}) || len(learners) > 0 || id != clusterID {
		t.Fatalf("after p1's return: voters %v learners %v cluster %x", v, learners, id)
	}
}

// TestSwapRefusedWhileAVoterIsPaused: with one voter's etcd member
// SIGSTOPped, a swap is refused with reasons naming it, and nothing is
// changed: no Lease, no role label, no cordon.
func TestSwapRefusedWhileAVoterIsPaused(t *testing.T) {
	c := newCluster(t, []string{"q1", "q2", "q3"}, []string{"q4"})
	c.policy(t, nil)
	ctl := startController(t, ctrlOpts{})
	waitHealthyStatus(t, "q1", "q2", "q3")
	resume := c.hosts["q2"].pauseEtcd(t)
	defer resume()
	poll.Until(t, time.Minute, "EtcdHealthy False naming q2", func() (bool, string) {
		p := &holdfastv1.VoterPolicy{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: holdfastv1.VoterPolicyName}, p); err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(p.Status.Conditions, holdfastv1.ConditionEtcdHealthy)
		return cond != nil && cond.Status == metav1.ConditionFalse && strings.Contains(cond.Message, "q2"), describeCond(cond)
	})

	s := &holdfastv1.VoterSwap{ObjectMeta: metav1.ObjectMeta{GenerateName: "swap-q1-"},
		Spec: holdfastv1.VoterSwapSpec{Outgoing: "q1", Incoming: "q4", Reason: "test", Origin: holdfastv1.SwapManual}}
	err := env.Client.Create(context.Background(), s)
	switch {
	case err != nil:
		if !strings.Contains(err.Error(), "q2") {
			t.Errorf("refusal %q does not name the paused voter q2", err)
		}
	default:
		// Admitted before the webhook saw the status: the controller
		// refuses it.
		got := waitPhase(t, s.Name, holdfastv1.SwapRefused, time.Minute)
		if !strings.Contains(history(got), "q2") {
			t.Errorf("refusal does not name q2:\n%s", history(got))
		}
		// Visible to an operator: GatesPassed False and a Warning Event
		// on the swap, both naming the paused voter.
		if cond := meta.FindStatusCondition(got.Status.Conditions, holdfastv1.ConditionGatesPassed); cond == nil ||
			cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "q2") {
			t.Errorf("GatesPassed is %s, want False naming q2", describeCond(cond))
		}
		poll.Until(t, 10*time.Second, "a Warning Event on the refused swap naming q2", func() (bool, string) {
			var evs eventsv1.EventList
			if err := env.Client.List(context.Background(), &evs); err != nil {
				return false, err.Error()
			}
			var seen []string
			for _, e := range evs.Items {
				if e.Regarding.Kind == "VoterSwap" && e.Regarding.Name == s.Name {
					seen = append(seen, e.Type+" "+e.Reason+": "+e.Note)
					if e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, "q2") {
						return true, ""
					}
				}
			}
			return false, strings.Join(seen, "; ")
		})
	}
	// Give the controller passes to act, had it wanted to.
	ctl.afterPasses(t, 3)
	if l := getLease(t); policy.SwapLeaseHolder(l) != "" {
		t.Errorf("the swap Lease is held by %q", policy.SwapLeaseHolder(l))
	}
	for _, name := range []string{"q1", "q4"} {
		n := getNode(t, name)
		if n.Labels[holdfastv1.LabelDesiredRole] != "" || n.Annotations[holdfastv1.AnnotationRoleStep] != "" || n.Spec.Unschedulable {
			t.Errorf("%s was changed: desired role %q, role step %q, cordoned %v", name, n.Labels[holdfastv1.LabelDesiredRole],
				n.Annotations[holdfastv1.AnnotationRoleStep], n.Spec.Unschedulable)
		}
	}
	v, learners, _ := etcdMembers(t, c.client("q1", "q3"))
	if !slices.Equal(v, []string{"q1", "q2", "q3"}) || len(learners) > 0 {
		t.Errorf("members changed: voters %v learners %v", v, learners)
	}
}

func describeCond(c *metav1.Condition) string {
	if c == nil {
		return "no condition"
	}
	return string(c.Status) + " " + c.Reason + ": " + c.Message
}

// TestSwapResumesAfterACrashAfterEachMembershipChange ends the controller
// right after each action that changes etcd's membership or a host's role
// (learner added, promoted, removed, a role step set), before the action is
// recorded (the worst instant: the world changed, the status does not say
// so), and starts a new one each time: the swap completes, with three voters
// and no write lost. The e2e variant crashes after every action.
func TestSwapResumesAfterACrashAfterEachMembershipChange(t *testing.T) {
	crashDrill(t, []string{"k1", "k2", "k3", "k4"}, func(k voters.Kind) bool {
		return k == voters.AddLearner || k == voters.PromoteMember || k == voters.RemoveMember || k == voters.SetRoleStep
	}, []voters.Kind{voters.AddLearner, voters.PromoteMember, voters.RemoveMember, voters.SetRoleStep})
}

// crashDrill runs one swap (names[0] out, names[3] in), ending the
// controller once after each action of a kind crash selects on each node,
// and checks it completes having crashed after each kind in want.
func crashDrill(t *testing.T, names []string, crash func(voters.Kind) bool, want []voters.Kind) {
	c := newCluster(t, names[:3], names[3:])
	c.policy(t, nil)
	ctl := startController(t, ctrlOpts{})
	waitHealthyStatus(t, names[:3]...)
	ctl.stop()
	cli := c.client(names[1], names[2])
	_, _, clusterID := etcdMembers(t, cli)
	w := startWriter(cli)

	name := createSwap(t, names[0], names[3])
	// Once per kind and node (a Record is the status write itself: a crash
	// after it is one before the next action).
	var crashes []string
	seen := map[string]bool{}
	deadline := time.Now().Add(4 * time.Minute)
	for {
		var kind voters.Kind
		ctl := startController(t, ctrlOpts{crashAfter: func(a voters.Action) bool {
			key := string(a.Kind) + "/" + a.Node
			if a.Kind == voters.Record || !crash(a.Kind) || seen[key] {
				return false
			}
			seen[key], kind = true, a.Kind
			return true
		}})
		var s *holdfastv1.VoterSwap
		for {
			s = getSwap(t, name)
			if s.Status.Phase.Finished() || time.Now().After(deadline) {
				break
			}
			select {
			case <-ctl.crashed:
			case <-time.After(100 * time.Millisecond):
				continue
			}
			break
		}
		ctl.stop()
		if s.Status.Phase.Finished() {
			if s.Status.Phase != holdfastv1.SwapSucceeded {
				t.Fatalf("swap finished %s after crashes %v: %s\nhistory:\n%s", s.Status.Phase, crashes, describe(s), history(s))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("swap not finished within 4m after crashes %v: %s\nhistory:\n%s\nnodes:\n%s", crashes, describe(s), history(s), nodeReports(t))
		}
		crashes = append(crashes, string(kind))
	}
	checkWriter(t, w)
	t.Logf("crashed after %d actions: %v", len(crashes), crashes)
	for _, k := range want {
		if !slices.Contains(crashes, string(k)) {
			t.Errorf("no crash after %s: %v", k, crashes)
		}
	}
	v, learners, id := etcdMembers(t, cli)
	if !slices.Equal(v, []string{names[1], names[2], names[3]}) || len(learners) > 0 || id != clusterID {
		t.Fatalf("after the swap: voters %v learners %v cluster %x", v, learners, id)
	}
	for _, n := range []*corev1.Node{getNode(t, names[0]), getNode(t, names[3])} {
		if n.Spec.Unschedulable || hasSwapTaint(n) {
			t.Errorf("%s left cordoned", n.Name)
		}
	}
}

// TestSwapAbandonedWhenWorkloadPodsOutlastTheDrainWait: a pod that runs to
// completion on the candidate is waited for, never evicted; past the drain
// wait the swap is abandoned: the candidate uncordoned, the Lease released,
// nothing changed in etcd.
func TestSwapAbandonedWhenWorkloadPodsOutlastTheDrainWait(t *testing.T) {
	c := newCluster(t, []string{"w1", "w2", "w3"}, []string{"w4"})
	c.policy(t, nil)
	startController(t, ctrlOpts{})
	waitHealthyStatus(t, "w1", "w2", "w3")
	cli := c.client("w1", "w2", "w3")
	before, _, clusterID := etcdMembers(t, cli)
	ctx := context.Background()
	job := startJob(t, "w4", "build-job")

	name := createSwap(t, "w1", "w4")
	waitWaiting(t, name, holdfastv1.SwapReasonWorkloadPodsRunning, time.Minute)
	// The drain wait passes with the job still running.
	shifted.Advance(2 * time.Minute)
	s := waitPhase(t, name, holdfastv1.SwapAbandoned, time.Minute)
	if !strings.Contains(history(s), holdfastv1.SwapReasonWorkloadDrainTimeout) || !strings.Contains(history(s), "build-job") {
		t.Errorf("history does not name the timeout and the pod:\n%s", history(s))
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil || job.DeletionTimestamp != nil {
		t.Errorf("the workload pod was evicted or deleted: %v", err)
	}
	poll.Until(t, 10*time.Second, "swap Lease released", func() (bool, string) {
		h := policy.SwapLeaseHolder(getLease(t))
		return h == "", h
	})
	n4 := getNode(t, "w4")
	if n4.Spec.Unschedulable || hasSwapTaint(n4) || n4.Labels[holdfastv1.LabelDesiredRole] != "" {
		t.Errorf("w4 left cordoned %v, tainted %v or with desired role %q", n4.Spec.Unschedulable, n4.Spec.Taints, n4.Labels[holdfastv1.LabelDesiredRole])
	}
	after, learners, id := etcdMembers(t, cli)
	if !slices.Equal(after, before) || len(learners) > 0 || id != clusterID {
		t.Fatalf("etcd changed: voters %v learners %v cluster %x", after, learners, id)
	}
}

// TestAnUnfitVoterIsOnlyProposedUnderDryRun: a voter whose fitness report
// (written as its node plugin would) is over the fsync threshold for a whole
// window is proposed in VoterPolicy status.proposedSwap under dry run, and
// no VoterSwap, Lease or node change follows.
func TestAnUnfitVoterIsOnlyProposedUnderDryRun(t *testing.T) {
	c := newCluster(t, []string{"f1", "f2", "f3"}, []string{"f4"})
	c.policy(t, func(p *holdfastv1.VoterPolicy) {
		p.Spec.DryRun = new(true)
		p.Spec.Fitness = holdfastv1.FitnessThresholds{WindowSeconds: 60, MaxFsyncMillis: 10, MaxPeerRTTMillis: 1000}
	})
	ctl := startController(t, ctrlOpts{})
	waitHealthyStatus(t, "f1", "f2", "f3")
	ctx := context.Background()
	waitFitnessReports(t, "f2")
	var p holdfastv1.VoterPolicy
	keepUnfit(t, "f2", 400_000, "proposedSwap naming f2", func() (bool, string) {
		if err := env.Client.Get(ctx, client.ObjectKey{Name: holdfastv1.VoterPolicyName}, &p); err != nil {
			return false, err.Error()
		}
		ps := p.Status.ProposedSwap
		return ps != nil && ps.Outgoing == "f2", fmt.Sprintf("%+v", ps)
	})
	if !strings.Contains(p.Status.ProposedSwap.Reason, "fsync p99 400ms over 10ms") {
		t.Errorf("proposal reason %q does not say why", p.Status.ProposedSwap.Reason)
	}
	ctl.afterPasses(t, 3)
	var swaps holdfastv1.VoterSwapList
	if err := env.Client.List(ctx, &swaps); err != nil {
		t.Fatal(err)
	}
	if len(swaps.Items) > 0 {
		t.Errorf("dry run created VoterSwap %s", swaps.Items[0].Name)
	}
	if h := policy.SwapLeaseHolder(getLease(t)); h != "" {
		t.Errorf("the swap Lease is held by %s", h)
	}
	if n := getNode(t, "f2"); n.Spec.Unschedulable || n.Labels[holdfastv1.LabelDesiredRole] != "" {
		t.Errorf("f2 was changed")
	}
}

// waitFitnessReports waits for the node plugins' own first fitness probes,
// so a report a test writes is not overwritten by one.
func waitFitnessReports(t testing.TB, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		poll.Until(t, 30*time.Second, n+"'s first fitness report", func() (bool, string) {
			return getNode(t, n).Annotations[holdfastv1.AnnotationFitness] != "", ""
		})
	}
}

// reportFitness writes node's fitness report as its node plugin's probe
// does (holdfast-node bound to the node, through the webhook), taken now on
// the controller's clock.
func reportFitness(t testing.TB, node string, fsyncMicros int64) {
	t.Helper()
	plugin := env.ClientAs(t, nodePluginUser, map[string][]string{serviceaccount.NodeNameKey: {node}})
	b, _ := json.Marshal(holdfastv1.Fitness{FsyncP99Micros: fsyncMicros, FsyncSamples: 100, At: metav1.NewTime(shifted.Now())})
	if err := role.PatchAnnotations(context.Background(), plugin, node, map[string]*string{holdfastv1.AnnotationFitness: new(string(b))}); err != nil {
		t.Fatal(err)
	}
}

// keepUnfit reports node's fsync p99 at fsyncMicros again and again while
// the controller's clock moves on 25s after each report (so the reports
// span the policy's window without waiting for it), until cond holds.
func keepUnfit(t testing.TB, node string, fsyncMicros int64, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		reportFitness(t, node, fsyncMicros)
		// The report's Node change starts a pass; give it time to see it.
		inner := time.Now().Add(1500 * time.Millisecond)
		for time.Now().Before(inner) {
			ok, s := cond()
			if ok {
				return
			}
			last = s
			time.Sleep(100 * time.Millisecond)
		}
		shifted.Advance(25 * time.Second)
	}
	t.Fatalf("%s: not within 90s of %s reported unfit; last: %s", what, node, last)
}

// TestAPromotedVoterNotReadyInTimeIsSteppedBack: the candidate is promoted
// (four real voters) but its Node never turns Ready after its server's
// start. Once the operation timeout of its promotion passes, the swap
// steps it back: its member is removed while the three others are healthy,
// its host returns to an agent, and the swap ends RolledBack with the
// original three voters, an odd count, and one cluster ID. No write is lost.
func TestAPromotedVoterNotReadyInTimeIsSteppedBack(t *testing.T) {
	c := newCluster(t, []string{"r1", "r2", "r3"}, []string{"r4"})
	c.policy(t, nil)
	startController(t, ctrlOpts{})
	waitHealthyStatus(t, "r1", "r2", "r3")
	cli := c.client("r2", "r3")
	_, _, clusterID := etcdMembers(t, cli)
	w := startWriter(cli)

	c.hosts["r4"].quiet.Store(true)
	name := createSwap(t, "r1", "r4")
	waitWaiting(t, name, holdfastv1.SwapReasonWaitingForNodeReady, 90*time.Second)
	if v, _, _ := etcdMembers(t, cli); len(v) != 4 {
		t.Fatalf("the swap waits for r4's Ready with voters %v, want four", v)
	}
	// The Ready deadline (the operation timeout, 60s) passes.
	shifted.Advance(61 * time.Second)
	s := waitPhase(t, name, holdfastv1.SwapRolledBack, 2*time.Minute)
	checkWriter(t, w)
	if !strings.Contains(history(s), holdfastv1.SwapReasonNotReadyByDeadline) {
		t.Errorf("history does not say %s:\n%s", holdfastv1.SwapReasonNotReadyByDeadline, history(s))
	}
	v, learners, id := etcdMembers(t, cli)
	if !slices.Equal(v, []string{"r1", "r2", "r3"}) || len(learners) > 0 || id != clusterID {
		t.Fatalf("after the step-back: voters %v learners %v cluster %x, want r1 r2 r3, none, %x", v, learners, id, clusterID)
	}
	if n := getNode(t, "r4"); hasSwapTaint(n) || n.Spec.Unschedulable {
		t.Errorf("r4 left cordoned %v or tainted %v", n.Spec.Unschedulable, n.Spec.Taints)
	}
	waitHealthyStatus(t, "r1", "r2", "r3")
	if p := getPolicy(t); p.Status.EvenSince != nil {
		t.Errorf("evenSince %v after the step-back", p.Status.EvenSince)
	}
}
