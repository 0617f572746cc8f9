package voters

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

func TestNextRegateAndStepDown(t *testing.T) {
	fourVoters := func(o *Observation) *holdfastv1.VoterSwap { return incomingVoter(o, holdfastv1.StepRegate) }
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
		{"the outgoing voter's evicted pods are waited for, not evicted again", func(o *Observation) {
			stepDown(o)
			cordon(o.Nodes["n1"], swapID)
			o.Pods["n1"] = []corev1.Pod{pod("web-2", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: t0} })}
		}, want{waitFor: holdfastv1.SwapReasonDraining, says: []string{"apps/web-2"}}},
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
		s := incomingVoter(o, holdfastv1.StepRemoveMember)
		s.Status.OutgoingMemberID = HexID(memberID("n1"))
		setLeader(o, "n2")
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
