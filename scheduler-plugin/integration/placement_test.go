//go:build integration

package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/plugintest"
)

const device = "holdfast.io/device"

func TestFirstBindingLandsOnThePrimaryAndIsRecorded(t *testing.T) {
	p := newPlant(t)
	p.node("fb-primary", label(device, "boiler-1"))
	p.node("fb-primary-down", label(device, "boiler-1"), notReady)
	p.node("fb-standby")
	p.node("fb-other")
	p.unit(plugintest.MakeUnit("", "boiler-1").Targets("fb-standby").Obj(), &holdfastv1.RuntimeBinding{Epoch: 1, Origin: holdfastv1.OriginInitial})
	startHoldfastScheduler(t)

	// Every write to the pod until it is bound: kube-scheduler patches a
	// pod's nominatedNodeName before a PreBind that has work, and
	// UnitPlacement records at Bind so that a runtime costs no such write.
	watch, err := p.cs.CoreV1().Pods(p.ns).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	before := time.Now().Add(-time.Second)
	pod := p.runtimePod("boiler-1", 1, "")
	if got := p.boundNode(pod.Name); got != "fb-primary" {
		t.Fatalf("first binding landed on %s, want the Ready primary fb-primary", got)
	}
	for seen := false; !seen; {
		select {
		case ev := <-watch.ResultChan():
			w, ok := ev.Object.(*corev1.Pod)
			if !ok || w.Name != pod.Name {
				continue
			}
			if w.Status.NominatedNodeName != "" {
				t.Errorf("the pod was nominated to %s before it was bound: one more apiserver write per runtime", w.Status.NominatedNodeName)
			}
			seen = w.Spec.NodeName != ""
		case <-time.After(waitTimeout):
			t.Fatal("the pod's binding never reached the watch")
		}
	}
	b := p.getUnit("boiler-1").Status.RuntimeBinding
	if b.Node != "fb-primary" || b.Pod != pod.Name || b.Epoch != 1 || b.BoundAt == nil || b.BoundAt.Time.Before(before.Truncate(time.Second)) {
		t.Errorf("binding = %+v, want node fb-primary, pod %s, epoch 1 and boundAt set", b, pod.Name)
	}
	if len(b.UnsettledRebinds) != 0 {
		t.Errorf("a first binding spent the ledger: %v", b.UnsettledRebinds)
	}
}

func TestRebindLandsOnlyOnAnEligibleStandby(t *testing.T) {
	p := newPlant(t)
	p.node("rb-primary", label(device, "boiler-1")) // the node being left
	p.node("rb-standby-cordoned", cordoned)
	p.node("rb-standby-down", notReady)
	p.node("rb-standby-tried")
	p.node("rb-standby-ok")
	p.node("rb-other") // Ready, idle, not a target
	p.unit(plugintest.MakeUnit("", "boiler-1").
		Targets("rb-standby-cordoned", "rb-standby-down", "rb-standby-tried", "rb-standby-ok").Obj(),
		&holdfastv1.RuntimeBinding{Epoch: 2, Origin: holdfastv1.OriginAutomatic, PreviousNode: "rb-primary", UnsettledRebinds: []string{"rb-standby-tried"}})
	startHoldfastScheduler(t)

	pod := p.runtimePod("boiler-1", 2, "")
	if got := p.boundNode(pod.Name); got != "rb-standby-ok" {
		t.Fatalf("re-bind landed on %s, want rb-standby-ok, the only Ready, uncordoned, untried target", got)
	}
	b := p.getUnit("boiler-1").Status.RuntimeBinding
	if b.Node != "rb-standby-ok" || b.Pod != pod.Name {
		t.Errorf("binding = %+v, want the standby and the pod recorded", b)
	}
	if want := []string{"rb-standby-tried"}; !slices.Equal(b.UnsettledRebinds, want) {
		t.Errorf("unsettledRebinds = %v, want %v: the ledger is the controller's, the scheduler writes only the node", b.UnsettledRebinds, want)
	}
}

