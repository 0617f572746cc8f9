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

func TestNextPromote(t *testing.T) {
	started := t0.Add(-time.Minute)
	promoteDone := func(o *Observation) {
		setStep(o.Nodes["n4"], holdfastv1.RoleServer, swapID, holdfastv1.RoleStepPromote)
		setReport(o.Nodes["n4"], swapID, holdfastv1.RoleStepPromote, holdfastv1.ActuatorDone, &started, started)
	}
	// votes is a swap whose candidate n4 was promoted (recorded), its
	// Node labelled etcd, cordoned.
	votes := func(o *Observation) *holdfastv1.VoterSwap {
		s := running(o, holdfastv1.StepPromote)
		s.Status.IncomingMemberID = HexID(memberID("n4"))
		s.Status.History = append(s.Status.History, rec(holdfastv1.StepPromote, holdfastv1.SwapReasonPromoted, holdfastv1.SwapReasonPromoted, "promoted"))
		cordon(o.Nodes["n4"], swapID)
		withVoter(o)
		promoteDone(o)
		o.Nodes["n4"].Labels[holdfastv1.LabelEtcdRole] = "true"
		return s
	}
	runNext(t, []nextCase{
		{"the candidate is cordoned first", func(o *Observation) { running(o, holdfastv1.StepPromote) },
			want{kind: Cordon, node: "n4", check: func(t *testing.T, d Decision) {
				if d.Action.SwapID != swapID {
					t.Errorf("cordons with swap %q", d.Action.SwapID)
				}
			}}},
		{"workload pods are waited for", func(o *Observation) {
			running(o, holdfastv1.StepPromote)
			cordon(o.Nodes["n4"], swapID)
			o.Pods["n4"] = []corev1.Pod{pod("job-1", func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyNever }),
				pod("kiln-1-runtime-e3", func(p *corev1.Pod) { p.Labels = map[string]string{holdfastv1.LabelUnit: "kiln-1"} })}
		}, want{waitFor: holdfastv1.SwapReasonWorkloadPodsRunning, says: []string{"apps/job-1", "apps/kiln-1-runtime-e3"}}},
		{"workload pods past the drain wait: abandoned (uncordoned on release, no cooldown)", func(o *Observation) {
			s := running(o, holdfastv1.StepPromote)
			s.Status.Deadline = &metav1.Time{Time: t0}
			cordon(o.Nodes["n4"], swapID)
			o.Pods["n4"] = []corev1.Pod{pod("job-1", func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyOnFailure })}
		}, want{kind: Record, step: holdfastv1.StepRelease, outcome: holdfastv1.SwapAbandoned, says: []string{"never cuts a job"}}},
		{"other pods are evicted; DaemonSet, mirror and finished pods stay", func(o *Observation) {
			running(o, holdfastv1.StepPromote)
			cordon(o.Nodes["n4"], swapID)
			o.Pods["n4"] = []corev1.Pod{
				pod("web-1", nil),
				pod("ds-1", func(p *corev1.Pod) {
					p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "ds", Controller: new(true)}}
				}),
				pod("static-1", func(p *corev1.Pod) { p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"} }),
				pod("done-1", func(p *corev1.Pod) {
					p.Status.Phase = corev1.PodSucceeded
					p.Spec.RestartPolicy = corev1.RestartPolicyNever
				}),
			}
		}, want{kind: Evict, node: "n4", check: func(t *testing.T, d Decision) {
			if len(d.Action.Pods) != 1 || d.Action.Pods[0].Name != "web-1" {
				t.Errorf("evicts %v, want only apps/web-1", d.Action.Pods)
			}
		}}},
		{"drained: added as a learner at its peer URL", func(o *Observation) {
			running(o, holdfastv1.StepPromote)
			cordon(o.Nodes["n4"], swapID)
		}, want{kind: AddLearner, node: "n4", check: func(t *testing.T, d Decision) {
			if d.Action.PeerURL != peer("n4") || len(d.Action.Endpoints) != 3 {
				t.Errorf("adds %s through %v", d.Action.PeerURL, d.Action.Endpoints)
			}
			if want := t0.Add(15 * time.Minute); d.Action.Then.Deadline == nil || !d.Action.Then.Deadline.Equal(want) {
				t.Errorf("deadline %v, want learner stall + operation timeout %v", d.Action.Then.Deadline, want)
			}
		}}},
		{"the learner is added to a healthy cluster only", func(o *Observation) {
			running(o, holdfastv1.StepPromote)
			cordon(o.Nodes["n4"], swapID)
			pause(o, "n2")
		}, want{waitFor: "EtcdUnhealthy", says: []string{"voter n2 does not answer"}}},
		{"restart after the learner was added: its ID is adopted from the member list", func(o *Observation) {
			running(o, holdfastv1.StepPromote)
			cordon(o.Nodes["n4"], swapID)
			withLearner(o, false)
		}, want{kind: Record, check: func(t *testing.T, d Decision) {
			if d.Action.Then.IncomingMember != HexID(memberID("n4")) {
				t.Errorf("adopts %q", d.Action.Then.IncomingMember)
			}
		}}},
		{"a voter at the candidate's peer URL before any learner is recorded: rolled back, never adopted", func(o *Observation) {
			running(o, holdfastv1.StepPromote)
			cordon(o.Nodes["n4"], swapID)
			withVoter(o)
			unstarted(o, "n4")
		}, want{kind: Record, step: holdfastv1.StepRollback, says: []string{holdfastv1.SwapReasonMemberNotLearner, "is a voter, not a learner, and has not started"}}},
		{"the recorded member votes before its server was asked to start: rolled back", func(o *Observation) {
			s := running(o, holdfastv1.StepPromote)
			s.Status.IncomingMemberID = HexID(memberID("n4"))
			cordon(o.Nodes["n4"], swapID)
			withVoter(o)
		}, want{kind: Record, step: holdfastv1.StepRollback, says: []string{holdfastv1.SwapReasonMemberNotLearner, "was never asked to start its server"}}},
		{"the recorded member votes unstarted though its server was asked to start: rolled back", func(o *Observation) {
			s := running(o, holdfastv1.StepPromote)
			s.Status.IncomingMemberID = HexID(memberID("n4"))
			cordon(o.Nodes["n4"], swapID)
			withVoter(o)
			unstarted(o, "n4")
			setStep(o.Nodes["n4"], holdfastv1.RoleServer, swapID, holdfastv1.RoleStepPromote)
		}, want{kind: Record, step: holdfastv1.StepRollback, says: []string{holdfastv1.SwapReasonMemberNotLearner}}},
		{"the learner gets its role step with every member to join", func(o *Observation) {
			s := running(o, holdfastv1.StepPromote)
			s.Status.IncomingMemberID = HexID(memberID("n4"))
			cordon(o.Nodes["n4"], swapID)
			withLearner(o, false)
		}, want{kind: SetRoleStep, node: "n4", check: func(t *testing.T, d Decision) {
			a := d.Action
			if a.RoleStep != holdfastv1.RoleStepPromote {
				t.Errorf("sets %s", a.RoleStep)
			}
			want := "n1=" + peer("n1") + ",n2=" + peer("n2") + ",n3=" + peer("n3") + ",n4=" + peer("n4")
			if a.Join != want {
				t.Errorf("join %q, want %q", a.Join, want)
			}
			if _, errs := holdfastv1.ParseRoleJoin(a.Join); len(errs) > 0 {
				t.Errorf("join does not parse: %v", errs)
			}
		}}},
		{"waiting for the node plugin to start the server", func(o *Observation) {
			s := running(o, holdfastv1.StepPromote)
			s.Status.IncomingMemberID = HexID(memberID("n4"))
			cordon(o.Nodes["n4"], swapID)
			withLearner(o, false)
			setStep(o.Nodes["n4"], holdfastv1.RoleServer, swapID, holdfastv1.RoleStepPromote)
			setReport(o.Nodes["n4"], swapID, holdfastv1.RoleStepPromote, holdfastv1.ActuatorFailed, nil, t0)
		}, want{waitFor: holdfastv1.SwapReasonWaitingForNodePlugin, says: []string{"promote failed"}}},
		{"the server started: the learner is promoted (retried until etcd accepts)", func(o *Observation) {
			s := running(o, holdfastv1.StepPromote)
			s.Status.IncomingMemberID = HexID(memberID("n4"))
			cordon(o.Nodes["n4"], swapID)
			withLearner(o, true)
			promoteDone(o)
		}, want{kind: PromoteMember, node: "n4", check: func(t *testing.T, d Decision) {
			if d.Action.Member != memberID("n4") {
				t.Errorf("promotes %x", d.Action.Member)
			}
			if dl := d.Action.Then.Deadline; dl == nil || !dl.Equal(t0.Add(10*time.Minute)) {
				t.Errorf("the promotion sets the Ready deadline %v, want the operation timeout (10m in the fixture) from now", dl)
			}
		}}},
		{"not a voter by the learner stall time plus the operation timeout: rolled back", func(o *Observation) {
			s := running(o, holdfastv1.StepPromote)
			s.Status.IncomingMemberID = HexID(memberID("n4"))
			s.Status.Deadline = &metav1.Time{Time: t0.Add(-time.Second)}
			cordon(o.Nodes["n4"], swapID)
			withLearner(o, false)
			promoteDone(o)
		}, want{kind: Record, step: holdfastv1.StepRollback, says: []string{"not a voter"}}},
		{"a voter: its Node is labelled etcd", func(o *Observation) {
			s := running(o, holdfastv1.StepPromote)
			s.Status.IncomingMemberID = HexID(memberID("n4"))
			s.Status.History = append(s.Status.History, rec(holdfastv1.StepPromote, holdfastv1.SwapReasonPromoted, holdfastv1.SwapReasonPromoted, "promoted"))
			cordon(o.Nodes["n4"], swapID)
			withVoter(o)
			promoteDone(o)
		}, want{kind: SetEtcdLabel, node: "n4"}},
		{"a voter, no Ready heartbeat after the start yet: waits", func(o *Observation) {
			s := running(o, holdfastv1.StepPromote)
			s.Status.IncomingMemberID = HexID(memberID("n4"))
			s.Status.History = append(s.Status.History, rec(holdfastv1.StepPromote, holdfastv1.SwapReasonPromoted, holdfastv1.SwapReasonPromoted, "promoted"))
			cordon(o.Nodes["n4"], swapID)
			withVoter(o)
			promoteDone(o)
			o.Nodes["n4"].Labels[holdfastv1.LabelEtcdRole] = "true"
			o.Nodes["n4"].Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(started.Add(-time.Second))
		}, want{waitFor: holdfastv1.SwapReasonWaitingForNodeReady}},
		{"a voter and Ready after the start: uncordoned", func(o *Observation) {
			s := running(o, holdfastv1.StepPromote)
			s.Status.IncomingMemberID = HexID(memberID("n4"))
			s.Status.History = append(s.Status.History, rec(holdfastv1.StepPromote, holdfastv1.SwapReasonPromoted, holdfastv1.SwapReasonPromoted, "promoted"))
			cordon(o.Nodes["n4"], swapID)
			withVoter(o)
			promoteDone(o)
			o.Nodes["n4"].Labels[holdfastv1.LabelEtcdRole] = "true"
		}, want{kind: Uncordon, node: "n4"}},
		{"a voter whose promotion was not recorded (a crash): recorded, the Ready deadline starting now", func(o *Observation) {
			s := votes(o)
			s.Status.History = nil
			s.Status.Deadline = &metav1.Time{Time: t0.Add(-time.Second)}
		}, want{kind: Record, says: []string{"found a voter (its promotion was not recorded)"}, check: func(t *testing.T, d Decision) {
			if dl := d.Action.Then.Deadline; dl == nil || !dl.Equal(t0.Add(10*time.Minute)) {
				t.Errorf("deadline %v, want the operation timeout (10m in the fixture) from now", dl)
			}
		}}},
		{"a voter with no server start time reported: waits, not Ready by default", func(o *Observation) {
			votes(o)
			setReport(o.Nodes["n4"], swapID, holdfastv1.RoleStepPromote, holdfastv1.ActuatorDone, nil, started)
		}, want{waitFor: holdfastv1.SwapReasonWaitingForNodePlugin, says: []string{"report its server's start time"}}},
		{"a promoted voter not Ready by the deadline: stepped back", func(o *Observation) {
			s := votes(o)
			s.Status.Deadline = &metav1.Time{Time: t0.Add(-time.Second)}
			o.Nodes["n4"].Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(started.Add(-time.Second))
		}, want{kind: Record, step: holdfastv1.StepRollback, says: []string{holdfastv1.SwapReasonNotReadyByDeadline, "stepping it back"}}},
		{"a promoted voter with no start time by the deadline: stepped back", func(o *Observation) {
			s := votes(o)
			s.Status.Deadline = &metav1.Time{Time: t0.Add(-time.Second)}
			setReport(o.Nodes["n4"], swapID, holdfastv1.RoleStepPromote, holdfastv1.ActuatorDone, nil, started)
		}, want{kind: Record, step: holdfastv1.StepRollback, says: []string{holdfastv1.SwapReasonNotReadyByDeadline}}},
		{"a promoted voter Ready before the deadline: uncordoned", func(o *Observation) {
			s := votes(o)
			s.Status.Deadline = &metav1.Time{Time: t0.Add(time.Second)}
		}, want{kind: Uncordon, node: "n4"}},
		{"promotion done: regate", func(o *Observation) {
			s := running(o, holdfastv1.StepPromote)
			s.Status.IncomingMemberID = HexID(memberID("n4"))
			s.Status.History = append(s.Status.History, rec(holdfastv1.StepPromote, holdfastv1.SwapReasonPromoted, holdfastv1.SwapReasonPromoted, "promoted"))
			withVoter(o)
			promoteDone(o)
			o.Nodes["n4"].Labels[holdfastv1.LabelEtcdRole] = "true"
		}, want{kind: Record, step: holdfastv1.StepRegate}},
	})
}

