package voters

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// want is what a case expects of Next: an action kind ("" waits), and
// phrases its message, wait reason or recorded history must contain.
type want struct {
	kind Kind
	node string
	// step, phase and outcome the action records (Then).
	step    holdfastv1.SwapStep
	phase   holdfastv1.SwapPhase
	outcome holdfastv1.SwapPhase
	waitFor string
	says    []string
	check   func(t *testing.T, d Decision)
}

type nextCase struct {
	name  string
	setup func(o *Observation)
	want  want
}

func runNext(t *testing.T, cases []nextCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := fixture()
			tc.setup(o)
			d := Next(o)
			w := tc.want
			if d.Action == nil {
				if w.kind != "" {
					t.Fatalf("Next waits (%s: %s), want action %s", d.WaitReason, d.Waiting, w.kind)
				}
				if w.waitFor != "" && d.WaitReason != w.waitFor {
					t.Fatalf("waits for %s (%s), want %s", d.WaitReason, d.Waiting, w.waitFor)
				}
				for _, s := range w.says {
					if !strings.Contains(d.Waiting, s) {
						t.Errorf("wait message %q does not say %q", d.Waiting, s)
					}
				}
				if w.check != nil {
					w.check(t, d)
				}
				return
			}
			a := d.Action
			if w.kind == "" {
				t.Fatalf("Next acts (%s on %s: %s), want it to wait", a.Kind, a.Node, a.Message)
			}
			if a.Kind != w.kind {
				t.Fatalf("action %s (node %s, %s %s), want %s", a.Kind, a.Node, a.Reason, a.Message, w.kind)
			}
			if w.node != "" && a.Node != w.node {
				t.Errorf("action on node %q, want %q", a.Node, w.node)
			}
			var then Change
			if a.Then != nil {
				then = *a.Then
			}
			if w.step != "" && then.Step != w.step {
				t.Errorf("records step %q, want %q", then.Step, w.step)
			}
			if w.phase != "" && then.Phase != w.phase {
				t.Errorf("records phase %q, want %q", then.Phase, w.phase)
			}
			if w.outcome != "" && then.Outcome != w.outcome {
				t.Errorf("records outcome %q, want %q", then.Outcome, w.outcome)
			}
			text := a.Message + " " + a.Reason
			for _, h := range then.History {
				text += " " + h.Reason + " " + h.Message
			}
			for _, s := range w.says {
				if !strings.Contains(text, s) {
					t.Errorf("action and record %q do not say %q", text, s)
				}
			}
			if w.check != nil {
				w.check(t, d)
			}
		})
	}
}