// TestRebindLandsOnATargetLabelledLater: a re-bind pod refused because the
// unit has no target yet lands once a node is labelled as one. The
// scheduler's own requeue for the label may come before UnitPlacement's node
// index holds it; the index then requeues the pod itself.
func TestRebindLandsOnATargetLabelledLater(t *testing.T) {
	p := newPlant(t)
	p.node("tl-primary", label(device, "boiler-1")) // the node being left
	p.node("tl-standby")
	p.unit(plugintest.MakeUnit("", "boiler-1").TargetSelector(&metav1.LabelSelector{MatchLabels: map[string]string{"pool": "tl-spare"}}).Obj(),
		&holdfastv1.RuntimeBinding{Epoch: 2, Origin: holdfastv1.OriginAutomatic, PreviousNode: "tl-primary"})
	startHoldfastScheduler(t)

	pod := p.runtimePod("boiler-1", 2, "")
	p.waitEvent(pod.Name, "FailedScheduling", "1 the node being left", "not a failover target of unit boiler-1")
	if node := p.nodeOf(pod.Name); node != "" {
		t.Fatalf("the pod was bound to %s before any target existed", node)
	}
	p.relabel("tl-standby", "pool", "tl-spare")
	if got := p.boundNode(pod.Name); got != "tl-standby" {
		t.Fatalf("re-bind landed on %s, want tl-standby, labelled a target after the pod was refused", got)
	}
}

// TestL5AllStandbysTriedStaysPendingAndExplainsEachNode: with every standby
// tried, the automatic re-bind's pod is placed nowhere, and the scheduler's
// own FailedScheduling event says node by node why (docs/design.md §3 L5, §4). A
// person's failover still goes through, and the stale pod is then refused
// for its epoch.
func TestL5AllStandbysTriedStaysPendingAndExplainsEachNode(t *testing.T) {
	p := newPlant(t)
	p.node("l5-primary", label(device, "boiler-1"))
	p.node("l5-standby-1")
	p.node("l5-standby-2")
	p.node("l5-other")
	// A workload on l5-standby-1: left to the scores, a runtime would go to
	// the idle l5-standby-2, so only the manual pod's node affinity takes it
	// to l5-standby-1 below.
	p.placedPod("l5-workload", "l5-standby-1", nil)
	p.unit(plugintest.MakeUnit("", "boiler-1").Targets("l5-standby-1", "l5-standby-2").Obj(),
		&holdfastv1.RuntimeBinding{Epoch: 4, Origin: holdfastv1.OriginAutomatic, PreviousNode: "l5-primary", UnsettledRebinds: []string{"l5-standby-1", "l5-standby-2"}})
	startHoldfastScheduler(t)

	stuck := p.runtimePod("boiler-1", 4, "")
	msg := p.waitEvent(stuck.Name, "FailedScheduling",
		"2 already tried in this failover", "1 the node being left", "not a failover target of unit boiler-1")
	t.Logf("FailedScheduling: %s", msg)
	if strings.Contains(msg, "not found") {
		t.Errorf("the event carries a PostFilter error: %q", msg)
	}
	if node := p.nodeOf(stuck.Name); node != "" {
		t.Fatalf("the pod of an exhausted failover was bound to %s", node)
	}

	// A person fails over to l5-standby-1: the controller authorises a
	// Manual epoch 5 (the ledger emptied) and pins its pod to the target
	// with a required node affinity.
	p.authorise("boiler-1", holdfastv1.RuntimeBinding{Epoch: 5, Origin: holdfastv1.OriginManual, PreviousNode: "l5-primary", RequestID: "r-1"})
	manual := p.manualPod("boiler-1", 5, "l5-standby-1")
	if got := p.boundNode(manual.Name); got != "l5-standby-1" {
		t.Fatalf("the manual failover landed on %s, want l5-standby-1", got)
	}
	// The Unit change requeued the stale pod, which is now refused outright.
	p.waitEvent(stuck.Name, "FailedScheduling", "epoch 4 is not the authorised epoch 5 of unit boiler-1")
	if node := p.nodeOf(stuck.Name); node != "" {
		t.Errorf("the stale epoch-4 pod was bound to %s", node)
	}
}