func TestNextRollback(t *testing.T) {
	runNext(t, []nextCase{
		{"rollback with a learner listed: the learner is removed (never touches quorum)", func(o *Observation) {
			s := running(o, holdfastv1.StepRollback)
			s.Status.IncomingMemberID = HexID(memberID("n4"))
			withLearner(o, false)
		}, want{kind: RemoveMember, node: "n4", check: func(t *testing.T, d Decision) {
			if d.Action.Member != memberID("n4") || len(d.Action.Endpoints) != 3 {
				t.Errorf("removes %x through %v", d.Action.Member, d.Action.Endpoints)
			}
		}}},
		{"rollback of a member added as a voter: removed while the others are healthy", func(o *Observation) {
			running(o, holdfastv1.StepRollback)
			withVoter(o)
			unstarted(o, "n4")
		}, want{kind: RemoveMember, node: "n4", check: func(t *testing.T, d Decision) {
			if d.Action.Member != memberID("n4") {
				t.Errorf("removes %x", d.Action.Member)
			}
		}}},
		{"rollback of a member added as a voter, another voter paused: held", func(o *Observation) {
			running(o, holdfastv1.StepRollback)
			withVoter(o)
			unstarted(o, "n4")
			pause(o, "n2")
		}, want{waitFor: holdfastv1.SwapReasonRemovalHeld, says: []string{"voter n2 does not answer"}}},
		{"rollback without a learner listed: the host is returned to an agent", func(o *Observation) {
			s := running(o, holdfastv1.StepRollback)
			s.Status.IncomingMemberID = HexID(memberID("n4"))
			cordon(o.Nodes["n4"], swapID)
			setStep(o.Nodes["n4"], holdfastv1.RoleServer, swapID, holdfastv1.RoleStepPromote)
		}, want{kind: SetRoleStep, node: "n4", check: func(t *testing.T, d Decision) {
			if d.Action.RoleStep != holdfastv1.RoleStepRollback {
				t.Errorf("sets %s", d.Action.RoleStep)
			}
		}}},
		{"a learner that had started is removed and recorded as such", func(o *Observation) {
			s := running(o, holdfastv1.StepRollback)
			s.Status.IncomingMemberID = HexID(memberID("n4"))
			withLearner(o, true)
		}, want{kind: RemoveMember, node: "n4", says: []string{holdfastv1.SwapReasonStartedLearnerRemoved}}},
		{"rollback of a started learner waits for its host to record the removal (tombstone)", func(o *Observation) {
			s := running(o, holdfastv1.StepRollback)
			s.Status.IncomingMemberID = HexID(memberID("n4"))
			s.Status.History = append(s.Status.History, rec(holdfastv1.StepRollback, "LearnerRemoved", holdfastv1.SwapReasonStartedLearnerRemoved, "removed"))
			s.Status.Deadline = &metav1.Time{Time: t0.Add(time.Duration(o.Policy.Spec.OperationTimeoutSeconds) * time.Second)}
		}, want{waitFor: holdfastv1.SwapReasonWaitingForNodePlugin, says: []string{"record its learner's removal"}}},
		{"rollback of a started learner once its removal is recorded: the host is returned to an agent", func(o *Observation) {
			s := running(o, holdfastv1.StepRollback)
			s.Status.IncomingMemberID = HexID(memberID("n4"))
			s.Status.History = append(s.Status.History, rec(holdfastv1.StepRollback, "LearnerRemoved", holdfastv1.SwapReasonStartedLearnerRemoved, "removed"))
			o.Nodes["n4"].Annotations[holdfastv1.AnnotationTombstone] = `{"memberID":"4","clusterID":"c1"}`
		}, want{kind: SetRoleStep, node: "n4"}},
		{"rolled back on the host but its tombstone still reported: waited for", func(o *Observation) {
			running(o, holdfastv1.StepRollback)
			cordon(o.Nodes["n4"], swapID)
			setStep(o.Nodes["n4"], holdfastv1.RoleAgent, swapID, holdfastv1.RoleStepRollback)
			setReport(o.Nodes["n4"], swapID, holdfastv1.RoleStepRollback, holdfastv1.ActuatorDone, nil, t0)
			o.Nodes["n4"].Annotations[holdfastv1.AnnotationTombstone] = `{"memberID":"4","clusterID":"c1"}`
		}, want{waitFor: holdfastv1.SwapReasonWaitingForNodePlugin, says: []string{"retire any tombstone"}}},
		{"rollback waits for the node plugin", func(o *Observation) {
			running(o, holdfastv1.StepRollback)
			setStep(o.Nodes["n4"], holdfastv1.RoleAgent, swapID, holdfastv1.RoleStepRollback)
		}, want{waitFor: holdfastv1.SwapReasonWaitingForNodePlugin}},
		{"rolled back on the host: uncordoned", func(o *Observation) {
			running(o, holdfastv1.StepRollback)
			cordon(o.Nodes["n4"], swapID)
			setStep(o.Nodes["n4"], holdfastv1.RoleAgent, swapID, holdfastv1.RoleStepRollback)
			setReport(o.Nodes["n4"], swapID, holdfastv1.RoleStepRollback, holdfastv1.ActuatorDone, nil, t0)
		}, want{kind: Uncordon, node: "n4"}},
		{"membership as before: released as rolled back", func(o *Observation) {
			running(o, holdfastv1.StepRollback)
			setStep(o.Nodes["n4"], holdfastv1.RoleAgent, swapID, holdfastv1.RoleStepRollback)
			setReport(o.Nodes["n4"], swapID, holdfastv1.RoleStepRollback, holdfastv1.ActuatorDone, nil, t0)
		}, want{kind: Record, step: holdfastv1.StepRelease, outcome: holdfastv1.SwapRolledBack, says: []string{"n1, n2, n3"}}},
	})
}