func TestNextPending(t *testing.T) {
	runNext(t, []nextCase{
		{"no VoterPolicy waits", func(o *Observation) { o.Policy = nil }, want{says: []string{"no VoterPolicy default"}}},
		{"gates hold: the swap starts", func(o *Observation) {
			o.Swaps = append(o.Swaps, swap("s1", "n1", "n4", holdfastv1.SwapManual))
		}, want{kind: Record, phase: holdfastv1.SwapRunning, step: holdfastv1.StepGates, check: func(t *testing.T, d Decision) {
			if id := d.Action.Then.SwapID; id != "20260301T120000Z-n1-n4" {
				t.Errorf("swap ID %q", id)
			}
			if !d.Action.Then.StartedAt || d.Action.Then.Deadline == nil {
				t.Error("no start time or deadline recorded")
			}
		}}},
		{"a voter paused: refused naming it, nothing changed", func(o *Observation) {
			pause(o, "n2")
			o.Swaps = append(o.Swaps, swap("s1", "n1", "n4", holdfastv1.SwapManual))
		}, want{kind: Refuse, phase: holdfastv1.SwapRefused, says: []string{"voter n2 does not answer"}}},
		{"pinned outgoing refused", func(o *Observation) {
			o.Nodes["n1"].Labels[holdfastv1.LabelPinned] = "true"
			o.Swaps = append(o.Swaps, swap("s1", "n1", "n4", holdfastv1.SwapManual))
		}, want{kind: Refuse, says: []string{"n1 is pinned"}}},
		{"pinned incoming refused", func(o *Observation) {
			o.Nodes["n4"].Labels[holdfastv1.LabelPinned] = "true"
			o.Swaps = append(o.Swaps, swap("s1", "n1", "n4", holdfastv1.SwapManual))
		}, want{kind: Refuse, says: []string{"n4 is pinned"}}},
		{"an outgoing voter whose node plugin reports its host not provisioned: refused before anything changes", func(o *Observation) {
			o.Nodes["n1"].Annotations[holdfastv1.AnnotationProvisioned] = "false"
			o.Swaps = append(o.Swaps, swap("s1", "n1", "n4", holdfastv1.SwapManual))
		}, want{kind: Refuse, phase: holdfastv1.SwapRefused, outcome: holdfastv1.SwapRefused, says: []string{
			holdfastv1.SwapReasonGatesFailed, "spec.outgoing: Forbidden: n1: its node plugin reports the host not provisioned",
			"the reason is in the NotProvisioned Event on Node n1"}, check: func(t *testing.T, d Decision) {
			if a := d.Action; a.Node != "" || a.SwapID != "" || a.Then.StartedAt || a.Then.Step != "" {
				t.Errorf("the refusal acts on node %q, swap ID %q, started %v, step %q: it must only record the refusal",
					a.Node, a.SwapID, a.Then.StartedAt, a.Then.Step)
			}
		}}},
		{"unprovisioned incoming refused", func(o *Observation) {
			o.Nodes["n4"].Annotations[holdfastv1.AnnotationProvisioned] = "false"
			o.Swaps = append(o.Swaps, swap("s1", "n1", "n4", holdfastv1.SwapManual))
		}, want{kind: Refuse, says: []string{"n4 is not provisioned"}}},
		{"incoming with a tombstone of this cluster refused", func(o *Observation) {
			o.Nodes["n4"].Annotations[holdfastv1.AnnotationTombstone] = `{"memberID":"99","clusterID":"c1"}`
			o.Swaps = append(o.Swaps, swap("s1", "n1", "n4", holdfastv1.SwapManual))
		}, want{kind: Refuse, says: []string{"n4 carries a tombstone of this cluster"}}},
		{"a tombstone of another cluster does not refuse", func(o *Observation) {
			o.Nodes["n4"].Annotations[holdfastv1.AnnotationTombstone] = `{"memberID":"99","clusterID":"abc"}`
			o.Swaps = append(o.Swaps, swap("s1", "n1", "n4", holdfastv1.SwapManual))
		}, want{kind: Record, phase: holdfastv1.SwapRunning}},
		{"a labelled learner is member but not a voter, and blocks", func(o *Observation) {
			withLearner(o, true)
			o.Nodes["n5"].Labels[holdfastv1.LabelEtcdRole] = "true"
			o.Etcd.Members[3].Name, o.Etcd.Members[3].PeerURLs = "n5", []string{peer("n5")}
			o.Swaps = append(o.Swaps, swap("s1", "n1", "n4", holdfastv1.SwapManual))
		}, want{kind: Refuse, says: []string{"node n5 is labelled node-role.kubernetes.io/etcd but is a learner (member but not a voter)", "learner present"}}},
		{"an automatic swap under dry run is refused", func(o *Observation) {
			o.Policy.Spec.DryRun = new(true)
			o.Swaps = append(o.Swaps, swap("s1", "n1", "", holdfastv1.SwapAutomatic))
		}, want{kind: Refuse, says: []string{"dryRun is on"}}},
		{"dry run carries out a manual swap", func(o *Observation) {
			o.Policy.Spec.DryRun = new(true)
			o.Swaps = append(o.Swaps, swap("s1", "n1", "n4", holdfastv1.SwapManual))
		}, want{kind: Record, phase: holdfastv1.SwapRunning}},
		{"a manual swap is carried out in the cooldown", func(o *Observation) {
			o.Policy.Status.LastSwap = &holdfastv1.SwapOutcome{Name: "s0", Phase: holdfastv1.SwapSucceeded, FinishedAt: &metav1.Time{Time: t0.Add(-time.Minute)}}
			o.Swaps = append(o.Swaps, swap("s1", "n1", "n4", holdfastv1.SwapManual))
		}, want{kind: Record, phase: holdfastv1.SwapRunning}},
		{"the Lease held elsewhere refuses a pending swap", func(o *Observation) {
			holdLease(o, "someone-else", "other", t0)
			o.Swaps = append(o.Swaps, swap("s1", "n1", "n4", holdfastv1.SwapManual))
		}, want{kind: Refuse, says: []string{"held by someone-else"}}},
		{"no incoming named: a candidate pod is created", func(o *Observation) {
			o.Swaps = append(o.Swaps, swap("s1", "n1", "", holdfastv1.SwapManual))
		}, want{kind: CreateCandidate}},
		{"no candidate yet: waits with the scheduler's reasons", func(o *Observation) {
			o.Swaps = append(o.Swaps, swap("s1", "n1", "", holdfastv1.SwapManual))
			p := CandidatePod(&o.Swaps[0], "holdfast-system", "")
			p.CreationTimestamp = metav1.NewTime(t0.Add(-time.Hour))
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
				Message: "0/5 nodes are available: 3 already an etcd member, 2 not provisioned."}}
			o.Candidate = p
		}, want{waitFor: holdfastv1.SwapReasonNoCandidate, says: []string{"2 not provisioned"}}},
		{"an automatic swap with no candidate within the timeout is refused", func(o *Observation) {
			o.Swaps = append(o.Swaps, swap("s1", "n1", "", holdfastv1.SwapAutomatic))
			p := CandidatePod(&o.Swaps[0], "holdfast-system", "")
			p.CreationTimestamp = metav1.NewTime(t0.Add(-time.Hour))
			o.Candidate = p
		}, want{kind: Refuse, says: []string{"no voter candidate within the operation timeout"}}},
		{"the candidate is placed: its node is taken", func(o *Observation) {
			o.Swaps = append(o.Swaps, swap("s1", "n1", "", holdfastv1.SwapManual))
			p := CandidatePod(&o.Swaps[0], "holdfast-system", "")
			p.Spec.NodeName = "n5"
			o.Candidate = p
		}, want{kind: Record, check: func(t *testing.T, d Decision) {
			if d.Action.Then.Incoming != "n5" || d.Action.Then.Phase == holdfastv1.SwapRunning {
				t.Errorf("records %+v, want incoming n5 and still pending", d.Action.Then)
			}
		}}},
		{"the candidate taken: its pod is deleted before the start", func(o *Observation) {
			s := swap("s1", "n1", "", holdfastv1.SwapManual)
			s.Status.Incoming = "n5"
			o.Swaps = append(o.Swaps, s)
			p := CandidatePod(&o.Swaps[0], "holdfast-system", "")
			p.Spec.NodeName = "n5"
			o.Candidate = p
		}, want{kind: DeleteCandidate}},
		{"a chosen candidate is judged by every gate again", func(o *Observation) {
			s := swap("s1", "n1", "", holdfastv1.SwapManual)
			s.Status.Incoming = "n5"
			o.Swaps = append(o.Swaps, s)
			notReady(o.Nodes["n5"])
		}, want{kind: Refuse, says: []string{"n5 is not Ready"}}},
	})
}

