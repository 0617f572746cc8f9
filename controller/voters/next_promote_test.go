package voters

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

func TestNextPromote(t *testing.T) {
	started := t0.Add(-time.Minute)
	promoteDone := func(o *Observation) {
		setStep(o.Nodes["n4"], holdfastv1.RoleServer, swapID, holdfastv1.RoleStepPromote)
		setReport(o.Nodes["n4"], swapID, holdfastv1.RoleStepPromote, holdfastv1.ActuatorDone, &started, started)
	}
	// promoted is a swap whose candidate n4 was promoted (recorded),
	// cordoned.
	promoted := func(o *Observation) *holdfastv1.VoterSwap {
		s := running(o, holdfastv1.StepPromote)
		s.Status.IncomingMemberID = HexID(memberID("n4"))
		s.Status.History = append(s.Status.History, rec(holdfastv1.StepPromote, holdfastv1.SwapReasonPromoted, holdfastv1.SwapReasonPromoted, "promoted"))
		cordon(o.Nodes["n4"], swapID)
		withVoter(o)
		promoteDone(o)
		return s
	}
	// votes is promoted with n4's Node labelled etcd.
	votes := func(o *Observation) *holdfastv1.VoterSwap {
		s := promoted(o)
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
		{"evicted pods are waited for until they are gone, polled, never evicted again", func(o *Observation) {
			running(o, holdfastv1.StepPromote)
			cordon(o.Nodes["n4"], swapID)
			o.Pods["n4"] = []corev1.Pod{pod("web-1", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: t0} })}
		}, want{waitFor: holdfastv1.SwapReasonDraining, says: []string{"terminate", "apps/web-1"}, check: func(t *testing.T, d Decision) {
			if !d.Polled {
				t.Error("the wait for terminating pods is left to a watch that does not see them")
			}
		}}},
		{"a pod not yet evicted is, beside one terminating", func(o *Observation) {
			running(o, holdfastv1.StepPromote)
			cordon(o.Nodes["n4"], swapID)
			o.Pods["n4"] = []corev1.Pod{pod("web-1", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: t0} }), pod("web-2", nil)}
		}, want{kind: Evict, node: "n4", check: func(t *testing.T, d Decision) {
			if len(d.Action.Pods) != 1 || d.Action.Pods[0].Name != "web-2" {
				t.Errorf("evicts %v, want only apps/web-2", d.Action.Pods)
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
			promoted(o)
		}, want{kind: SetEtcdLabel, node: "n4"}},
		{"a voter, no Ready heartbeat after the start yet: waits", func(o *Observation) {
			votes(o)
			o.Nodes["n4"].Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(started.Add(-time.Second))
		}, want{waitFor: holdfastv1.SwapReasonWaitingForNodeReady}},
		{"a voter and Ready after the start: uncordoned", func(o *Observation) {
			votes(o)
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
