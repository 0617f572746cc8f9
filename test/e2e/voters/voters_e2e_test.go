//go:build e2e

package voters

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/etcdwatch"
	"github.com/holdfast-io/holdfast/test/poll"
)

// TestRoleSwap is the role_swap scenario: a voter of the apiserver's own etcd
// (carrying k3s's server labels and etcd annotations) swapped for the
// standby while a writer puts a key every 50 ms, then swapped back in for a
// voter that was never swapped. After the first swap: three voters by
// etcd's vote; the outgoing member gone, its data moved aside, its node an
// agent (server unit stopped by holdfast-node, agent unit running) with its
// role labels and etcd annotations gone and its identity kept (the same Node
// object, Ready again); the swap's steps in its status, Events and metrics;
// the swap Lease released. The former member then joins the existing cluster
// as a new member. Throughout: no failed or lost write in the writer's
// history, a voter leader at every sample, one cluster ID on every member.
func TestRoleSwap(t *testing.T) {
	ctx, cli, before, clusterID := openDrill(t)
	if len(before) != 3 {
		t.Fatalf("start: voters %v, want 3", before)
	}
	out, in := before[0], nonVoter(t, before)
	// What a k3s server's Node carries, which a demoted node must lose.
	if err := world.LabelNode(ctx, out, map[string]string{holdfastv1.LabelControlPlaneRole: "true", holdfastv1.LabelMasterRole: "true"}); err != nil {
		t.Fatal(err)
	}
	if err := world.AnnotateNode(ctx, out, map[string]string{k3sEtcdAnnotation: out + "-drill"}); err != nil {
		t.Fatal(err)
	}
	uid := getNode(t, out).UID
	x := etcdwatch.Watch(cli, "/holdfast-writer/role-swap/")
	var seen []string
	s := swapSucceeds(t, out, in, 5*time.Minute, func(step string) {
		logStep(t, step)
		seen = append(seen, step)
	})
	name := s.Name
	took := s.Status.FinishedAt.Sub(s.Status.StartedAt.Time)
	t.Logf("swap %s: %s -> %s in %v; history:\n%s", s.Status.SwapID, out, in, took.Round(time.Millisecond), history(s))

	// etcd's own vote.
	mid := wantSwapped(t, cli, before, out, in, clusterID, s)
	// The host half, as holdfast-node left it.
	h := world.Nodes[out].Host
	if !h.DataMovedAside() {
		t.Errorf("%s's member data was not moved aside", out)
	}
	if role, _ := h.State.Role(); role != holdfastv1.RoleAgent {
		t.Errorf("%s's role file says %q, want agent", out, role)
	}
	if st := h.ServerState(); st == "active" {
		t.Errorf("%s's server is %s", out, st)
	}
	if st := h.AgentState(); st != "active" {
		t.Errorf("%s's agent is %s", out, st)
	}
	if pid := h.MemberPID(); pid != 0 {
		t.Errorf("an etcd member still runs on %s (pid %d)", out, pid)
	}
	if st := world.Nodes[in].Host.ServerState(); st != "active" {
		t.Errorf("%s's server is %s", in, st)
	}
	// The Node: role labels and annotations gone, the tombstone retired
	// with the data, identity kept.
	poll.Until(t, time.Minute, out+" an agent Node with no role label, swap annotation or tombstone, Ready again", func() (bool, string) {
		n, err := getNodeErr(ctx, out)
		if err != nil {
			return false, err.Error()
		}
		left := leftOnDemoted(n)
		return len(left) == 0 && nodeReady(n), fmt.Sprintf("left %v, ready %v", left, nodeReady(n))
	})
	nOut, nIn := getNode(t, out), getNode(t, in)
	if nOut.UID != uid {
		t.Errorf("%s's Node is a new object (uid %s, was %s): its identity was not kept", out, nOut.UID, uid)
	}
	if nOut.Labels[holdfastv1.LabelDesiredRole] != holdfastv1.RoleAgent {
		t.Errorf("%s's desired role %q, want agent", out, nOut.Labels[holdfastv1.LabelDesiredRole])
	}
	if _, ok := nIn.Labels[holdfastv1.LabelEtcdRole]; !ok {
		t.Errorf("%s is a voter without the etcd role label", in)
	}
	if nOut.Spec.Unschedulable || nIn.Spec.Unschedulable {
		t.Errorf("left cordoned: %s %v, %s %v", out, nOut.Spec.Unschedulable, in, nIn.Spec.Unschedulable)
	}
	// The status: every step of §6 in the history, in order.
	var steps []string
	for _, e := range s.Status.History {
		if len(steps) == 0 || steps[len(steps)-1] != string(e.Step) {
			steps = append(steps, string(e.Step))
		}
	}
	for _, st := range []holdfastv1.SwapStep{holdfastv1.StepGates, holdfastv1.StepPromote,
		holdfastv1.StepRegate, holdfastv1.StepStepDown, holdfastv1.StepRemoveMember, holdfastv1.StepFinishDemote, holdfastv1.StepRelease} {
		if !slices.Contains(steps, string(st)) {
			t.Errorf("history steps %v lack %s", steps, st)
		}
	}
	// The snapshot step shows in status.snapshot (checked below), not in
	// the history; status.step may pass it between two polls.
	t.Logf("status steps seen: %v", seen)
	if s.Status.Snapshot == nil || s.Status.Snapshot.SizeBytes == 0 || s.Status.Snapshot.Member == out {
		t.Errorf("snapshot record %+v: want a verified snapshot from a voter that stays", s.Status.Snapshot)
	}
	if !strings.HasSuffix(s.Status.SwapID, "-"+out+"-"+in) || s.Status.IncomingMemberID == "" || s.Status.OutgoingMemberID == "" {
		t.Errorf("status swap ID %q members %q/%q", s.Status.SwapID, s.Status.IncomingMemberID, s.Status.OutgoingMemberID)
	}
	// The phase is Succeeded a pass before the Lease is released (one swap
	// at a time: the webhook refuses the next one until then).
	poll.Until(t, time.Minute, "swap Lease released", func() (bool, string) {
		h := swapLeaseHolder(t)
		return h == "", "held by " + h
	})
	// An Event posted while the apiserver's own etcd is changing members can
	// fail and is retried by client-go's recorder (12 x 10s): give it that
	// long (make test-e2e once saw MemberRemoved arrive after 20s).
	poll.Until(t, 3*time.Minute, "Events on the swap", func() (bool, string) {
		seen := swapEvents(t, name)
		return seen[holdfastv1.SwapReasonLearnerAdded] && seen[holdfastv1.SwapReasonPromoted] && seen[holdfastv1.SwapReasonMemberRemoved], strings.Join(keys(seen), ",")
	})
	if err := world.WaitVotersHealthy(ctx, 2*time.Minute, mid...); err != nil {
		t.Fatal(err)
	}
	m := metrics(t)
	for _, want := range [][]string{
		{"holdfast_voters_swaps_finished_total", `phase="Succeeded"`},
		{"holdfast_voters_count"},
		{"holdfast_voters_swap_actions_total", `result="ok"`},
	} {
		if metricLine(m, want[0], want[1:]...) == "" {
			t.Errorf("metric %v missing from the voters role", want)
		}
	}
	if l := metricLine(m, "holdfast_voters_count"); !strings.HasSuffix(l, " 3") {
		t.Errorf("holdfast_voters_count: %q, want 3", l)
	}

	// The former member in again, for a voter that was never swapped: a new
	// member of the existing cluster (never its old data), one cluster ID.
	out2 := ""
	for _, v := range mid {
		if v != in {
			out2 = v
			break
		}
	}
	s2 := swapSucceeds(t, out2, out, 6*time.Minute, func(step string) { logStep(t, step) })
	r := x.Check(t)
	t.Logf("swap %s: %s -> %s in %v; history:\n%s", s2.Status.SwapID, out2, out, s2.Status.FinishedAt.Sub(s2.Status.StartedAt.Time).Round(time.Millisecond), history(s2))
	t.Logf("both swaps: %d writes acknowledged, longest write stall %v", r.Acked, r.Longest.Round(time.Millisecond))
	after := wantSwapped(t, cli, mid, out2, out, clusterID, s2)
	if newID := s2.Status.IncomingMemberID; newID == "" || newID == s.Status.OutgoingMemberID {
		t.Errorf("%s came back as member %q, its old member was %q: want a new member", out, newID, s.Status.OutgoingMemberID)
	}
	// Every member, asked on its own endpoint, is of the one cluster.
	for _, v := range after {
		c := etcdClientOn(t, v)
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := c.Status(sctx, world.Nodes[v].Host.ClientURL)
		cancel()
		if err != nil {
			t.Errorf("status of %s: %v", v, err)
			continue
		}
		if st.Header.ClusterId != clusterID {
			t.Errorf("%s reports cluster %x, want %x", v, st.Header.ClusterId, clusterID)
		}
	}
	poll.Until(t, time.Minute, "swap Lease released after the second swap", func() (bool, string) {
		h := swapLeaseHolder(t)
		return h == "", "held by " + h
	})
	if err := world.WaitVotersHealthy(ctx, 2*time.Minute, after...); err != nil {
		t.Error(err)
	}
}