func TestNextRegateAndStepDown(t *testing.T) {
	fourVoters := func(o *Observation) *holdfastv1.VoterSwap {
		s := running(o, holdfastv1.StepRegate)
		s.Status.IncomingMemberID = HexID(memberID("n4"))
		withVoter(o)
		o.Nodes["n4"].Labels[holdfastv1.LabelEtcdRole] = "true"
		return s
	}
	stepDown := func(o *Observation) {
		s := fourVoters(o)
		s.Status.Step = holdfastv1.StepStepDown
		s.Status.OutgoingMemberID = HexID(memberID("n1"))
		setLeader(o, "n2")
	}
	runNext(t, []nextCase{
		{"four healthy voters: on to the step-down", func(o *Observation) { fourVoters(o) },
			want{kind: Record, step: holdfastv1.StepStepDown, says: []string{"the 3 voters that stay (n2, n3, n4) are healthy"}, check: func(t *testing.T, d Decision) {
				if d.Action.Then.OutgoingMember != HexID(memberID("n1")) {
					t.Errorf("records outgoing member %q", d.Action.Then.OutgoingMember)
				}
			}}},
		{"a voter that stays is down: regate waits", func(o *Observation) {
			fourVoters(o)
			pause(o, "n3")
		}, want{waitFor: holdfastv1.SwapReasonRegateFailed, says: []string{"voter n3 does not answer"}}},
		{"the outgoing voter is down: regate passes", func(o *Observation) {
			fourVoters(o)
			setLeader(o, "n2")
			pause(o, "n1")
			notReady(o.Nodes["n1"])
		}, want{kind: Record, step: holdfastv1.StepStepDown, check: func(t *testing.T, d Decision) {
			// The history counts the voters that stay, never the paused
			// outgoing one ("4 healthy voters" was wrong).
			msg := d.Action.Then.History[0].Message
			if want := "the 3 voters that stay (n2, n3, n4) are healthy with a leader, no learner; n1 goes out"; msg != want {
				t.Errorf("regate history %q, want %q", msg, want)
			}
		}}},
		{"the outgoing voter leads: leadership moves to the incoming voter first", func(o *Observation) {
			stepDown(o)
			setLeader(o, "n1")
		}, want{kind: MoveLeader, node: "n1", check: func(t *testing.T, d Decision) {
			if d.Action.To != memberID("n4") || d.Action.Endpoint != clientURL("n1") {
				t.Errorf("moves to %x through %s", d.Action.To, d.Action.Endpoint)
			}
		}}},
		{"the outgoing voter is tainted and cordoned", stepDown, want{kind: Cordon, node: "n1"}},
		{"the outgoing voter is drained", func(o *Observation) {
			stepDown(o)
			cordon(o.Nodes["n1"], swapID)
			o.Pods["n1"] = []corev1.Pod{pod("web-2", nil)}
		}, want{kind: Evict, node: "n1"}},
		{"the outgoing voter gets its step-down", func(o *Observation) {
			stepDown(o)
			cordon(o.Nodes["n1"], swapID)
		}, want{kind: SetRoleStep, node: "n1", check: func(t *testing.T, d Decision) {
			if d.Action.RoleStep != holdfastv1.RoleStepStepDown {
				t.Errorf("sets %s", d.Action.RoleStep)
			}
		}}},
		{"waiting for the step-down", func(o *Observation) {
			stepDown(o)
			cordon(o.Nodes["n1"], swapID)
			setStep(o.Nodes["n1"], holdfastv1.RoleAgent, swapID, holdfastv1.RoleStepStepDown)
		}, want{waitFor: holdfastv1.SwapReasonWaitingForNodePlugin}},
		{"stepped down: on to the removal", func(o *Observation) {
			stepDown(o)
			cordon(o.Nodes["n1"], swapID)
			setStep(o.Nodes["n1"], holdfastv1.RoleAgent, swapID, holdfastv1.RoleStepStepDown)
			setReport(o.Nodes["n1"], swapID, holdfastv1.RoleStepStepDown, holdfastv1.ActuatorDone, nil, t0)
		}, want{kind: Record, step: holdfastv1.StepRemoveMember}},
		{"the outgoing member restarting for its step-down (Node Ready) is waited for", func(o *Observation) {
			stepDown(o)
			cordon(o.Nodes["n1"], swapID)
			setStep(o.Nodes["n1"], holdfastv1.RoleAgent, swapID, holdfastv1.RoleStepStepDown)
			pause(o, "n1")
		}, want{waitFor: holdfastv1.SwapReasonWaitingForNodePlugin}},
		{"the outgoing voter is down: removed without waiting for its step-down", func(o *Observation) {
			stepDown(o)
			cordon(o.Nodes["n1"], swapID)
			setStep(o.Nodes["n1"], holdfastv1.RoleAgent, swapID, holdfastv1.RoleStepStepDown)
			pause(o, "n1")
			notReady(o.Nodes["n1"])
		}, want{kind: Record, step: holdfastv1.StepRemoveMember, says: []string{holdfastv1.SwapReasonOutgoingDown}}},
	})
}