func TestNextLease(t *testing.T) {
	runNext(t, []nextCase{
		{"a running swap without the Lease takes it", func(o *Observation) {
			running(o, holdfastv1.StepGates)
			o.Lease = nil
		}, want{kind: AcquireLease, check: func(t *testing.T, d Decision) {
			if d.Action.SwapID != swapID || strings.Join(d.Action.Nodes, ",") != "n1,n4" {
				t.Errorf("acquires %q for %v", d.Action.SwapID, d.Action.Nodes)
			}
		}}},
		{"the Lease taken by someone else mid-swap: wait, never act", func(o *Observation) {
			running(o, holdfastv1.StepRemoveMember)
			holdLease(o, "someone-else", "other-swap", t0.Add(-5*time.Second))
			o.Swaps[0].Status.OutgoingMemberID = HexID(memberID("n1"))
			withVoter(o)
		}, want{waitFor: holdfastv1.SwapReasonLeaseHeldElsewhere, says: []string{"held by someone-else", "never acting"}}},
		{"the Lease held by someone else, expired: taken over for the swap", func(o *Observation) {
			running(o, holdfastv1.StepPromote)
			holdLease(o, "old-pod", swapID, t0.Add(-time.Minute))
		}, want{kind: AcquireLease}},
		{"the Lease this process held for the swap lapsed: taken again, with a warning in the history", func(o *Observation) {
			running(o, holdfastv1.StepPromote)
			holdLease(o, me, swapID, t0.Add(-31*time.Second))
		}, want{kind: AcquireLease, says: []string{holdfastv1.SwapReasonLeaseLapsed, "lapsed at 2026-03-01T11:59:59Z without a renewal"},
			check: func(t *testing.T, d Decision) {
				if d.Action.Then == nil || !d.Action.Then.Warning || len(d.Action.Then.History) != 1 || d.Action.Then.History[0].Step != holdfastv1.StepPromote {
					t.Errorf("change %+v, want one Warning history record under Promote", d.Action.Then)
				}
			}}},
		{"the Lease this process holds for another swap is released first", func(o *Observation) {
			running(o, holdfastv1.StepPromote)
			holdLease(o, me, "other-swap", t0)
		}, want{kind: ReleaseLease}},
		{"no swap in progress: the Lease this process holds is released", func(o *Observation) {
			holdLease(o, me, swapID, t0)
		}, want{kind: ReleaseLease, check: func(t *testing.T, d Decision) {
			if d.Action.SwapID != swapID {
				t.Errorf("release names swap %q, want the Lease's %q (for the audit trail)", d.Action.SwapID, swapID)
			}
		}}},
	})
}

