//go:build integration

package voters_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
	"github.com/holdfast-io/holdfast/test/etcdwatch"
	"github.com/holdfast-io/holdfast/test/poll"
)

// TestAHostDownForItsWholeSwapFinishesOnReturn: the outgoing host goes down
// (etcd member SIGSTOPped, node plugin stopped, Node NotReady) before its
// step-down and comes back only after the swap finished and released the
// Lease. Its role file does not say agent (the step-down never ran) and no
// Lease names its swap any more; its member is provably gone (the member
// list, then its tombstone), so its node plugin finishes it on its return:
// an agent, its data moved aside, its role step done and cleared, its Node
// uncordoned. Its member never comes back, and no write is lost.
func TestAHostDownForItsWholeSwapFinishesOnReturn(t *testing.T) {
	c := newCluster(t, []string{"d1", "d2", "d3"}, []string{"d4"})
	c.policy(t, nil)
	startController(t, ctrlOpts{})
	waitHealthyStatus(t, "d1", "d2", "d3")
	cli := c.client("d2", "d3")
	_, _, clusterID := etcdMembers(t, cli)
	w := startWriter(cli)

	// Held where the candidate votes (no Ready heartbeat after its start
	// yet) while d1 goes down: before Regate, so before any step-down.
	h4 := c.hosts["d4"]
	h4.quiet.Store(true)
	name := createSwap(t, "d1", "d4")
	waitWaiting(t, name, holdfastv1.SwapReasonWaitingForNodeReady, 90*time.Second)
	h1 := c.hosts["d1"]
	h1.pause(t)
	h4.quiet.Store(false)

	waitStep(t, name, holdfastv1.StepFinishDemote, 2*time.Minute)
	poll.Until(t, time.Minute, "d1 given its finish-demote step while down", func() (bool, string) {
		n := getNode(t, "d1")
		return n.Annotations[holdfastv1.AnnotationRoleStep] == holdfastv1.RoleStepFinishDemote, n.Annotations[holdfastv1.AnnotationRoleStep]
	})
	// The operation timeout of FinishDemote passes with d1 away.
	shifted.Advance(2 * time.Minute)
	s := waitPhase(t, name, holdfastv1.SwapSucceeded, time.Minute)
	poll.Until(t, 20*time.Second, "swap Lease released", func() (bool, string) {
		h := policy.SwapLeaseHolder(getLease(t))
		return h == "", "held by " + h
	})
	// A first voter has no role file at all; the step-down would have
	// written agent.
	if role, _ := h1.state.Role(); role == holdfastv1.RoleAgent {
		t.Fatalf("d1's role file says %q before its return: the drill needs a host whose step-down never ran", role)
	}
	t.Logf("history:\n%s", history(s))

	h1.resume(t)
	poll.Until(t, 3*time.Minute, "d1 finished to an agent on its return", func() (bool, string) {
		n := getNode(t, "d1")
		role, _ := h1.state.Role()
		server, agent := h1.sd.ActiveState(serverUnit), h1.sd.ActiveState(agentUnit)
		rep := holdfastv1.ActuatorReportOf(n.Annotations)
		done := rep != nil && rep.Step == holdfastv1.RoleStepFinishDemote && rep.Phase == holdfastv1.ActuatorDone
		ok := done && role == holdfastv1.RoleAgent && server != "active" && agent == "active" && hostDataMovedAside(h1) &&
			!n.Spec.Unschedulable && !hasSwapTaint(n) && n.Annotations[holdfastv1.AnnotationRoleStep] == "" &&
			n.Annotations[holdfastv1.AnnotationTombstone] == ""
		return ok, fmt.Sprintf("role file %q, server %s, agent %s, data moved aside %v, cordoned %v, role step %q, tombstone %q, report %s",
			role, server, agent, hostDataMovedAside(h1), n.Spec.Unschedulable, n.Annotations[holdfastv1.AnnotationRoleStep],
			n.Annotations[holdfastv1.AnnotationTombstone], n.Annotations[holdfastv1.AnnotationActuator])
	})
	checkWriter(t, w)
	v, learners, id, err := etcdwatch.Members(context.Background(), cli)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(v, []string{"d2", "d3", "d4"}) || len(learners) > 0 || id != clusterID {
		t.Fatalf("after d1's return: voters %v learners %v cluster %x, want d2 d3 d4, none, %x", v, learners, id, clusterID)
	}
}