func TestNextRemoveAndFinish(t *testing.T) {
	removal := func(o *Observation) *holdfastv1.VoterSwap {
		s := running(o, holdfastv1.StepRemoveMember)
		s.Status.IncomingMemberID = HexID(memberID("n4"))
		s.Status.OutgoingMemberID = HexID(memberID("n1"))
		withVoter(o)
		setLeader(o, "n2")
		o.Nodes["n4"].Labels[holdfastv1.LabelEtcdRole] = "true"
		cordon(o.Nodes["n1"], swapID)
		setStep(o.Nodes["n1"], holdfastv1.RoleAgent, swapID, holdfastv1.RoleStepStepDown)
		setReport(o.Nodes["n1"], swapID, holdfastv1.RoleStepStepDown, holdfastv1.ActuatorDone, nil, t0.Add(-time.Minute))
		return s
	}
	finish := func(o *Observation) {
		s := removal(o)
		s.Status.Step = holdfastv1.StepFinishDemote
		o.Etcd.Members = o.Etcd.Members[1:] // n1 removed
		delete(o.Nodes["n1"].Labels, holdfastv1.LabelEtcdRole)
		s.Status.Deadline = &metav1.Time{Time: t0.Add(time.Duration(o.Policy.Spec.OperationTimeoutSeconds) * time.Second)}
	}
	removalRecorded := func(o *Observation) {
		finish(o)
		o.Nodes["n1"].Annotations[holdfastv1.AnnotationTombstone] = `{"memberID":"1","clusterID":"c"}`
	}
	runNext(t, []nextCase{
		{"the voters that stay are healthy: the member is removed", func(o *Observation) { removal(o) }, want{kind: RemoveMember, node: "n1",
			step: holdfastv1.StepFinishDemote, check: func(t *testing.T, d Decision) {
				for _, ep := range d.Action.Endpoints {
					if ep == clientURL("n1") {
						t.Errorf("removal sent through the outgoing member: %v", d.Action.Endpoints)
					}
				}
			}}},
		{"removal rejected, then retried: the same removal again", func(o *Observation) {
			s := removal(o)
			s.Status.History = append(s.Status.History, rec(holdfastv1.StepRemoveMember, holdfastv1.SwapOutcomeRetried, holdfastv1.SwapReasonMemberRemoved,
				"RemoveMember failed, tried again: etcdserver: unhealthy cluster"))
		}, want{kind: RemoveMember, node: "n1"}},
		{"removal held while a voter that stays is unhealthy", func(o *Observation) {
			removal(o)
			pause(o, "n3")
		}, want{waitFor: holdfastv1.SwapReasonRemovalHeld, says: []string{"voter n3 does not answer"}}},
		{"the outgoing voter is down and the others healthy: removed anyway", func(o *Observation) {
			removal(o)
			pause(o, "n1")
			notReady(o.Nodes["n1"])
		}, want{kind: RemoveMember, node: "n1"}},
		{"the outgoing voter leads again: leadership moves before the removal", func(o *Observation) {
			removal(o)
			setLeader(o, "n1")
		}, want{kind: MoveLeader, node: "n1"}},
		{"the member is gone: on to finish-demote", func(o *Observation) {
			removal(o)
			o.Etcd.Members = o.Etcd.Members[1:]
		}, want{kind: Record, step: holdfastv1.StepFinishDemote}},
		{"finish-demote waits for the host to record the removal (tombstone)", finish, want{waitFor: holdfastv1.SwapReasonWaitingForNodePlugin, says: []string{"record its member's removal"}}},
		{"finish-demote of a host that is down needs no tombstone first", func(o *Observation) {
			finish(o)
			notReady(o.Nodes["n1"])
		}, want{kind: SetRoleStep, node: "n1"}},
		{"finish-demote of a host silent for half the step needs no tombstone first", func(o *Observation) {
			finish(o)
			o.Swaps[0].Status.Deadline = &metav1.Time{Time: t0.Add(time.Second)}
		}, want{kind: SetRoleStep, node: "n1"}},
		{"finish-demote is asked of the node plugin once it recorded the removal", removalRecorded, want{kind: SetRoleStep, node: "n1", check: func(t *testing.T, d Decision) {
			if d.Action.RoleStep != holdfastv1.RoleStepFinishDemote {
				t.Errorf("sets %s", d.Action.RoleStep)
			}
		}}},
		{"its role labels go once the member is gone", func(o *Observation) {
			finish(o)
			setStep(o.Nodes["n1"], holdfastv1.RoleAgent, swapID, holdfastv1.RoleStepFinishDemote)
			o.Nodes["n1"].Labels[holdfastv1.LabelControlPlaneRole] = "true"
		}, want{kind: ClearRoleLabels, node: "n1"}},
		{"finished and Ready: uncordoned", func(o *Observation) {
			finish(o)
			setStep(o.Nodes["n1"], holdfastv1.RoleAgent, swapID, holdfastv1.RoleStepFinishDemote)
			setReport(o.Nodes["n1"], swapID, holdfastv1.RoleStepFinishDemote, holdfastv1.ActuatorDone, nil, t0.Add(-2*time.Second))
		}, want{kind: Uncordon, node: "n1"}},
		{"finished and Ready but its tombstone still reported: waited for", func(o *Observation) {
			finish(o)
			setStep(o.Nodes["n1"], holdfastv1.RoleAgent, swapID, holdfastv1.RoleStepFinishDemote)
			setReport(o.Nodes["n1"], swapID, holdfastv1.RoleStepFinishDemote, holdfastv1.ActuatorDone, nil, t0.Add(-2*time.Second))
			o.Nodes["n1"].Annotations[holdfastv1.AnnotationTombstone] = `{"memberID":"1","clusterID":"c"}`
		}, want{waitFor: holdfastv1.SwapReasonWaitingForNodePlugin, says: []string{"tombstone retired"}}},
		{"finished, Ready and uncordoned: released as succeeded", func(o *Observation) {
			finish(o)
			o.Nodes["n1"].Spec = corev1.NodeSpec{}
			setStep(o.Nodes["n1"], holdfastv1.RoleAgent, swapID, holdfastv1.RoleStepFinishDemote)
			setReport(o.Nodes["n1"], swapID, holdfastv1.RoleStepFinishDemote, holdfastv1.ActuatorDone, nil, t0.Add(-2*time.Second))
		}, want{kind: Record, step: holdfastv1.StepRelease, outcome: holdfastv1.SwapSucceeded}},
		{"the outgoing host does not come back: released with it pending", func(o *Observation) {
			finish(o)
			o.Swaps[0].Status.Deadline = &metav1.Time{Time: t0.Add(-time.Second)}
			setStep(o.Nodes["n1"], holdfastv1.RoleAgent, swapID, holdfastv1.RoleStepFinishDemote)
			notReady(o.Nodes["n1"])
		}, want{kind: Record, step: holdfastv1.StepRelease, outcome: holdfastv1.SwapSucceeded, says: []string{holdfastv1.SwapReasonOutgoingPending}}},
	})
}

