//go:build e2e

package voters

import (
	"slices"
	"testing"
	"time"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/etcdwatch"
	"github.com/holdfast-io/holdfast/test/poll"
)

// TestRoleSwapPaused is the role_swap_paused scenario: the whole outgoing
// host hangs once the candidate is promoted (Regate or StepDown seen): its
// kubelet, its holdfast-node and its etcd member SIGSTOPped together. The
// removal completes without it (its Node NotReady, its member removed by
// the others), writes go on throughout, and the swap succeeds with the
// host's demotion pending. Resumed, the host finishes as an agent (data
// moved aside, server unit stopped) and its member never returns: the
// member it resumes with is refused by the others, and the server's start
// condition, judging the member list, keeps every restart out.
func TestRoleSwapPaused(t *testing.T) {
	ctx, cli, before, clusterID := openDrill(t)
	out, in := before[0], nonVoter(t, before)
	x := etcdwatch.Watch(cli, "/holdfast-writer/role-swap-paused/")
	var resume func()
	var pausedAt time.Time
	s := swapSucceeds(t, out, in, 8*time.Minute, func(step string) {
		logStep(t, step)
		if (step == string(holdfastv1.StepRegate) || step == string(holdfastv1.StepStepDown)) && resume == nil {
			var err error
			if resume, err = world.PauseHost(ctx, out); err != nil {
				t.Fatal(err)
			}
			pausedAt = time.Now()
			t.Logf("%s paused: kubelet, holdfast-node and etcd member SIGSTOPped", out)
		}
	})
	if resume == nil {
		t.Fatal("the swap never reached Regate or StepDown with the outgoing host running")
	}
	finished := time.Now()
	for _, h := range s.Status.History {
		if h.Step == holdfastv1.StepRemoveMember && h.Reason == holdfastv1.SwapReasonMemberRemoved && h.At.Time.Before(pausedAt.Truncate(time.Second)) {
			t.Errorf("%s was removed at %s, before its host was paused at %s", out, h.At.UTC().Format("15:04:05"), pausedAt.UTC().Format("15:04:05.000"))
		}
	}
	after := wantSwapped(t, cli, before, out, in, clusterID, s)
	resume()
	resumedAt := time.Now()
	h := world.Nodes[out].Host
	poll.Until(t, 3*time.Minute, out+" an agent with its data moved aside", func() (bool, string) {
		st := h.ServerState()
		role, _ := h.State.Role()
		return h.DataMovedAside() && st != "active" && h.MemberPID() == 0 && role == holdfastv1.RoleAgent, "server unit " + st + ", role file " + role
	})
	t.Logf("%s paused %v before the swap succeeded; finished as an agent %v after its resume", out,
		finished.Sub(pausedAt).Round(time.Second), time.Since(resumedAt).Round(time.Second))
	x.Check(t)
	t.Logf("history:\n%s", history(s))
	// Its member never returns.
	now, learners, id := etcdwatch.MembersOf(t, cli)
	if !slices.Equal(now, after) || len(learners) > 0 || id != clusterID {
		t.Fatalf("after %s's resume: voters %v learners %v cluster %x; want %v, none, %x", out, now, learners, id, after, clusterID)
	}
	if err := world.WaitVotersHealthy(ctx, time.Minute, after...); err != nil {
		t.Error(err)
	}
}