// k3sEtcdAnnotation is one of the etcd annotations k3s puts on a server's
// Node (etcd.k3s.cattle.io/...).
const k3sEtcdAnnotation = "etcd.k3s.cattle.io/node-name"

// leftOnDemoted is what a demoted node must no longer carry: a server role
// label, a k3s etcd annotation, a swap's role annotations, a tombstone.
func leftOnDemoted(n *corev1.Node) []string {
	var left []string
	for _, k := range []string{holdfastv1.LabelEtcdRole, holdfastv1.LabelControlPlaneRole, holdfastv1.LabelMasterRole} {
		if _, ok := n.Labels[k]; ok {
			left = append(left, k)
		}
	}
	for k := range n.Annotations {
		if strings.HasPrefix(k, "etcd.k3s.cattle.io/") || k == holdfastv1.AnnotationRoleSwap || k == holdfastv1.AnnotationRoleStep ||
			k == holdfastv1.AnnotationRoleJoin || k == holdfastv1.AnnotationTombstone {
			left = append(left, k)
		}
	}
	slices.Sort(left)
	return left
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestOutgoingVoterPausedAfterPromotionIsStillRemoved SIGSTOPs the outgoing
// voter's etcd member once the candidate votes (the swap at Regate, or at
// StepDown when Regate passed between two polls): the
// voters that stay are healthy, so the member is removed anyway and its
// node finished as an agent (holdfast-node stops the stopped process).
func TestOutgoingVoterPausedAfterPromotionIsStillRemoved(t *testing.T) {
	ctx, cli, before, clusterID := openDrill(t)
	out, in := before[0], nonVoter(t, before)
	x := etcdwatch.Watch(cli, "/holdfast-writer/outgoing-paused/")
	var resume func()
	var pausedAt time.Time
	s := swapSucceeds(t, out, in, 5*time.Minute, func(step string) {
		logStep(t, step)
		// Regate can pass between two polls (200 ms): the first step seen
		// after Promote, Regate or StepDown, is the member still voting with
		// the candidate promoted.
		if (step == string(holdfastv1.StepRegate) || step == string(holdfastv1.StepStepDown)) && resume == nil {
			var err error
			if resume, err = world.Nodes[out].Host.PauseMember(); err != nil {
				t.Fatal(err)
			}
			pausedAt = time.Now()
			t.Logf("%s's etcd member SIGSTOPped", out)
		}
	})
	if resume == nil {
		t.Fatal("the swap never reached Regate or StepDown with the outgoing member running")
	}
	// Paused while it still voted: its removal came after the pause.
	for _, h := range s.Status.History {
		if h.Step == holdfastv1.StepRemoveMember && h.Reason == holdfastv1.SwapReasonMemberRemoved && h.At.Time.Before(pausedAt.Truncate(time.Second)) {
			t.Errorf("%s was removed at %s, before its member was paused at %s", out, h.At.UTC().Format("15:04:05"), pausedAt.UTC().Format("15:04:05.000"))
		}
	}
	resume()
	x.Check(t)
	t.Logf("history:\n%s", history(s))
	after := wantSwapped(t, cli, before, out, in, clusterID, s)
	h := world.Nodes[out].Host
	poll.Until(t, time.Minute, out+" an agent with its data moved aside", func() (bool, string) {
		st := h.ServerState()
		return h.DataMovedAside() && st != "active" && h.MemberPID() == 0, "server unit " + st
	})
	if err := world.WaitVotersHealthy(ctx, time.Minute, after...); err != nil {
		t.Error(err)
	}
}

// TestRoleSwapBlockedPeer is the role_swap_blocked_peer scenario: the
// candidate is cut off from every member's address, so its learner never
// starts, and past the learner stall time plus the operation timeout the
// swap rolls back: the learner removed, the candidate an agent again with
// nothing of the swap left on either Node, the members exactly as before,
// the swap Lease released, and no failed or lost write throughout.
func TestRoleSwapBlockedPeer(t *testing.T) {
	ctx, cli, before, clusterID := openDrill(t)
	out, in := before[0], nonVoter(t, before)
	unblock, err := world.Nodes[in].Host.BlockPeers(otherEtcdIPs(in)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if unblock != nil {
			_ = unblock()
		}
	})
	x := etcdwatch.Watch(cli, "/holdfast-writer/learner-stalled/")
	name, err := createSwap(t, out, in)
	if err != nil {
		t.Fatal(err)
	}
	s := waitPhase(t, name, holdfastv1.SwapRolledBack, 6*time.Minute, func(step string) { logStep(t, step) })
	r := x.Check(t)
	t.Logf("rolled back in %v, %d writes acknowledged, longest write stall %v; history:\n%s", s.Status.FinishedAt.Sub(s.Status.StartedAt.Time).Round(time.Millisecond),
		r.Acked, r.Longest.Round(time.Millisecond), history(s))
	if err := unblock(); err != nil {
		t.Error(err)
	}
	unblock = nil
	after, learners, id := etcdwatch.MembersOf(t, cli)
	if !slices.Equal(after, before) || len(learners) > 0 || id != clusterID {
		t.Fatalf("after the rollback: voters %v learners %v cluster %x; want %v, none, %x", after, learners, id, before, clusterID)
	}
	if !strings.Contains(history(s), holdfastv1.SwapReasonNotVoterByDeadline) {
		t.Errorf("history does not say %s", holdfastv1.SwapReasonNotVoterByDeadline)
	}
	h := world.Nodes[in].Host
	if role, _ := h.State.Role(); role != holdfastv1.RoleAgent {
		t.Errorf("%s's role file says %q", in, role)
	}
	if st := h.ServerState(); st == "active" {
		t.Errorf("%s's server is %s", in, st)
	}
	nIn, nOut := getNode(t, in), getNode(t, out)
	if _, ok := nIn.Labels[holdfastv1.LabelEtcdRole]; ok || nIn.Spec.Unschedulable {
		t.Errorf("%s left with the etcd label or cordoned", in)
	}
	if nOut.Spec.Unschedulable || nOut.Labels[holdfastv1.LabelDesiredRole] == holdfastv1.RoleAgent {
		t.Errorf("%s was touched: cordoned %v desired role %q", out, nOut.Spec.Unschedulable, nOut.Labels[holdfastv1.LabelDesiredRole])
	}
	poll.Until(t, time.Minute, "nothing of the swap left on "+in+" or "+out, func() (bool, string) {
		var left []string
		for _, name := range []string{in, out} {
			n, err := getNodeErr(ctx, name)
			if err != nil {
				return false, err.Error()
			}
			for _, k := range []string{holdfastv1.AnnotationRoleSwap, holdfastv1.AnnotationRoleStep, holdfastv1.AnnotationRoleJoin, holdfastv1.AnnotationTombstone} {
				if v, ok := n.Annotations[k]; ok {
					left = append(left, name+": "+k+"="+v)
				}
			}
		}
		return len(left) == 0, strings.Join(left, "; ")
	})
	poll.Until(t, time.Minute, "swap Lease released", func() (bool, string) {
		h := swapLeaseHolder(t)
		return h == "", "held by " + h
	})
	if err := world.WaitVotersHealthy(ctx, time.Minute, before...); err != nil {
		t.Error(err)
	}
}