func TestNextRelease(t *testing.T) {
	release := func(o *Observation, outcome holdfastv1.SwapPhase) *holdfastv1.VoterSwap {
		s := running(o, holdfastv1.StepRelease)
		s.Status.Outcome = outcome
		o.Lease = nil // Release needs no Lease
		return s
	}
	runNext(t, []nextCase{
		{"role steps carried out are cleared", func(o *Observation) {
			release(o, holdfastv1.SwapSucceeded)
			setStep(o.Nodes["n4"], holdfastv1.RoleServer, swapID, holdfastv1.RoleStepPromote)
			setReport(o.Nodes["n4"], swapID, holdfastv1.RoleStepPromote, holdfastv1.ActuatorDone, nil, t0)
		}, want{kind: ClearRoleStep, node: "n4"}},
		{"a finish-demote its host has not carried out stays for its return", func(o *Observation) {
			release(o, holdfastv1.SwapSucceeded)
			setStep(o.Nodes["n1"], holdfastv1.RoleAgent, swapID, holdfastv1.RoleStepFinishDemote)
		}, want{kind: Record, phase: holdfastv1.SwapSucceeded}},
		{"abandoned: the candidate is uncordoned", func(o *Observation) {
			release(o, holdfastv1.SwapAbandoned)
			cordon(o.Nodes["n4"], swapID)
		}, want{kind: Uncordon, node: "n4"}},
		{"finished into its outcome", func(o *Observation) { release(o, holdfastv1.SwapAbandoned) },
			want{kind: Record, phase: holdfastv1.SwapAbandoned, check: func(t *testing.T, d Decision) {
				if !d.Action.Then.FinishedAt || !d.Action.Then.ClearDeadline {
					t.Errorf("record %+v: want finishedAt and no deadline", d.Action.Then)
				}
			}}},
	})
}