// TestL7TwoSchedulersRacingOnTwoPodsOfOneEpochBindExactlyOne: two
// holdfast-scheduler instances see two pods of one epoch at once; however
// they interleave, exactly one pod binds, and the Unit's binding names that
// pod and its node (docs/design.md §3 L7, §4).
func TestL7TwoSchedulersRacingOnTwoPodsOfOneEpochBindExactlyOne(t *testing.T) {
	p := newPlant(t)
	const rounds = 6
	for i := range 3 {
		p.node("race-primary-"+string(rune('a'+i)), label(device, "press"))
	}
	startHoldfastScheduler(t)
	startHoldfastScheduler(t)

	for round := range rounds {
		unit := "press-" + string(rune('a'+round))
		u := plugintest.MakeUnit("", unit).Mode(holdfastv1.Autonomy).Obj()
		u.Spec.NodeSelector = map[string]string{device: "press"}
		u.Spec.Availability.Colocation = holdfastv1.ColocationWarn
		// Runtimes take host ports: each round's pair its own, so the
		// winners of earlier rounds leave the primaries open.
		rt := &u.Spec.Runtime
		rt.HealthPort, rt.LeasePort, rt.MetricsPort = int32(20000+3*round), int32(20001+3*round), int32(20002+3*round)
		// No pod name in the binding: two pods of epoch 1 may both
		// claim it, and only Bind's conditioned write decides.
		p.unit(u, nil)
		p.authoriseAnyPod(unit, holdfastv1.RuntimeBinding{Epoch: 1, Origin: holdfastv1.OriginInitial})

		names := []string{unit + "-runtime-e1-a", unit + "-runtime-e1-b"}
		var created sync.WaitGroup
		for _, name := range names {
			created.Add(1)
			go func() {
				defer created.Done()
				p.runtimePod(unit, 1, name)
			}()
		}
		created.Wait()

		var winner string
		err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
			b := p.getUnit(unit).Status.RuntimeBinding
			winner = b.Pod
			return b.Node != "" && p.nodeOf(b.Pod) == b.Node, nil
		})
		if err != nil {
			t.Fatalf("round %d: no pod of epoch 1 bound: %v", round, err)
		}
		loser := names[0]
		if winner == names[0] {
			loser = names[1]
		}
		// The loser is refused by whichever scheduler tries it, and stays
		// unbound.
		refusal := "epoch 1 of unit " + unit + " is already bound to node"
		err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
			if node := p.nodeOf(loser); node != "" {
				return false, fmt.Errorf("both pods of epoch 1 bound: %s on %s and %s on %s", winner, p.nodeOf(winner), loser, node)
			}
			return slices.ContainsFunc(p.eventMessages(loser, "FailedScheduling"), func(m string) bool { return strings.Contains(m, refusal) }), nil
		})
		if err != nil {
			t.Fatalf("round %d: %v; events of %s: %q", round, err, loser, p.eventMessages(loser, ""))
		}
		b := p.getUnit(unit).Status.RuntimeBinding
		if b.Pod != winner || b.Node != p.nodeOf(winner) || b.Epoch != 1 {
			t.Fatalf("round %d: binding %+v does not name the bound pod %s on %s", round, b, winner, p.nodeOf(winner))
		}
	}
}

func TestColocationRefuse(t *testing.T) {
	p := newPlant(t)
	p.node("cr-primary", label(device, "boiler-1"))
	p.node("cr-standby-busy")
	p.node("cr-standby-free")
	p.placedPod("mixer-2-runtime-e3", "cr-standby-busy", map[string]string{holdfastv1.LabelUnit: "mixer-2", holdfastv1.LabelEpoch: "3"})
	p.unit(plugintest.MakeUnit("", "boiler-1").Colocation(holdfastv1.ColocationRefuse).
		Targets("cr-standby-busy", "cr-standby-free").Obj(),
		&holdfastv1.RuntimeBinding{Epoch: 2, Origin: holdfastv1.OriginAutomatic, PreviousNode: "cr-primary"})
	startHoldfastScheduler(t)

	first := p.runtimePod("boiler-1", 2, "")
	if got := p.boundNode(first.Name); got != "cr-standby-free" {
		t.Fatalf("re-bind under Refuse landed on %s, want cr-standby-free", got)
	}

	// Now the only untried standby hosts mixer-2's runtime: nothing fits.
	p.authorise("boiler-1", holdfastv1.RuntimeBinding{Epoch: 3, Origin: holdfastv1.OriginAutomatic, PreviousNode: "cr-standby-free", UnsettledRebinds: []string{"cr-standby-free"}})
	second := p.runtimePod("boiler-1", 3, "")
	msg := p.waitEvent(second.Name, "FailedScheduling", "1 hosts the runtime of unit mixer-2", "1 the node being left")
	t.Logf("FailedScheduling: %s", msg)
	if node := p.nodeOf(second.Name); node != "" {
		t.Errorf("the runtime was placed beside mixer-2's on %s under Refuse", node)
	}
}

