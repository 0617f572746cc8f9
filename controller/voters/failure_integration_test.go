//go:build integration

package voters_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/voters"
	"github.com/holdfast-io/holdfast/webhook/rules"
)

// waitStep waits until the swap reaches step (or a later phase), and
// returns it.
func waitStep(t testing.TB, name string, step holdfastv1.SwapStep, within time.Duration) *holdfastv1.VoterSwap {
	t.Helper()
	var s *holdfastv1.VoterSwap
	eventually(t, within, "swap "+name+" at step "+string(step), func() (bool, string) {
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
	eventually(t, within, "swap "+name+" waiting for "+reason, func() (bool, string) {
		s := getSwap(t, name)
		if s.Status.Phase.Finished() {
			t.Fatalf("swap %s finished %s while waiting for %s: %s\nhistory:\n%s", name, s.Status.Phase, reason, describe(s), history(s))
		}
		c := meta.FindStatusCondition(s.Status.Conditions, holdfastv1.ConditionProgressing)
		return c != nil && c.Reason == reason, describe(s)
	})
}

// TestRollbackOfACandidateWhosePeerPortIsUnreachable: the candidate's etcd
// member cannot reach any peer, so its learner never starts; past the
// learner stall time plus the operation timeout the swap rolls back: the
// learner removed, the host back to an agent, the members and voters
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
	waitWaiting(t, name, "LearnerNotStarted", 90*time.Second)
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
	if !strings.Contains(history(s), voters.ReasonNotVoterByDeadline) {
		t.Errorf("history does not say %s", voters.ReasonNotVoterByDeadline)
	}
}

// TestRemovalCompletesWithTheOutgoingVoterPaused: the outgoing host is
// SIGSTOPped (etcd member, node plugin, kubelet) once the candidate votes;
// the removal goes on because the voters that stay are healthy, the swap
// ends with three voters and the outgoing host pending. On its return its
// tombstone guard keeps its server out: the members stay three.
func TestRemovalCompletesWithTheOutgoingVoterPaused(t *testing.T) {
	c := newCluster(t, []string{"p1", "p2", "p3"}, []string{"p4"})
	c.policy(t, nil)
	startController(t, ctrlOpts{})
	waitHealthyStatus(t, "p1", "p2", "p3")
	cli := c.client("p2", "p3")
	_, _, clusterID := etcdMembers(t, cli)
	w := startWriter(cli)

	name := createSwap(t, "p1", "p4")
	waitStep(t, name, holdfastv1.StepRegate, 90*time.Second)
	h1 := c.hosts["p1"]
	h1.pause(t)
	waitWaiting(t, name, voters.ReasonWaitingActuator, 90*time.Second)
	eventually(t, time.Minute, "p1's member removed", func() (bool, string) {
		v, _, _ := etcdMembers(t, cli)
		return slices.Equal(v, []string{"p2", "p3", "p4"}), strings.Join(v, ",")
	})
	// The operation timeout of finish-demote passes with p1 away.
	shifted.Advance(2 * time.Minute)
	s := waitPhase(t, name, holdfastv1.SwapSucceeded, time.Minute)
	w.check(t)
	if !strings.Contains(history(s), voters.ReasonOutgoingDown) || !strings.Contains(history(s), voters.ReasonOutgoingPending) {
		t.Errorf("history does not say %s and %s:\n%s", voters.ReasonOutgoingDown, voters.ReasonOutgoingPending, history(s))
	}
	n1 := getNode(t, "p1")
	if _, ok := n1.Labels[holdfastv1.LabelEtcdRole]; ok {
		t.Error("p1 keeps the etcd role label although its member is gone")
	}
	if n1.Annotations[holdfastv1.AnnotationRoleStep] != holdfastv1.RoleStepFinishDemote {
		t.Errorf("p1's role step %q: want finish-demote kept for its return", n1.Annotations[holdfastv1.AnnotationRoleStep])
	}

	// p1 comes back: its removed member never serves again.
	h1.resume(t)
	eventually(t, time.Minute, "p1's tombstone reported and its server stopped", func() (bool, string) {
		n := getNode(t, "p1")
		st := h1.sd.ActiveState(serverUnit)
		return n.Annotations[holdfastv1.AnnotationTombstone] != "" && st != "active", st
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
	startController(t, ctrlOpts{})
	waitHealthyStatus(t, "q1", "q2", "q3")
	resume := c.hosts["q2"].pauseEtcd(t)
	defer resume()
	eventually(t, time.Minute, "EtcdHealthy False naming q2", func() (bool, string) {
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
	}
	// Give the controller passes to act, had it wanted to.
	time.Sleep(2 * time.Second)
	if l := getLease(t); rules.SwapLeaseHolder(l) != "" {
		t.Errorf("the swap Lease is held by %q", rules.SwapLeaseHolder(l))
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

// TestSwapResumesAfterACrashAfterEveryAction ends the controller right after
// every action it carries out, before the action is recorded (the worst
// instant: the world changed, the status does not say so), and starts a new
// one each time: the swap completes, with three voters and no write lost.
func TestSwapResumesAfterACrashAfterEveryAction(t *testing.T) {
	c := newCluster(t, []string{"k1", "k2", "k3"}, []string{"k4"})
	c.policy(t, nil)
	ctl := startController(t, ctrlOpts{})
	waitHealthyStatus(t, "k1", "k2", "k3")
	ctl.stop()
	cli := c.client("k2", "k3")
	_, _, clusterID := etcdMembers(t, cli)
	w := startWriter(cli)

	name := createSwap(t, "k1", "k4")
	// Once after every kind of action on every node (a Record is the
	// status write itself: a crash after it is one before the next action).
	var crashes []string
	seen := map[string]bool{}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var kind voters.Kind
		ctl := startController(t, ctrlOpts{crashAfter: func(a voters.Action) bool {
			key := string(a.Kind) + "/" + a.Node
			if a.Kind == voters.Record || seen[key] {
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
			t.Fatalf("swap not finished within 3m after crashes %v: %s\nhistory:\n%s\nnodes:\n%s", crashes, describe(s), history(s), nodeReports(t))
		}
		crashes = append(crashes, string(kind))
	}
	w.check(t)
	t.Logf("crashed after %d actions: %v", len(crashes), crashes)
	for _, k := range []voters.Kind{voters.AcquireLease, voters.Snapshot, voters.Cordon, voters.AddLearner, voters.SetRoleStep,
		voters.PromoteMember, voters.SetEtcdLabel, voters.Uncordon, voters.MoveLeader, voters.RemoveMember, voters.ClearRoleLabels, voters.ClearRoleStep} {
		if !slices.Contains(crashes, string(k)) && k != voters.MoveLeader {
			t.Errorf("no crash after %s: %v", k, crashes)
		}
	}
	v, learners, id := etcdMembers(t, cli)
	if !slices.Equal(v, []string{"k2", "k3", "k4"}) || len(learners) > 0 || id != clusterID {
		t.Fatalf("after the swap: voters %v learners %v cluster %x", v, learners, id)
	}
	for _, n := range []*corev1.Node{getNode(t, "k1"), getNode(t, "k4")} {
		if n.Spec.Unschedulable || hasSwapTaint(n) {
			t.Errorf("%s left cordoned", n.Name)
		}
	}
}