func TestNextIdleAndDecisions(t *testing.T) {
	unfit := func(o *Observation) {
		fitness(o.Nodes["n2"], 40_000, t0.Add(-time.Minute))
		o.UnfitSince["n2"] = t0.Add(-11 * time.Minute)
	}
	runNext(t, []nextCase{
		{"an even count left behind is finished before any new decision", func(o *Observation) {
			s := running(o, holdfastv1.StepRemoveMember)
			s.Status.OutgoingMemberID = HexID(memberID("n1"))
			withVoter(o)
			setLeader(o, "n2")
			o.Swaps = append(o.Swaps, swap("s2", "n2", "n5", holdfastv1.SwapManual))
			unfit(o)
		}, want{kind: RemoveMember, node: "n1"}},
		{"an even count without a swap: no automatic decision", func(o *Observation) {
			withVoter(o)
			unfit(o)
		}, want{waitFor: holdfastv1.SwapReasonVoterCountOffTarget, says: []string{"4 voters where the target is 3"}}},
		{"a voter unfit for the window is proposed under dry run", func(o *Observation) {
			o.Policy.Spec.DryRun = new(true)
			unfit(o)
		}, want{kind: Propose, says: []string{"n2 unfit", "fsync p99 40ms over 10ms"}}},
		{"a voter unfit for the window is swapped out", unfit, want{kind: CreateSwap, check: func(t *testing.T, d Decision) {
			if d.Action.Outgoing != "n2" {
				t.Errorf("swaps out %s", d.Action.Outgoing)
			}
		}}},
		{"unfit for less than the window: nothing yet", func(o *Observation) {
			unfit(o)
			o.UnfitSince["n2"] = t0.Add(-time.Minute)
		}, want{}},
		{"a stale report is never unfit", func(o *Observation) {
			unfit(o)
			fitness(o.Nodes["n2"], 40_000, t0.Add(-time.Hour))
		}, want{}},
		{"an unfit pinned voter is left alone", func(o *Observation) {
			unfit(o)
			o.Nodes["n2"].Labels[holdfastv1.LabelPinned] = "true"
		}, want{}},
		{"the cooldown holds automatic swaps back", func(o *Observation) {
			unfit(o)
			o.Policy.Status.LastSwap = &holdfastv1.SwapOutcome{Name: "s0", Phase: holdfastv1.SwapRolledBack, FinishedAt: &metav1.Time{Time: t0.Add(-10 * time.Minute)}}
		}, want{waitFor: holdfastv1.SwapReasonCooldown}},
		{"an abandoned swap starts no cooldown", func(o *Observation) {
			unfit(o)
			s := swap("s0", "n2", "", holdfastv1.SwapAutomatic)
			s.Status.Phase, s.Status.FinishedAt = holdfastv1.SwapAbandoned, &metav1.Time{Time: t0.Add(-time.Minute)}
			o.Swaps = append(o.Swaps, s)
		}, want{kind: CreateSwap}},
		{"a refused automatic swap starts the cooldown (no retry every pass)", func(o *Observation) {
			unfit(o)
			s := swap("s0", "n2", "", holdfastv1.SwapAutomatic)
			s.Status.Phase, s.Status.FinishedAt = holdfastv1.SwapRefused, &metav1.Time{Time: t0.Add(-time.Minute)}
			o.Swaps = append(o.Swaps, s)
		}, want{waitFor: holdfastv1.SwapReasonCooldown}},
		{"a proposal that no longer stands is withdrawn", func(o *Observation) {
			o.Policy.Status.ProposedSwap = &holdfastv1.ProposedSwap{Outgoing: "n2", At: metav1.NewTime(t0.Add(-time.Hour))}
		}, want{kind: Withdraw}},
		{"a node a finished swap cordoned is uncordoned once Ready", func(o *Observation) {
			cordon(o.Nodes["n5"], "old-swap")
		}, want{kind: Uncordon, node: "n5"}},
		{"a role step carried out after its swap finished is cleared", func(o *Observation) {
			setStep(o.Nodes["n5"], holdfastv1.RoleAgent, "old-swap", holdfastv1.RoleStepFinishDemote)
			setReport(o.Nodes["n5"], "old-swap", holdfastv1.RoleStepFinishDemote, holdfastv1.ActuatorDone, nil, t0)
		}, want{kind: ClearRoleStep, node: "n5"}},
	})
}