func TestNextGatesAndSnapshot(t *testing.T) {
	runNext(t, []nextCase{
		{"gates hold under the Lease: on to the snapshot", func(o *Observation) { running(o, holdfastv1.StepGates) },
			want{kind: Record, step: holdfastv1.StepSnapshot}},
		{"gates fail under the Lease: released as refused", func(o *Observation) {
			running(o, holdfastv1.StepGates)
			pause(o, "n3")
		}, want{kind: Record, step: holdfastv1.StepRelease, outcome: holdfastv1.SwapRefused, says: []string{"voter n3 does not answer"}}},
		{"snapshot from a voter that stays, not the leader", func(o *Observation) {
			setLeader(o, "n2")
			running(o, holdfastv1.StepSnapshot)
		}, want{kind: Snapshot, node: "n3", step: holdfastv1.StepPromote, check: func(t *testing.T, d Decision) {
			if d.Action.Endpoint != clientURL("n3") {
				t.Errorf("snapshot from %s", d.Action.Endpoint)
			}
		}}},
		{"no snapshot within the operation timeout: abandoned", func(o *Observation) {
			s := running(o, holdfastv1.StepSnapshot)
			s.Status.Deadline = &metav1.Time{Time: t0.Add(-time.Second)}
		}, want{kind: Record, step: holdfastv1.StepRelease, outcome: holdfastv1.SwapAbandoned}},
		{"snapshot recorded: on to the promotion", func(o *Observation) {
			s := running(o, holdfastv1.StepSnapshot)
			s.Status.Snapshot = &holdfastv1.SnapshotRecord{Name: "x", SHA256: "y", SizeBytes: 1, Revision: 1}
		}, want{kind: Record, step: holdfastv1.StepPromote}},
	})
}

// TestASwapGoesOnOnlyFromASnapshotItsControllerVerified: a controller
// that checked the recorded snapshot on its own volume says so before
// going on when it matches; when it is lost or does not match, it takes a
// new one from a voter that stays before any other step, and waits when
// none answers. Release does not need it.
func TestASwapGoesOnOnlyFromASnapshotItsControllerVerified(t *testing.T) {
	recorded := func(o *Observation, step holdfastv1.SwapStep, err string) {
		s := running(o, step)
		s.Status.Snapshot = &holdfastv1.SnapshotRecord{Name: "holdfast-" + swapID + ".db", SHA256: "ab", SizeBytes: 1024, Revision: 7}
		o.SnapshotCheck = &SnapshotCheck{Err: err}
	}
	lost := "recorded snapshot holdfast-" + swapID + ".db: no such file"
	runNext(t, []nextCase{
		{"verified: said so before the step", func(o *Observation) { recorded(o, holdfastv1.StepPromote, "") },
			want{kind: Record, says: []string{"found and verified: 1024 bytes, sha256 ab, revision 7"}, check: func(t *testing.T, d Decision) {
				if d.Action.Then.Step != "" || d.Action.Reason != holdfastv1.SwapReasonSnapshotVerified {
					t.Errorf("a verified snapshot records %s and moves to step %q, want %s and no move", d.Action.Reason, d.Action.Then.Step, holdfastv1.SwapReasonSnapshotVerified)
				}
			}}},
		{"lost before the promotion: a new one from a voter that stays", func(o *Observation) {
			setLeader(o, "n2")
			recorded(o, holdfastv1.StepPromote, lost)
		}, want{kind: Snapshot, node: "n3", says: []string{lost, "a new verified snapshot is taken from n3"}}},
		{"lost before the removal: a new one, never from the outgoing voter", func(o *Observation) {
			setLeader(o, "n3")
			recorded(o, holdfastv1.StepRemoveMember, lost)
			pause(o, "n2")
		}, want{kind: Snapshot, node: "n3"}},
		{"lost and no voter that stays answers: waits", func(o *Observation) {
			recorded(o, holdfastv1.StepRegate, lost)
			pause(o, "n2")
			pause(o, "n3")
		}, want{waitFor: holdfastv1.SwapReasonSnapshotLost, says: []string{lost}}},
	})
	o := fixture()
	recorded(o, holdfastv1.StepRelease, lost)
	if d := Next(o); d.WaitReason == holdfastv1.SwapReasonSnapshotLost || (d.Action != nil && d.Action.Kind == Snapshot) {
		t.Errorf("Release waits for or takes a snapshot: %+v", d)
	}
}