func TestColocationWarn(t *testing.T) {
	p := newPlant(t)
	p.node("cw-primary", label(device, "boiler-1"))
	p.node("cw-standby-busy")
	p.node("cw-standby-free")
	p.placedPod("mixer-2-runtime-e3", "cw-standby-busy", map[string]string{holdfastv1.LabelUnit: "mixer-2", holdfastv1.LabelEpoch: "3"})
	p.unit(plugintest.MakeUnit("", "boiler-1").Colocation(holdfastv1.ColocationWarn).
		Targets("cw-standby-busy", "cw-standby-free").Obj(),
		&holdfastv1.RuntimeBinding{Epoch: 2, Origin: holdfastv1.OriginAutomatic, PreviousNode: "cw-primary"})
	startHoldfastScheduler(t)

	first := p.runtimePod("boiler-1", 2, "")
	if got := p.boundNode(first.Name); got != "cw-standby-free" {
		t.Fatalf("under Warn the runtime landed on %s, want the free standby cw-standby-free", got)
	}
	if msgs := p.eventMessages("boiler-1", standbyColocated); len(msgs) != 0 {
		t.Errorf("a Warning was recorded for a runtime placed alone: %q", msgs)
	}

	// Only the busy standby is left: the runtime goes there, with a Warning
	// on the Unit.
	p.authorise("boiler-1", holdfastv1.RuntimeBinding{Epoch: 3, Origin: holdfastv1.OriginAutomatic, PreviousNode: "cw-standby-free", UnsettledRebinds: []string{"cw-standby-free"}})
	second := p.runtimePod("boiler-1", 3, "")
	if got := p.boundNode(second.Name); got != "cw-standby-busy" {
		t.Fatalf("under Warn the runtime landed on %s, want cw-standby-busy", got)
	}
	msg := p.waitEvent("boiler-1", standbyColocated, "Runtime pod boiler-1-runtime-e3 placed on node cw-standby-busy beside the runtime of unit mixer-2")
	t.Logf("Warning on the Unit: %s", msg)
}

const standbyColocated = "RuntimeColocated"

// TestVoterCandidateLandsOnTheFittestEligibleNode: the candidate goes to the
// fittest node that may become a voter, never to a member, a pinned node or
// a node with a tombstone of this cluster, however fit; with none left it
// stays Pending and the event explains every node.
func TestVoterCandidateLandsOnTheFittestEligibleNode(t *testing.T) {
	const clusterID = "cdf818194e3a8c32"
	p := newPlant(t)
	fit := func(fsync, rtt float64) func(*corev1.Node) {
		return annotate(holdfastv1.AnnotationFitness, fitnessJSON(fsync, rtt, time.Now()))
	}
	eligible := []func(*corev1.Node){label(holdfastv1.LabelVoterEligible, "true"), annotate(holdfastv1.AnnotationProvisioned, "true")}
	with := func(extra ...func(*corev1.Node)) []func(*corev1.Node) {
		return append(slices.Clone(eligible), extra...)
	}
	p.node("vc-member", with(fit(0.5, 0.5))...)
	p.node("vc-pinned", with(fit(0.5, 0.5), label(holdfastv1.LabelPinned, "true"))...)
	p.node("vc-tombstone", with(fit(0.5, 0.5), annotate(holdfastv1.AnnotationTombstone, `{"memberID":"8e9e05c52164694d","clusterID":"`+clusterID+`"}`))...)
	p.node("vc-unprovisioned", label(holdfastv1.LabelVoterEligible, "true"), fit(0.5, 0.5))
	p.node("vc-fit", with(fit(2, 5))...)
	p.node("vc-unfit", with(fit(9, 45))...)
	p.node("vc-ineligible", fit(0.5, 0.5))

	policy := plugintest.MakePolicy(clusterID).Obj()
	if err := env.Client.Create(context.Background(), policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), policy) })
	policy.Status = holdfastv1.VoterPolicyStatus{Voters: []string{"vc-member"}, ClusterID: clusterID}
	if err := env.Client.Status().Update(context.Background(), policy); err != nil {
		t.Fatal(err)
	}
	sched := startHoldfastScheduler(t)
	// Earlier tests of the package share the process's registry.
	codes := []string{"etcd_member", "pinned", "tombstone", "not_provisioned", "not_voter_eligible"}
	refusals := func() map[string]float64 {
		out := map[string]float64{}
		for _, c := range codes {
			out[c] = sample(t, "holdfast_scheduler_filter_refusals_total", map[string]string{"plugin": "VoterEligibility", "reason": c})
		}
		return out
	}
	before := refusals()

	first := p.pod(voterCandidate("voter-candidate-1"))
	if got := p.boundNode(first.Name); got != "vc-fit" {
		t.Fatalf("the candidate landed on %s, want vc-fit, the fittest node that may become a voter", got)
	}

	// The controller took vc-fit in and the VoterPolicy says so; the next
	// candidate goes to the only one left.
	policy = getPolicy(t)
	policy.Status.Voters = append(policy.Status.Voters, "vc-fit")
	if err := env.Client.Status().Update(context.Background(), policy); err != nil {
		t.Fatal(err)
	}
	sched.waitPluginsSee(t, policy)
	second := p.pod(voterCandidate("voter-candidate-2"))
	if got := p.boundNode(second.Name); got != "vc-unfit" {
		t.Fatalf("the second candidate landed on %s, want vc-unfit", got)
	}

	policy = getPolicy(t)
	policy.Status.Voters = append(policy.Status.Voters, "vc-unfit")
	if err := env.Client.Status().Update(context.Background(), policy); err != nil {
		t.Fatal(err)
	}
	sched.waitPluginsSee(t, policy)
	third := p.pod(voterCandidate("voter-candidate-3"))
	msg := p.waitEvent(third.Name, "FailedScheduling",
		"3 already an etcd member", "1 pinned", "1 carries a tombstone of this cluster", "1 not provisioned", "1 not voter-eligible")
	t.Logf("FailedScheduling: %s", msg)
	// Each refusal the event explains is counted under its reason code.
	after := refusals()
	for _, c := range codes {
		if after[c] <= before[c] {
			t.Errorf("holdfast_scheduler_filter_refusals_total{plugin=VoterEligibility,reason=%s} did not rise (%v)", c, after[c])
		}
	}
	if node := p.nodeOf(third.Name); node != "" {
		t.Fatalf("a candidate was placed on %s with no eligible node left", node)
	}

	// vc-unfit's member is removed again (a rolled-back promotion): the
	// VoterPolicy change alone requeues the waiting candidate.
	policy = getPolicy(t)
	policy.Status.Voters = slices.DeleteFunc(policy.Status.Voters, func(n string) bool { return n == "vc-unfit" })
	if err := env.Client.Status().Update(context.Background(), policy); err != nil {
		t.Fatal(err)
	}
	if got := p.boundNode(third.Name); got != "vc-unfit" {
		t.Fatalf("the waiting candidate landed on %s, want vc-unfit", got)
	}
}