// TestAutomaticConditionSaysWhyNoSwapIsMade: VoterPolicy's AutomaticSwap
// condition for each automatic decision, and no change on a pass that makes
// none.
func TestAutomaticConditionSaysWhyNoSwapIsMade(t *testing.T) {
	unfit := func(o *Observation) {
		fitness(o.Nodes["n2"], 40_000, t0.Add(-time.Minute))
		o.UnfitSince["n2"] = t0.Add(-11 * time.Minute)
	}
	cases := []struct {
		name   string
		mutate func(*Observation)
		status metav1.ConditionStatus
		reason string
		says   string
		none   bool
	}{
		{"a voter unfit for the window is swapped out", unfit, metav1.ConditionTrue, holdfastv1.SwapReasonVoterUnfit, "n2 unfit for the window 10m0s", false},
		{"the cooldown holds an unfit voter back", func(o *Observation) {
			unfit(o)
			o.Policy.Status.LastSwap = &holdfastv1.SwapOutcome{Name: "s0", Phase: holdfastv1.SwapSucceeded, FinishedAt: &metav1.Time{Time: t0.Add(-10 * time.Minute)}}
		}, metav1.ConditionFalse, holdfastv1.SwapReasonCooldown, "n2 is unfit (fsync p99 40ms over 10ms) but the cooldown runs until 2026-03-01T12:50:00Z", false},
		{"the cooldown, a stale proposal withdrawn: the reason stays", func(o *Observation) {
			unfit(o)
			o.Policy.Status.LastSwap = &holdfastv1.SwapOutcome{Name: "s0", Phase: holdfastv1.SwapSucceeded, FinishedAt: &metav1.Time{Time: t0.Add(-10 * time.Minute)}}
			o.Policy.Status.ProposedSwap = &holdfastv1.ProposedSwap{Outgoing: "n2", At: metav1.NewTime(t0.Add(-time.Hour))}
		}, metav1.ConditionFalse, holdfastv1.SwapReasonCooldown, "but the cooldown runs until", false},
		{"dry run proposes", func(o *Observation) {
			o.Policy.Spec.DryRun = new(true)
			unfit(o)
		}, metav1.ConditionFalse, holdfastv1.SwapReasonDryRun, "proposed (dry run): n2 unfit", false},
		{"a swap in progress", func(o *Observation) {
			running(o, holdfastv1.StepPromote)
			unfit(o)
		}, metav1.ConditionFalse, holdfastv1.SwapReasonSwapInProgress, "VoterSwap s1 is in progress", false},
		{"every voter fit", nil, metav1.ConditionFalse, holdfastv1.SwapReasonNoUnfitVoter, "no voter has been unfit for a whole fitness window (10m0s)", false},
		{"a pass tidying a leftover decides nothing", func(o *Observation) {
			cordon(o.Nodes["n5"], "old-swap")
		}, "", "", "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := fixture()
			if tc.mutate != nil {
				tc.mutate(o)
			}
			c, ok := AutomaticCondition(o, Next(o))
			if tc.none {
				if ok {
					t.Fatalf("condition %+v, want none", c)
				}
				return
			}
			if !ok || c.Type != holdfastv1.ConditionAutomaticSwap || c.Status != tc.status || c.Reason != tc.reason || !strings.Contains(c.Message, tc.says) {
				t.Fatalf("condition %+v (ok %v), want %s %s saying %q", c, ok, tc.status, tc.reason, tc.says)
			}
		})
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
