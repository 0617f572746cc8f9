package v1alpha1

// Node labels (docs/design.md §2).
const (
	// LabelVoterEligible marks a node an admin allows to become an etcd voter.
	LabelVoterEligible = "holdfast.io/voter-eligible"
	// LabelPinned marks a node an admin does not want swapped in or out.
	LabelPinned = "holdfast.io/pinned"
	// LabelDesiredRole is the role the controller wants: server or agent.
	// Set by the controller only.
	LabelDesiredRole = "holdfast.io/desired-role"
	// LabelRole on a Node is the role the node plugin observed. On a Pod,
	// RoleVoterCandidate marks the voter controller's placement pod.
	LabelRole = "holdfast.io/role"
	// LabelEtcdRole and LabelControlPlaneRole are the well-known role labels
	// holdfast guards.
	LabelEtcdRole         = "node-role.kubernetes.io/etcd"
	LabelControlPlaneRole = "node-role.kubernetes.io/control-plane"
	// LabelMasterRole is the older role label k3s still sets on its servers;
	// the voter controller removes it with the others from a removed
	// member's Node.
	LabelMasterRole = "node-role.kubernetes.io/master"
)

// Role values of LabelDesiredRole and LabelRole.
const (
	RoleServer = "server"
	RoleAgent  = "agent"
	// RoleVoterCandidate labels the pod the scheduler places when a swap
	// names no incoming node.
	RoleVoterCandidate = "voter-candidate"
)

// Node annotations (docs/design.md §2). A node plugin writes them on its own Node only.
const (
	// AnnotationRoleSwap is the swap ID a role step belongs to.
	AnnotationRoleSwap = "holdfast.io/role-swap"
	// AnnotationRoleStep is the step the actuator must carry out.
	AnnotationRoleStep = "holdfast.io/role-step"
	// AnnotationRoleJoin lists the peer URLs a promoted server joins.
	AnnotationRoleJoin = "holdfast.io/role-join"
	// AnnotationActuator is the node plugin's report (ActuatorReport, JSON).
	AnnotationActuator = "holdfast.io/actuator"
	// AnnotationProvisioned says the server unit is installed on the host.
	AnnotationProvisioned = "holdfast.io/provisioned"
	// EventReasonNotProvisioned is the reason of the Event the node plugin
	// posts on its Node when it reports the host not provisioned: its
	// message says why.
	EventReasonNotProvisioned = "NotProvisioned"
	// AnnotationTombstone records the member and cluster ID of a removed member.
	AnnotationTombstone = "holdfast.io/tombstone"
	// AnnotationFitness carries the node's fitness probe results.
	AnnotationFitness = "holdfast.io/fitness"
	// AnnotationRuntimes is the node plugin's list of the unit runtimes
	// running on its host (RuntimesReport, JSON).
	AnnotationRuntimes = "holdfast.io/runtimes"
	// AnnotationReportRepair carries, in the person's words, why a member of
	// the report-repair groups removes a node report (break-glass; the
	// webhook audits it). Only removals are allowed this way.
	AnnotationReportRepair = "holdfast.io/report-repair"
	// AnnotationEtcdPeerURL is the peer URL the node's etcd member listens
	// on once promoted (set by whoever provisions the server unit). Without
	// it the voter controller uses https://<InternalIP>:2380.
	AnnotationEtcdPeerURL = "holdfast.io/etcd-peer-url"
)

// IsNodeReport says whether a Node label (label true) or annotation key is
// one of a node plugin's reports of its own host: its observed role, its
// actuator report, provisioned, tombstone, fitness and the runtimes it runs.
// Only that node's plugin writes them; only the voter controller clears them
// (or a person in the webhook's report-repair groups, with a reason in
// AnnotationReportRepair).
func IsNodeReport(key string, label bool) bool {
	if label {
		return key == LabelRole
	}
	switch key {
	case AnnotationActuator, AnnotationProvisioned, AnnotationTombstone, AnnotationFitness, AnnotationRuntimes:
		return true
	}
	return false
}

// TaintVoterSwap marks, with the swap ID as its value (effect NoSchedule), a
// node the voter controller cordoned for a swap: it uncordons only the nodes
// that carry it.
const TaintVoterSwap = "holdfast.io/voter-swap"

// LabelVoterSwap on a voter-candidate pod names the VoterSwap it places.
const LabelVoterSwap = "holdfast.io/voter-swap"

// Role steps, the values of AnnotationRoleStep.
const (
	RoleStepPromote      = "promote"
	RoleStepStepDown     = "step-down"
	RoleStepFinishDemote = "finish-demote"
	RoleStepRollback     = "rollback"
)

// Actuator phases reported in AnnotationActuator.
const (
	ActuatorRunning = "running"
	ActuatorDone    = "done"
	ActuatorFailed  = "failed"
	ActuatorRefused = "refused"
)

