//go:build integration

package voters_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/voters"
	"github.com/holdfast-io/holdfast/internal/audit"
	"github.com/holdfast-io/holdfast/policy"
	"github.com/holdfast-io/holdfast/test/poll"
)

// TestFullSwapWithRealEtcd swaps voter a1 out and standby a4 in on a real
// three-member etcd cluster, with the real apiserver and webhook, the node
// plugins driving real etcd members through their systemd doubles, and a
// writer putting a key every 50ms: three voters by etcd's vote at the end,
// a1's member gone with its data moved aside and its role labels cleared,
// no failed or lost write. Then the former member is promoted again, the
// scheduler's pick standing in for a named node, and joins the existing
// cluster: one cluster ID before and after.
func TestFullSwapWithRealEtcd(t *testing.T) {
	c := newCluster(t, []string{"a1", "a2", "a3"}, []string{"a4"})
	c.policy(t, nil)
	trail := &lockedBuffer{}
	ctl := startController(t, ctrlOpts{audit: trail})
	waitHealthyStatus(t, "a1", "a2", "a3")
	cli := c.client("a2", "a3")
	_, _, clusterID := etcdMembers(t, cli)

	w := startWriter(cli)
	name := createSwap(t, "a1", "a4")
	s := waitPhase(t, name, holdfastv1.SwapSucceeded, 3*time.Minute)
	stall := checkWriter(t, w).Longest
	t.Logf("swap %s took %v; history:\n%s", s.Status.SwapID, s.Status.FinishedAt.Sub(s.Status.StartedAt.Time).Round(time.Millisecond), history(s))
	_ = stall

	votersNow, learners, id := etcdMembers(t, cli)
	if !slices.Equal(votersNow, []string{"a2", "a3", "a4"}) || len(learners) > 0 || id != clusterID {
		t.Fatalf("after the swap: voters %v learners %v cluster %x, want a2 a3 a4, none, %x", votersNow, learners, id, clusterID)
	}
	if s.Status.Snapshot == nil || s.Status.Snapshot.SizeBytes == 0 || len(s.Status.Snapshot.SHA256) != 64 || s.Status.Snapshot.Revision == 0 ||
		s.Status.Snapshot.Member == "a1" {
		t.Errorf("snapshot record %+v: want a verified snapshot from a voter that stays", s.Status.Snapshot)
	} else {
		checkSnapshotAt(t, s.Status.Snapshot, ctl.rec.SnapshotDir)
	}
	if !strings.HasSuffix(s.Status.SwapID, "-a1-a4") || s.Status.IncomingMemberID == "" || s.Status.OutgoingMemberID == "" {
		t.Errorf("status %+v: want the swap ID and both member IDs", s.Status)
	}
	h1 := c.hosts["a1"]
	if !hostDataMovedAside(h1) {
		t.Error("a1's member data was not moved aside")
	}
	if role, _ := h1.state.Role(); role != holdfastv1.RoleAgent {
		t.Errorf("a1's role file says %q", role)
	}
	if st := h1.sd.ActiveState(agentUnit); st != "active" {
		t.Errorf("a1's agent unit is %s", st)
	}
	n1, n4 := getNode(t, "a1"), getNode(t, "a4")
	for _, k := range []string{holdfastv1.LabelEtcdRole, holdfastv1.LabelControlPlaneRole, holdfastv1.LabelMasterRole} {
		if _, ok := n1.Labels[k]; ok {
			t.Errorf("a1 keeps the role label %s", k)
		}
	}
	for k := range n1.Annotations {
		if strings.HasPrefix(k, "etcd.k3s.cattle.io/") {
			t.Errorf("a1 keeps k3s's etcd annotation %s", k)
		}
	}
	if n1.Labels[holdfastv1.LabelDesiredRole] != holdfastv1.RoleAgent || n4.Labels[holdfastv1.LabelDesiredRole] != holdfastv1.RoleServer {
		t.Errorf("desired roles a1 %q a4 %q", n1.Labels[holdfastv1.LabelDesiredRole], n4.Labels[holdfastv1.LabelDesiredRole])
	}
	if _, ok := n4.Labels[holdfastv1.LabelEtcdRole]; !ok {
		t.Error("a4 is a voter without the etcd role label")
	}
	for _, n := range []*corev1.Node{n1, n4} {
		if n.Spec.Unschedulable || hasSwapTaint(n) || n.Annotations[holdfastv1.AnnotationRoleStep] != "" {
			t.Errorf("%s left cordoned %v, tainted %v or with role step %q", n.Name, n.Spec.Unschedulable, n.Spec.Taints, n.Annotations[holdfastv1.AnnotationRoleStep])
		}
	}
	if l := getLease(t); policy.SwapLeaseHolder(l) != "" {
		poll.Until(t, 10*time.Second, "swap Lease released", func() (bool, string) {
			l := getLease(t)
			return policy.SwapLeaseHolder(l) == "", policy.SwapLeaseHolder(l)
		})
	}
	waitHealthyStatus(t, "a2", "a3", "a4")
	p := &holdfastv1.VoterPolicy{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: holdfastv1.VoterPolicyName}, p); err != nil {
		t.Fatal(err)
	}
	// The node plugins follow status.clientURLs: the live voters', never
	// the spec's list, which still names a1.
	wantURLs := []string{c.hosts["a2"].member.ClientURL, c.hosts["a3"].member.ClientURL, c.hosts["a4"].member.ClientURL}
	slices.Sort(wantURLs)
	if !slices.Equal(p.Status.ClientURLs, wantURLs) {
		t.Errorf("status.clientURLs %v, want the voters' %v", p.Status.ClientURLs, wantURLs)
	}
	if p.Status.LastSwap == nil || p.Status.LastSwap.Name != name || p.Status.LastSwap.Phase != holdfastv1.SwapSucceeded || p.Status.EvenSince != nil {
		t.Errorf("policy status lastSwap %+v evenSince %v", p.Status.LastSwap, p.Status.EvenSince)
	}
	var reasons []string
	taken := 0
	for _, line := range strings.Split(strings.TrimSpace(trail.String()), "\n") {
		var r audit.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if r.Component != "voters" || r.Actor == "" || r.Swap == "" {
			t.Errorf("audit line %q: want component voters, an actor and the swap ID", line)
		}
		reasons = append(reasons, r.Reason)
		if r.Reason == holdfastv1.SwapReasonLeaseTaken || r.Reason == holdfastv1.SwapReasonLeaseLapsed {
			taken++
		}
	}
	// Renewed on every pass, the Lease is taken once for the whole swap
	// (the 6s Lease would lapse many times over a swap without renewals).
	if taken != 1 || slices.Contains(reasons, holdfastv1.SwapReasonLeaseLapsed) {
		t.Errorf("the swap Lease was taken %d times for one swap (audit trail %v): it must be renewed on every pass, never lapse", taken, reasons)
	}
	for _, want := range []string{holdfastv1.SwapReasonLeaseTaken, holdfastv1.SwapReasonLearnerAdded, holdfastv1.SwapReasonPromoted, holdfastv1.SwapReasonMemberRemoved, holdfastv1.SwapReasonReleased} {
		if !slices.Contains(reasons, want) {
			t.Errorf("audit trail %v lacks %s", reasons, want)
		}
	}

	// Events on the swap, Normal for each step carried out.
	poll.Until(t, 10*time.Second, "Events on the swap", func() (bool, string) {
		var evs eventsv1.EventList
		if err := env.Client.List(context.Background(), &evs); err != nil {
			return false, err.Error()
		}
		seen := map[string]bool{}
		for _, e := range evs.Items {
			if e.Regarding.Kind == "VoterSwap" && e.Regarding.Name == name && e.Type == corev1.EventTypeNormal {
				seen[e.Reason] = true
			}
		}
		return seen[holdfastv1.SwapReasonLearnerAdded] && seen[holdfastv1.SwapReasonPromoted] && seen[holdfastv1.SwapReasonMemberRemoved], fmt.Sprint(seen)
	})

	// The former member comes back: a2 out, the scheduler's pick in (the
	// test binds the candidate pod to a1 as holdfast-scheduler would). An
	// admin makes a1 voter-eligible first.
	labelNode(t, "a1", holdfastv1.LabelVoterEligible, "true")
	w = startWriter(cli)
	name2 := createSwap(t, "a2", "")
	bindCandidate(t, name2, "a1")
	s2 := waitPhase(t, name2, holdfastv1.SwapSucceeded, 3*time.Minute)
	checkWriter(t, w)
	if s2.Status.Incoming != "a1" {
		t.Errorf("incoming %q, want the candidate's node a1", s2.Status.Incoming)
	}
	votersNow, _, id = etcdMembers(t, c.client("a3", "a4"))
	if !slices.Equal(votersNow, []string{"a1", "a3", "a4"}) || id != clusterID {
		t.Fatalf("after the second swap: voters %v cluster %x, want a1 a3 a4 in the same cluster %x", votersNow, id, clusterID)
	}
	pod := &corev1.Pod{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: releaseNS, Name: voters.CandidatePodName(name2)}, pod); err == nil {
		t.Errorf("candidate pod left behind: %s", pod.Name)
	}
}