// TestVotersRoleSIGKILLedAtEveryStepCompletes SIGKILLs holdfast-controller
// --role voters as soon as the swap reaches each step and starts it again:
// every run resumes from the swap's status and the Node annotations, and
// the swap completes with no failed or lost write.
func TestVotersRoleSIGKILLedAtEveryStepCompletes(t *testing.T) {
	ctx, cli, before, clusterID := openDrill(t)
	out, in := before[0], nonVoter(t, before)
	x := etcdwatch.Watch(cli, "/holdfast-writer/sigkill/")
	var killedAt []string
	s := swapSucceeds(t, out, in, 8*time.Minute, func(step string) {
		if step == "" {
			return
		}
		if err := world.KillVoters(ctx); err != nil {
			t.Fatalf("SIGKILL and restart of the voters role: %v", err)
		}
		killedAt = append(killedAt, step)
		t.Logf("%s step %s: voters role SIGKILLed and started again", time.Now().UTC().Format("15:04:05.000"), step)
	})
	x.Check(t)
	t.Logf("killed at %v; history:\n%s", killedAt, history(s))
	if len(killedAt) < 5 {
		t.Errorf("killed at only %v", killedAt)
	}
	after := wantSwapped(t, cli, before, out, in, clusterID, s)
	if err := world.WaitVotersHealthy(ctx, time.Minute, after...); err != nil {
		t.Error(err)
	}
}
