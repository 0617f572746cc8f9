//go:build e2e

package voters

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/etcdwatch"
	"github.com/holdfast-io/holdfast/test/poll"
)

// The unfit drill's disk and thresholds: a member disk limited to
// slowWriteIOPS for the node's pods makes every O_DSYNC write of the fsync
// probe wait about 100 ms, twice maxFsyncMillis, which an unthrottled disk
// stays under even on a loaded machine (3-30 ms seen); the peer round trip
// threshold is out of the way.
const (
	slowWriteIOPS    = 10
	maxFsyncMillis   = 50
	maxPeerRTTMillis = 250
	fitnessWindow    = 60
	drillCooldown    = 3600
)

// TestAnUnfitVoterIsSwappedAutomatically: with automatic swaps on (no dry
// run), a voter's member disk is slowed for real (its loop device's writes
// from the node's cgroups limited, Host.SlowDisk): holdfast-node's fsync
// probe measures it, and once the voter
// has been unfit for a whole fitness window the voters role creates an
// automatic swap for it, holdfast-scheduler places the incoming voter (the
// standby), and the swap succeeds: the slow voter an agent, its data moved
// aside, three voters, one cluster ID. Then a second voter's disk is slowed:
// it is judged unfit for a whole window too, but the cooldown holds (the
// VoterPolicy's AutomaticSwap condition says Cooldown, naming it) and no
// second automatic swap is made. A writer puts a key every 50 ms
// throughout: no failed or lost write.
//
// The cooldown is set once the automatic swap exists: it counts from the
// last swap's finish, and the drills before this one finish swaps minutes
// earlier.
func TestAnUnfitVoterIsSwappedAutomatically(t *testing.T) {
	ctx, cli, before, clusterID := openDrill(t)
	leader := voterPolicy(t).Status.Leader
	standby := nonVoter(t, before)
	var slow, second string
	for _, v := range before {
		switch {
		case v == leader:
		case slow == "":
			slow = v
		default:
			second = v
		}
	}
	if slow == "" || second == "" {
		t.Fatalf("voters %v with leader %s: want two followers", before, leader)
	}
	saved := voterPolicy(t).Spec
	t.Cleanup(func() {
		if err := patchPolicy(ctx, map[string]any{"dryRun": saved.DryRun, "cooldownSeconds": saved.CooldownSeconds, "fitness": saved.Fitness}); err != nil {
			t.Errorf("restoring the VoterPolicy: %v", err)
		}
	})
	// A merge patch: cooldownSeconds 0 left out of a typed update would be
	// defaulted (3600).
	if err := patchPolicy(ctx, map[string]any{"dryRun": false, "cooldownSeconds": 0,
		"fitness": map[string]any{"windowSeconds": fitnessWindow, "maxFsyncMillis": maxFsyncMillis, "maxPeerRTTMillis": maxPeerRTTMillis}}); err != nil {
		t.Fatal(err)
	}
	x := etcdwatch.Watch(cli, "/holdfast-writer/unfit-voter/")
	start := time.Now()

	// 1. The slow voter swapped automatically, the standby placed by
	// holdfast-scheduler.
	fitnessBefore := fitnessOf(ctx, slow)
	slowDisk(t, slow)
	t.Logf("%s %s's member disk limited to %d write IOPS (fitness before: %s)", time.Now().UTC().Format("15:04:05.000"), slow, slowWriteIOPS, fitnessBefore)
	var auto *holdfastv1.VoterSwap
	poll.Until(t, 8*time.Minute, "an automatic swap for "+slow, func() (bool, string) {
		swaps := automaticSwaps(ctx)
		if len(swaps) > 0 {
			auto = &swaps[0]
			return true, ""
		}
		return false, fmt.Sprintf("%s fitness %s; %s", slow, fitnessOf(ctx, slow), automaticCondition(ctx))
	})
	decided := time.Since(start)
	t.Logf("%s automatic swap %s created %v after the slowdown: %s -> %q, reason %q", time.Now().UTC().Format("15:04:05.000"), auto.Name,
		decided.Round(time.Second), auto.Spec.Outgoing, auto.Spec.Incoming, auto.Spec.Reason)
	if err := patchPolicy(ctx, map[string]any{"cooldownSeconds": drillCooldown}); err != nil {
		t.Fatal(err)
	}
	if auto.Spec.Outgoing != slow || auto.Spec.Incoming != "" || !strings.Contains(auto.Spec.Reason, "fsync") {
		t.Errorf("automatic swap %s: outgoing %s incoming %q reason %q; want %s, none (holdfast-scheduler places it), an fsync reason",
			auto.Name, auto.Spec.Outgoing, auto.Spec.Incoming, auto.Spec.Reason, slow)
	}
	s := waitPhase(t, auto.Name, holdfastv1.SwapSucceeded, 8*time.Minute, func(step string) { logStep(t, step) })
	t.Logf("automatic swap %s in %v; history:\n%s", s.Status.SwapID, s.Status.FinishedAt.Sub(s.Status.StartedAt.Time).Round(time.Millisecond), history(s))
	if s.Status.Incoming != standby || !strings.Contains(history(s), holdfastv1.SchedulerName+" placed the voter candidate on "+standby) {
		t.Errorf("incoming %q: want %s, placed by %s", s.Status.Incoming, standby, holdfastv1.SchedulerName)
	}
	after := wantSwapped(t, cli, before, slow, standby, clusterID, s)
	h := world.Nodes[slow].Host
	poll.Until(t, time.Minute, slow+" an agent with its data moved aside", func() (bool, string) {
		st := h.ServerState()
		role, _ := h.State.Role()
		return h.DataMovedAside() && st != "active" && h.MemberPID() == 0 && role == holdfastv1.RoleAgent, "server unit " + st + ", role file " + role
	})
	if err := world.WaitVotersHealthy(ctx, 2*time.Minute, after...); err != nil {
		t.Fatal(err)
	}

	// 2. A second voter slowed within the cooldown: judged unfit for a
	// whole window, and held.
	slowDisk(t, second)
	slowedAt := time.Now()
	t.Logf("%s %s's member disk limited to %d write IOPS", slowedAt.UTC().Format("15:04:05.000"), second, slowWriteIOPS)
	poll.Until(t, 6*time.Minute, second+" unfit and held by the cooldown", func() (bool, string) {
		c := automaticCondition(ctx)
		return strings.HasPrefix(c, holdfastv1.SwapReasonCooldown+": "+second+" is unfit"), fmt.Sprintf("%s fitness %s; %s", second, fitnessOf(ctx, second), c)
	})
	t.Logf("%s held by the cooldown %v after its slowdown: %s", second, time.Since(slowedAt).Round(time.Second), automaticCondition(ctx))
	// Held over further passes (the idle pass runs every 2 s).
	heldFrom := time.Now()
	for time.Since(heldFrom) < 20*time.Second {
		if c := automaticCondition(ctx); !strings.HasPrefix(c, holdfastv1.SwapReasonCooldown+": ") {
			t.Errorf("AutomaticSwap left the cooldown: %s", c)
			break
		}
		time.Sleep(2 * time.Second)
	}
	if swaps := automaticSwaps(ctx); len(swaps) != 1 {
		var names []string
		for _, s := range swaps {
			names = append(names, s.Name+" ("+s.Spec.Outgoing+")")
		}
		t.Errorf("automatic swaps within the cooldown: %v, want only %s", names, auto.Name)
	}
	r := x.Check(t)
	t.Logf("drill: %v, %d writes acknowledged, longest write stall %v; automatic swap decided %v after the slowdown",
		time.Since(start).Round(time.Second), r.Acked, r.Longest.Round(time.Millisecond), decided.Round(time.Second))
	if now, _, id := etcdwatch.MembersOf(t, cli); !slices.Equal(now, after) || id != clusterID {
		t.Errorf("after the cooldown held: voters %v cluster %x; want %v, %x", now, id, after, clusterID)
	}
}