// TestAnUnfitVoterIsSwappedAutomaticallyAndTheCooldownHolds: with dryRun
// off, voter u2's fitness reports (written as its node plugin's probe
// writes them) stay over the fsync threshold for VoterPolicy's window; the
// controller creates an Automatic VoterSwap by itself and carries it out
// (the scheduler's pick bound by the test) on real etcd with the writer
// putting and reading back throughout: three voters by etcd's vote, u2's
// member gone, no failed or lost write. Then voter u3 goes unfit inside the
// cooldown: no swap, and VoterPolicy says why (condition AutomaticSwap
// Cooldown, a Warning Event naming u3).
func TestAnUnfitVoterIsSwappedAutomaticallyAndTheCooldownHolds(t *testing.T) {
	c := newCluster(t, []string{"u1", "u2", "u3"}, []string{"u4", "u5"})
	c.policy(t, func(p *holdfastv1.VoterPolicy) {
		p.Spec.CooldownSeconds = new(int32(3600))
		// The candidate pod's age is judged on the controller's clock,
		// which earlier tests moved ahead of the apiserver's: an automatic
		// swap's wait for its candidate must outlast that offset.
		p.Spec.OperationTimeoutSeconds = 3600
		// Thresholds no real probe on this machine crosses: only the
		// reports the test writes are unfit.
		p.Spec.Fitness = holdfastv1.FitnessThresholds{WindowSeconds: 60, MaxFsyncMillis: 1000, MaxPeerRTTMillis: 1000}
	})
	ctl := startController(t, ctrlOpts{})
	waitHealthyStatus(t, "u1", "u2", "u3")
	waitFitnessReports(t, "u1", "u2", "u3")
	ctx := context.Background()
	cli := c.client("u1", "u3")
	_, _, clusterID := etcdMembers(t, cli)
	w := startWriter(cli)

	var auto holdfastv1.VoterSwap
	keepUnfit(t, "u2", 4_000_000, "an automatic VoterSwap for u2", func() (bool, string) {
		var swaps holdfastv1.VoterSwapList
		if err := env.Client.List(ctx, &swaps); err != nil {
			return false, err.Error()
		}
		for _, s := range swaps.Items {
			auto = s
			return true, ""
		}
		return false, "no VoterSwap; AutomaticSwap " + automaticCondition(t)
	})
	if auto.Spec.Origin != holdfastv1.SwapAutomatic || auto.Spec.Outgoing != "u2" || auto.Spec.Incoming != "" ||
		!strings.Contains(auto.Spec.Reason, "u2 unfit for the window 1m0s: fsync p99 4s over 1s") {
		t.Fatalf("the controller created %s: %+v, want an automatic swap of u2 saying why", auto.Name, auto.Spec)
	}
	bindCandidate(t, auto.Name, "u4")
	s := waitPhase(t, auto.Name, holdfastv1.SwapSucceeded, 3*time.Minute)
	checkWriter(t, w)
	t.Logf("automatic swap %s took %v; history:\n%s", s.Status.SwapID, s.Status.FinishedAt.Sub(s.Status.StartedAt.Time).Round(time.Millisecond), history(s))
	v, learners, id := etcdMembers(t, cli)
	if !slices.Equal(v, []string{"u1", "u3", "u4"}) || len(learners) > 0 || id != clusterID {
		t.Fatalf("after the automatic swap: voters %v learners %v cluster %x, want u1 u3 u4, none, %x", v, learners, id, clusterID)
	}
	if !hostDataMovedAside(c.hosts["u2"]) {
		t.Error("u2's member data was not moved aside")
	}
	waitHealthyStatus(t, "u1", "u3", "u4")

	// u3 goes unfit for a whole window inside the cooldown: held back, and
	// said so.
	keepUnfit(t, "u3", 4_000_000, "AutomaticSwap Cooldown naming u3", func() (bool, string) {
		got := automaticCondition(t)
		return strings.HasPrefix(got, "False Cooldown: u3 is unfit (fsync p99 4s over 1s) but the cooldown runs until"), got
	})
	poll.Until(t, 10*time.Second, "a Warning Event Cooldown on VoterPolicy naming u3", func() (bool, string) {
		var evs eventsv1.EventList
		if err := env.Client.List(ctx, &evs); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Regarding.Kind == "VoterPolicy" {
				seen = append(seen, e.Type+" "+e.Reason+": "+e.Note)
				if e.Type == corev1.EventTypeWarning && e.Reason == holdfastv1.SwapReasonCooldown && strings.Contains(e.Note, "u3 is unfit") {
					return true, ""
				}
			}
		}
		return false, strings.Join(seen, "; ")
	})
	// Passes go on seeing it; none starts a swap.
	ctl.afterPasses(t, 3)
	var swaps holdfastv1.VoterSwapList
	if err := env.Client.List(ctx, &swaps); err != nil {
		t.Fatal(err)
	}
	if len(swaps.Items) != 1 {
		for _, s := range swaps.Items {
			t.Errorf("VoterSwap %s (%s, %s out) during the cooldown", s.Name, s.Spec.Origin, s.Spec.Outgoing)
		}
	}
	if h := policy.SwapLeaseHolder(getLease(t)); h != "" {
		t.Errorf("the swap Lease is held by %s during the cooldown", h)
	}
	for _, n := range []string{"u3", "u5"} {
		if node := getNode(t, n); node.Spec.Unschedulable || node.Labels[holdfastv1.LabelDesiredRole] != "" {
			t.Errorf("%s was changed during the cooldown", n)
		}
	}
	if v, _, _ := etcdMembers(t, cli); !slices.Equal(v, []string{"u1", "u3", "u4"}) {
		t.Errorf("voters %v changed during the cooldown", v)
	}
}

// automaticCondition is VoterPolicy's AutomaticSwap condition as
// "<status> <reason>: <message>".
func automaticCondition(t testing.TB) string {
	p := &holdfastv1.VoterPolicy{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: holdfastv1.VoterPolicyName}, p); err != nil {
		t.Fatal(err)
	}
	return describeCond(meta.FindStatusCondition(p.Status.Conditions, holdfastv1.ConditionAutomaticSwap))
}

// lockedBuffer is an io.Writer safe for the controller's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