// Unit annotations a person sets (guarded by the webhook).
const (
	// AnnotationFailoverTo asks for a manual failover to the named node.
	AnnotationFailoverTo = "holdfast.io/failover-to"
	// AnnotationFailoverConfirmFenced certifies, in the person's words, how
	// the old node was fenced (powered off, cut from the field network).
	AnnotationFailoverConfirmFenced = "holdfast.io/failover-confirm-fenced"
	// AnnotationFailoverConfirmEpoch names the binding epoch whose runtime
	// the confirmation certifies as fenced. A confirmation counts only while
	// the Unit's binding is at that epoch: one re-applied later (a GitOps
	// tool, a copied manifest) says nothing of a later runtime.
	AnnotationFailoverConfirmEpoch = "holdfast.io/failover-confirm-epoch"
	// AnnotationFailoverConfirmIncarnation names the runtime process the
	// confirmation certifies as fenced: "<pod UID>/<restart count>" of the
	// binding's runtime pod as the person read it, or "none" when no
	// runtime pod existed. A confirmation counts only while that process is
	// the binding's: one applied after the kubelet restarted the runtime,
	// or after its pod was re-created, says nothing of the process that
	// runs.
	AnnotationFailoverConfirmIncarnation = "holdfast.io/failover-confirm-incarnation"
	// AnnotationRestart asks for a restart of the runtime (RFC 3339 time).
	AnnotationRestart = "holdfast.io/restart"
	// AnnotationRequestID names a person's request: set by whoever asks
	// (kubectl holdfast sets a fresh ID) beside any of the three annotations
	// above. The webhook's audit record of the request, which names the
	// requester, and the controller's audit lines of what it did about it
	// both carry it, so the two trails join on it.
	AnnotationRequestID = "holdfast.io/request-id"
)

// Runtime pods.
const (
	// LabelUnit names the unit a runtime pod belongs to.
	LabelUnit = "holdfast.io/unit"
	// LabelEpoch carries the binding epoch a runtime pod was created for.
	LabelEpoch = "holdfast.io/epoch"
	// LabelWarmStandby marks a warm standby's runtime pod and names the
	// standby node it is kept on. A warm pod carries no LabelEpoch until a
	// binding promotes it (docs/design.md §3, Warm standby).
	LabelWarmStandby = "holdfast.io/warm-standby"
	// SchedulerName is the profile of holdfast-scheduler that places runtime
	// and voter-candidate pods.
	SchedulerName = "holdfast-scheduler"
	// HealthServiceReadiness and HealthServiceLiveness are the gRPC health
	// service names of the two probes (§3 L9): readiness answers to the
	// lease and the drivers, liveness only to a stalled scan.
	HealthServiceReadiness = "holdfast.readiness"
	HealthServiceLiveness  = "holdfast.liveness"
)

// The voter swap Lease (docs/design.md §2, §6).
const (
	SwapLeaseNamespace = "kube-system"
	SwapLeaseName      = "holdfast-voter-swap"
	// LabelGuarded selects the objects the webhook guards.
	LabelGuarded = "holdfast.io/guarded"
	// AnnotationSwapID and AnnotationSwapNodes on the swap Lease name the
	// swap and its nodes (comma separated), which node recovery leaves alone.
	AnnotationSwapID    = "holdfast.io/swap-id"
	AnnotationSwapNodes = "holdfast.io/swap-nodes"
)

// The epoch record (docs/design.md §3 L13).
const (
	// AnnotationLastEpoch, on the Lease EpochRecordName in the grantor's
	// namespace, is the highest epoch any grantor has reserved for a
	// binding. Only holdfast-controller writes it; every new binding's
	// epoch is above it.
	AnnotationLastEpoch = "holdfast.io/last-epoch"
	// EpochRecordName is the Lease that carries it.
	EpochRecordName = "holdfast-epochs"
)

// VoterPolicyName is the name of the singleton VoterPolicy.
const VoterPolicyName = "default"

// Unit condition types.
const (
	ConditionRuntimeReady      = "RuntimeReady"
	ConditionHeld              = "Held"
	ConditionFailoverSuspended = "FailoverSuspended"
	ConditionFailoverRequest   = "FailoverRequest"
	ConditionLeaseExpired      = "LeaseExpired"
	// ConditionLaterEpochAtDevice is True while the current binding's
	// runtime writes nothing to a device whose owner epoch is later than
	// its own (docs/design.md §3 L13); the message names the device, both
	// epochs and the fix.
	ConditionLaterEpochAtDevice = "LaterEpochAtDevice"
	// ConditionLeaseBelowFloor is True while a Failover unit's lease is
	// below the lease floor of the installed grantor (L14): a unit
	// admitted before the floor was raised, run as it is.
	ConditionLeaseBelowFloor = "LeaseBelowFloor"
)