// TestZeroCooldownAndDrainWaitMeanNone: cooldownSeconds 0 swaps an unfit
// voter ten minutes after the last swap (3600 holds it back), and
// workloadDrainWaitSeconds 0 gives the promotion its deadline at the moment
// it is entered, so a job still running on the candidate abandons the swap
// at once. TestZeroCooldownAndDrainWaitRoundTrip holds that the apiserver
// keeps the 0s.
func TestZeroCooldownAndDrainWaitMeanNone(t *testing.T) {
	zero := func(o *Observation) {
		o.Policy.Spec.CooldownSeconds, o.Policy.Spec.WorkloadDrainWaitSeconds = new(int32(0)), new(int32(0))
	}
	afterASwap := func(o *Observation) {
		fitness(o.Nodes["n2"], 40_000, t0.Add(-time.Minute))
		o.UnfitSince["n2"] = t0.Add(-11 * time.Minute)
		o.Policy.Status.LastSwap = &holdfastv1.SwapOutcome{Name: "s0", Phase: holdfastv1.SwapSucceeded, FinishedAt: &metav1.Time{Time: t0.Add(-10 * time.Minute)}}
	}
	promotionAfter := func(want time.Duration) func(t *testing.T, d Decision) {
		return func(t *testing.T, d Decision) {
			if d.Action.Then == nil || d.Action.Then.Deadline == nil || d.Action.Then.Deadline.Sub(t0) != want {
				t.Errorf("the promotion's deadline: %+v, want %v after it is entered", d.Action.Then, want)
			}
		}
	}
	snapshot := func(o *Observation) {
		setLeader(o, "n2")
		running(o, holdfastv1.StepSnapshot)
	}
	runNext(t, []nextCase{
		{"cooldown 0: an unfit voter is swapped ten minutes after the last swap", func(o *Observation) {
			zero(o)
			afterASwap(o)
		}, want{kind: CreateSwap, check: func(t *testing.T, d Decision) {
			if d.Action.Outgoing != "n2" {
				t.Errorf("swaps out %s, want n2", d.Action.Outgoing)
			}
		}}},
		{"cooldown 3600: the same voter waits", afterASwap, want{waitFor: holdfastv1.SwapReasonCooldown}},
		{"drain wait 0: the promotion's deadline is its start", func(o *Observation) {
			zero(o)
			snapshot(o)
		}, want{kind: Snapshot, step: holdfastv1.StepPromote, check: promotionAfter(0)}},
		{"drain wait 900: fifteen minutes", snapshot, want{kind: Snapshot, step: holdfastv1.StepPromote, check: promotionAfter(15 * time.Minute)}},
		{"drain wait 0: a job on the candidate abandons the swap at once", func(o *Observation) {
			zero(o)
			snapshot(o)
			d := Next(o)
			s := &o.Swaps[len(o.Swaps)-1]
			s.Status.Step, s.Status.Deadline = holdfastv1.StepPromote, &metav1.Time{Time: *d.Action.Then.Deadline}
			s.Status.Snapshot = &holdfastv1.SnapshotRecord{Name: "x", SHA256: "y", SizeBytes: 1, Revision: 1}
			cordon(o.Nodes["n4"], swapID)
			o.Pods["n4"] = []corev1.Pod{pod("job-1", func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyNever })}
		}, want{kind: Record, step: holdfastv1.StepRelease, outcome: holdfastv1.SwapAbandoned, says: []string{"never cuts a job"}}},
	})
}