// The Unit record is an update of a cached Unit, and the cache holds no
// managedFields: the update must leave every field manager's ownership as
// it was (an operator's server-side apply, the creator's spec), or the next
// apply would no longer see its own fields. (A status update keeps the
// Unit's metadata whatever the request carries: even a request that resets
// managedFields leaves them, which this test holds too.)
func TestTheRecordKeepsEveryFieldManagersOwnership(t *testing.T) {
	p := newPlant(t)
	p.node("mf-primary", label(device, "boiler-1"))
	p.unit(plugintest.MakeUnit("", "boiler-1").Targets("mf-standby").Obj(), &holdfastv1.RuntimeBinding{Epoch: 1, Origin: holdfastv1.OriginInitial})
	// A plant operator's apply owns one annotation of the Unit.
	apply := &unstructured.Unstructured{}
	apply.SetGroupVersionKind(holdfastv1.GroupVersion.WithKind("Unit"))
	apply.SetNamespace(p.ns)
	apply.SetName("boiler-1")
	apply.SetAnnotations(map[string]string{"plant.example/line": "3"})
	if err := env.Client.Patch(context.Background(), apply, client.Apply, client.FieldOwner("plant-operator")); err != nil {
		t.Fatal(err)
	}
	owners := func() map[string]string {
		out := map[string]string{}
		for _, e := range p.getUnit("boiler-1").ManagedFields {
			if e.Manager == "plant-operator" || e.Subresource == "" {
				out[e.Manager+"/"+string(e.Operation)] = string(e.FieldsV1.Raw)
			}
		}
		return out
	}
	before := owners()
	if _, ok := before["plant-operator/Apply"]; !ok {
		t.Fatalf("the operator's apply is not among the Unit's managers: %v", before)
	}
	sched := startHoldfastScheduler(t)
	pod := p.runtimePod("boiler-1", 1, "")
	if got := p.boundNode(pod.Name); got != "mf-primary" {
		t.Fatalf("bound to %q, want mf-primary", got)
	}
	if b := p.getUnit("boiler-1").Status.RuntimeBinding; b.Node != "mf-primary" {
		t.Fatalf("binding = %+v, want the record of node mf-primary", b)
	}
	if after := owners(); !maps.Equal(before, after) {
		t.Errorf("the record changed the spec and metadata owners:\nbefore %v\nafter  %v", before, after)
	}

	// And the plugins' own cache holds the Unit without them.
	var cached holdfastv1.Unit
	if err := sched.pluginClients(t, &holdfastv1.Unit{}).Cached.Get(context.Background(), client.ObjectKey{Namespace: p.ns, Name: "boiler-1"}, &cached); err != nil {
		t.Fatal(err)
	}
	if len(cached.ManagedFields) != 0 {
		t.Errorf("the plugins' cache holds %d managedFields entries of unit boiler-1, want none", len(cached.ManagedFields))
	}
}