// Unit condition reasons.
const (
	// Held is the unit's ISA-88 Hold: True from the Hold until a person's
	// restart once the new runtime holds its lease and is ready.
	ReasonRuntimeLost    = "RuntimeLost"
	ReasonManualFailover = "ManualFailover"
	ReasonRestarted      = "Restarted"
	// LeaseExpired False reasons (AwaitingFirstRenewal, LeaseRenewed,
	// Autonomy) and Held reasons of the Foundation.
	ReasonRenewalAcknowledged  = "RenewalAcknowledged"
	ReasonAwaitingFirstRenewal = "AwaitingFirstRenewal"
	ReasonAutonomy             = "Autonomy"
	// LeaseExpired (also the verdicts)
	ReasonSelfFenced    = string(VerdictSelfFenced)
	ReasonStartupFailed = string(VerdictStartupFailed)
	ReasonLeaseRenewed  = "LeaseRenewed"
	// FailoverSuspended
	ReasonAllTargetsTried = "AllTargetsTried"
	// RebindsNotPlaced: the budget was spent, at least in part, on re-binds
	// whose pod no scheduler placed (status.runtimeBinding.unplacedRebinds).
	ReasonRebindsNotPlaced = "RebindsNotPlaced"
	ReasonRuntimeConfirmed = "RuntimeConfirmed"
	// FailoverRequest: LeadershipHoldOff is a wait that names its deadline;
	// every other reason is an outcome.
	ReasonLeadershipHoldOff = "LeadershipHoldOff"
	ReasonRebound           = "Rebound"
	ReasonRefused           = "Refused"
	ReasonNoEligibleTarget  = "NoEligibleTarget"
	// LaterEpochAtDevice
	ReasonWritesWithheld = "WritesWithheld"
	ReasonNoLaterEpoch   = "NoLaterEpoch"
	// LeaseBelowFloor
	ReasonBelowFloor     = "BelowFloor"
	ReasonAtOrAboveFloor = "AtOrAboveFloor"
	// RuntimeReady
	ReasonPodReady    = "PodReady"
	ReasonPodNotReady = "PodNotReady"
	ReasonPodMissing  = "PodMissing"
)

// Unit hand-over conditions and reasons (docs/design.md §3 L11).
const (
	// ConditionRuntimeHandOver is True while a planned hand-over to a new
	// runtime process (a change of mode or spec.runtime) waits for the old
	// runtime to stop writing, and False once it is done or cancelled.
	ConditionRuntimeHandOver = "RuntimeHandOver"
	// RuntimeHandOver: AwaitingFence (a Failover runtime fences by its own
	// lease), AwaitingPodGone (an Autonomy runtime's pod is being deleted and
	// its node's plugin must list no container of it, or a person certify
	// the stop), HandedOver, HandOverCancelled. HandOver is the Held reason of a
	// hand-over.
	ReasonHandOver          = "HandOver"
	ReasonAwaitingFence     = "AwaitingFence"
	ReasonAwaitingPodGone   = "AwaitingPodGone"
	ReasonHandedOver        = "HandedOver"
	ReasonHandOverCancelled = "HandOverCancelled"
)

// Unit warm standby condition and reasons (docs/design.md §3, Warm standby).
const (
	// ConditionWarmStandby is True while every standby due a warm pod (an
	// eligible target other than the bound node, of a unit with
	// spec.availability.warmStandby) runs a ready one; its message counts
	// them and says, standby by standby, why one is not ready. Absent when
	// the unit keeps no warm standby.
	ConditionWarmStandby = "WarmStandby"
	// WarmStandby: AllReady, NotAllReady, NoStandby (no eligible standby
	// other than the bound node).
	ReasonWarmAllReady    = "AllReady"
	ReasonWarmNotAllReady = "NotAllReady"
	ReasonWarmNoStandby   = "NoStandby"
)

// FinalizerRuntimeStopped holds a Unit's deletion until the runtime of its
// binding has provably stopped writing: fenced by its own lease, its pod
// gone and its node's plugin listing no container of it after that
// (AnnotationRuntimes), or a person's certification
// (AnnotationFailoverConfirmFenced) (docs/design.md §3 L13). Until then the Unit's name cannot
// be created again, so a re-created Unit never binds a second writer beside
// a runtime of the deleted one that still holds its lease.
const FinalizerRuntimeStopped = "holdfast.io/runtime-stopped"

// VoterSwap and VoterPolicy condition types.
const (
	ConditionGatesPassed = "GatesPassed"
	ConditionProgressing = "Progressing"
	ConditionEtcdHealthy = "EtcdHealthy"
	ConditionVotersEven  = "VotersEven"
	// ConditionAutomaticSwap (VoterPolicy) is True when the last pass
	// created an automatic swap, False with the reason none was made
	// (cooldown, gates, dry run, a swap in progress, no voter unfit).
	ConditionAutomaticSwap = "AutomaticSwap"
)