// slowDisk limits node's member disk to slowWriteIOPS until the test ends.
func slowDisk(t *testing.T, node string) {
	t.Helper()
	undo, err := world.Nodes[node].Host.SlowDisk(slowWriteIOPS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := undo(); err != nil {
			t.Errorf("lifting %s's disk limit: %v", node, err)
		}
	})
}

// patchPolicy merges spec into VoterPolicy default's spec.
func patchPolicy(ctx context.Context, spec map[string]any) error {
	body, err := json.Marshal(map[string]any{"spec": spec})
	if err != nil {
		return err
	}
	return retry.OnError(retry.DefaultBackoff, func(error) bool { return true }, func() error {
		p := &holdfastv1.VoterPolicy{ObjectMeta: metav1.ObjectMeta{Name: holdfastv1.VoterPolicyName}}
		return world.Client.Patch(ctx, p, client.RawPatch(types.MergePatchType, body))
	})
}

// automaticSwaps are the swaps the voters role made itself.
func automaticSwaps(ctx context.Context) []holdfastv1.VoterSwap {
	var l holdfastv1.VoterSwapList
	if err := listWithRetry(ctx, &l); err != nil {
		return nil
	}
	return slices.DeleteFunc(l.Items, func(s holdfastv1.VoterSwap) bool { return s.Spec.Origin != holdfastv1.SwapAutomatic })
}

// automaticCondition is the VoterPolicy's AutomaticSwap condition as
// "reason: message".
func automaticCondition(ctx context.Context) string {
	p := &holdfastv1.VoterPolicy{}
	if err := world.Client.Get(ctx, client.ObjectKey{Name: holdfastv1.VoterPolicyName}, p); err != nil {
		return err.Error()
	}
	c := meta.FindStatusCondition(p.Status.Conditions, holdfastv1.ConditionAutomaticSwap)
	if c == nil {
		return "no AutomaticSwap condition"
	}
	return c.Reason + ": " + c.Message
}

// fitnessOf is node's last fitness report, short.
func fitnessOf(ctx context.Context, node string) string {
	n, err := getNodeErr(ctx, node)
	if err != nil {
		return err.Error()
	}
	f := &holdfastv1.Fitness{}
	if err := json.Unmarshal([]byte(n.Annotations[holdfastv1.AnnotationFitness]), f); err != nil {
		return "none"
	}
	var rtt int64
	for _, r := range f.PeerRTTMicros {
		rtt = max(rtt, r)
	}
	return fmt.Sprintf("fsync p99 %v (%d samples), slowest peer %v, at %s", time.Duration(f.FsyncP99Micros)*time.Microsecond, f.FsyncSamples,
		time.Duration(rtt)*time.Microsecond, f.At.UTC().Format("15:04:05"))
}
