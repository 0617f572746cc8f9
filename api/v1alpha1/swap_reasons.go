package v1alpha1

// Voter swap reasons: a VoterSwap's Progressing condition, its history
// records and its Events, and the VoterPolicy's conditions. Alerts and
// runbooks match on these values (docs/voter-swap.md).
const (
	// SwapReasonGatesFailed: a gate failed; the swap is refused and the message names each gate.
	SwapReasonGatesFailed = "GatesFailed"
	// SwapReasonGatesPassed: every gate holds (docs/design.md §6 steps 1 and 3).
	SwapReasonGatesPassed = "GatesPassed"
	// SwapReasonDryRun: VoterPolicy dryRun is on; an automatic swap is only proposed (status.proposedSwap).
	SwapReasonDryRun = "DryRun"
	// SwapReasonNoCandidate: no incoming node named and no voter candidate placed yet (refused past the operation timeout).
	SwapReasonNoCandidate = "NoCandidate"
	// SwapReasonCandidateChosen: holdfast-scheduler placed the voter candidate; its node is the incoming one.
	SwapReasonCandidateChosen = "CandidateChosen"
	// SwapReasonLeaseHeldElsewhere: waiting, never acting, while another holder has the unexpired swap Lease.
	SwapReasonLeaseHeldElsewhere = "LeaseHeldElsewhere"
	// SwapReasonLeaseTaken: the controller took the swap Lease for this swap.
	SwapReasonLeaseTaken = "LeaseTaken"
	// SwapReasonLeaseLapsed: the swap Lease this controller held for the swap expired without a renewal (passes slower than the Lease, or renewals refused); taken again.
	SwapReasonLeaseLapsed = "LeaseLapsed"
	// SwapReasonSnapshotTaken: a verified snapshot was taken from a voter that stays.
	SwapReasonSnapshotTaken = "SnapshotTaken"
	// SwapReasonSnapshotVerified: a controller that started mid-swap found the recorded snapshot and verified it (size, sha256, revision).
	SwapReasonSnapshotVerified = "SnapshotVerified"
	// SwapReasonSnapshotLost: a controller that started mid-swap did not find the recorded snapshot, or it did not match its record: a new one is taken before the swap goes on.
	SwapReasonSnapshotLost = "SnapshotLost"
	// SwapReasonSnapshotFailed: no verified snapshot (yet, or within the operation timeout: abandoned).
	SwapReasonSnapshotFailed = "SnapshotFailed"
	// SwapReasonCordoned: a swap node was cordoned and tainted holdfast.io/voter-swap.
	SwapReasonCordoned = "Cordoned"
	// SwapReasonDraining: pods are being evicted from a swap node, or the
	// swap waits for the evicted ones to terminate.
	SwapReasonDraining = "Draining"
	// SwapReasonUncordoned: a node a swap cordoned is schedulable again.
	SwapReasonUncordoned = "Uncordoned"
	// SwapReasonWorkloadPodsRunning: waiting for workload pods (jobs, unit runtimes) on the candidate to finish.
	SwapReasonWorkloadPodsRunning = "WorkloadPodsRunning"
	// SwapReasonWorkloadDrainTimeout: workload pods outlasted the drain wait; the swap is abandoned.
	SwapReasonWorkloadDrainTimeout = "WorkloadDrainTimeout"
	// SwapReasonDrainTimeout: pods were not evicted within the operation timeout; the swap is abandoned.
	SwapReasonDrainTimeout = "DrainTimeout"
	// SwapReasonNoPeerURL: the candidate has no peer URL annotation and no InternalIP; the swap is abandoned.
	SwapReasonNoPeerURL = "NoPeerURL"
	// SwapReasonEtcdUnreachable: waiting: the etcd member list could not be read.
	SwapReasonEtcdUnreachable = "EtcdUnreachable"
	// SwapReasonEtcdUnhealthy: waiting: etcd is not healthy (a learner is added to a healthy cluster only; no automatic decision).
	SwapReasonEtcdUnhealthy = "EtcdUnhealthy"
	// SwapReasonLearnerAdded: the candidate was added as an etcd learner.
	SwapReasonLearnerAdded = "LearnerAdded"
	// SwapReasonLearnerAdopted: a learner of the candidate, added before a crash, was found in the member list.
	SwapReasonLearnerAdopted = "LearnerAdopted"
	// SwapReasonMemberNotLearner: the candidate's member votes though this swap neither promoted it nor started its server (it was not added as a learner); a voter that has not started counts toward quorum, so the swap rolls back and removes it while the others are healthy.
	SwapReasonMemberNotLearner = "MemberNotLearner"
	// SwapReasonLearnerGone: the recorded learner left the member list; the swap rolls back.
	SwapReasonLearnerGone = "LearnerGone"
	// SwapReasonLearnerNotStarted: waiting: the candidate's server is started but its member has not joined.
	SwapReasonLearnerNotStarted = "LearnerNotStarted"
	// SwapReasonLearnerRemoved: the rollback removed the candidate's learner.
	SwapReasonLearnerRemoved = "LearnerRemoved"
	// SwapReasonStartedLearnerRemoved: the rollback removed a learner that had started; its host records the removal.
	SwapReasonStartedLearnerRemoved = "StartedLearnerRemoved"
	// SwapReasonPromoteRequested: the candidate's node was asked to start its server (role-step promote).
	SwapReasonPromoteRequested = "PromoteRequested"
	// SwapReasonServerRequested: history outcome of PromoteRequested: desired-role server.
	SwapReasonServerRequested = "ServerRequested"
	// SwapReasonStepDownRequested: the outgoing node was asked to step down (role-step step-down).
	SwapReasonStepDownRequested = "StepDownRequested"
	// SwapReasonRollbackRequested: the candidate's node was asked to return to an agent (role-step rollback).
	SwapReasonRollbackRequested = "RollbackRequested"
	// SwapReasonFinishDemoteRequested: the outgoing node was asked to finish its demotion (role-step finish-demote).
	SwapReasonFinishDemoteRequested = "FinishDemoteRequested"
	// SwapReasonAgentRequested: history outcome of a step-down, rollback or finish-demote request: desired-role agent.
	SwapReasonAgentRequested = "AgentRequested"
	// SwapReasonWaitingForNodePlugin: waiting for a node plugin to carry out its role step and report it.
	SwapReasonWaitingForNodePlugin = "WaitingForNodePlugin"
	// SwapReasonWaitingForNodeReady: the new voter votes; waiting for its Node to be Ready on a heartbeat after the server start.
	SwapReasonWaitingForNodeReady = "WaitingForNodeReady"
	// SwapReasonPromoted: the learner was promoted to a voter (and, in the step's last record, is a voter and Ready).
	SwapReasonPromoted = "Promoted"
	// SwapReasonNotVoterByDeadline: the candidate is not a voter by the learner stall time plus the operation timeout; the swap rolls back.
	SwapReasonNotVoterByDeadline = "NotVoterByDeadline"
	// SwapReasonNotReadyByDeadline: the promoted voter's Node was not Ready after its server's start within the operation timeout of its promotion; it is stepped back (its member removed while the others are healthy) so the count returns to odd.
	SwapReasonNotReadyByDeadline = "NotReadyByDeadline"
	// SwapReasonLabelled: the new voter's Node was labelled node-role.kubernetes.io/etcd.
	SwapReasonLabelled = "Labelled"
	// SwapReasonRegateFailed: waiting: the gates with one more voter do not hold yet.
	SwapReasonRegateFailed = "RegateFailed"
	// SwapReasonLeaderMoved: etcd's leadership was moved off the outgoing voter.
	SwapReasonLeaderMoved = "LeaderMoved"
	// SwapReasonOutgoingDown: the outgoing node is down; its member is removed without its step-down (its tombstone guard keeps it out).
	SwapReasonOutgoingDown = "OutgoingDown"
	// SwapReasonRemovalHeld: waiting: a member is removed only while the voters that stay are all healthy.
	SwapReasonRemovalHeld = "RemovalHeld"
	// SwapReasonMemberRemoved: the outgoing member is no member any more.
	SwapReasonMemberRemoved = "MemberRemoved"
	// SwapReasonOutgoingPending: the member is removed but its host has not finished to an agent in time; its role step stays for its return.
	SwapReasonOutgoingPending = "OutgoingPending"
	// SwapReasonNodeGone: the outgoing node's Node object is gone after its member was removed.
	SwapReasonNodeGone = "NodeGone"
	// SwapReasonLabelsCleared: the etcd, control-plane and master role labels and k3s's etcd annotations were removed from a node whose member is gone.
	SwapReasonLabelsCleared = "LabelsCleared"
	// SwapReasonRoleStepCleared: a role step its host carried out was removed from its Node.
	SwapReasonRoleStepCleared = "RoleStepCleared"
	// SwapReasonCandidateGone: the candidate's Node is gone (rolled back if a learner was added, else abandoned).
	SwapReasonCandidateGone = "CandidateGone"
	// SwapReasonMembershipRestored: the rollback is complete: the members are as before the swap.
	SwapReasonMembershipRestored = "MembershipRestored"
	// SwapReasonMembershipNotRestored: waiting for the members to be as before the swap.
	SwapReasonMembershipNotRestored = "MembershipNotRestored"
	// SwapReasonRollbackUnconfirmed: the members are as before, but the candidate's node plugin did not confirm its rollback in time.
	SwapReasonRollbackUnconfirmed = "RollbackUnconfirmed"
	// SwapReasonReleased: the swap finished and its Lease was released.
	SwapReasonReleased = "Released"
	// SwapReasonUnknownStep: the swap names a step this controller does not know (a newer controller wrote it).
	SwapReasonUnknownStep = "UnknownStep"
	// SwapReasonCooldown: an unfit voter waits for the cooldown after the last swap.
	SwapReasonCooldown = "Cooldown"
	// SwapReasonVoterUnfit: a voter was unfit for the whole fitness window; an automatic swap was created.
	SwapReasonVoterUnfit = "VoterUnfit"
	// SwapReasonVoterCountOffTarget: the voter count differs from the target with no swap in progress; a person decides.
	SwapReasonVoterCountOffTarget = "VoterCountOffTarget"
	// SwapReasonLeftover: a finished swap's leftover was tidied (a role step carried out late, a node Ready again).
	SwapReasonLeftover = "Leftover"
	// SwapReasonNoUnfitVoter: no voter is unfit; no automatic swap.
	SwapReasonNoUnfitVoter = "NoUnfitVoter"
	// SwapReasonSwapInProgress: a swap is in progress; no automatic decision.
	SwapReasonSwapInProgress = "SwapInProgress"
	// SwapReasonMemberListUnavailable: the etcd member list could not be read from any endpoint.
	SwapReasonMemberListUnavailable = "MemberListUnavailable"
	// SwapReasonUnstartedMember: EtcdHealthy False: a member has not started.
	SwapReasonUnstartedMember = "UnstartedMember"
	// SwapReasonMemberUnreachable: EtcdHealthy False: a member, or every voter, does not answer.
	SwapReasonMemberUnreachable = "MemberUnreachable"
	// SwapReasonMemberReportsErrors: EtcdHealthy False: a member answers with errors (an alarm, a failed status).
	SwapReasonMemberReportsErrors = "MemberReportsErrors"
	// SwapReasonLearnerPresent: EtcdHealthy False: a started learner is in the member list.
	SwapReasonLearnerPresent = "LearnerPresent"
	// SwapReasonNoLeader: EtcdHealthy False: etcd reports no leader, or the voters disagree on it.
	SwapReasonNoLeader = "NoLeader"
	// SwapReasonAllMembersHealthy: EtcdHealthy True: every member answers and they agree on a leader.
	SwapReasonAllMembersHealthy = "AllMembersHealthy"
	// SwapReasonOdd: VotersEven False: an odd number of voters.
	SwapReasonOdd = "Odd"
	// SwapReasonEven: VotersEven True: an even number of voters (a swap stopped between promotion and removal).
	SwapReasonEven = "Even"
)

// Outcomes of a voter swap's history records. A record of an intermediate
// action (a cordon, a role step asked) carries that action's reason as its
// outcome.
const (
	SwapOutcomeStarted    = "Started"
	SwapOutcomeDone       = "Done"
	SwapOutcomeFailed     = "Failed"
	SwapOutcomeRetried    = "Retried"
	SwapOutcomeRefused    = "Refused"
	SwapOutcomeAbandoned  = "Abandoned"
	SwapOutcomeRolledBack = "RolledBack"
)
