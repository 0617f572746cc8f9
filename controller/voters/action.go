package voters

import (
	"encoding/json"
	"time"

	"k8s.io/apimachinery/pkg/types"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// Kind is what an action does.
type Kind string

// The actions. Each is idempotent or judged again from what it changed (a
// learner listed, an annotation set, a node cordoned), so a pass that dies
// after the action and before its record is resumed by the next pass.
const (
	// Record writes the swap status only.
	Record Kind = "Record"
	// Refuse finishes a pending swap as Refused (nothing was changed).
	Refuse Kind = "Refuse"
	// CreateSwap creates an automatic VoterSwap; Propose records one in
	// VoterPolicy status.proposedSwap instead (dry run); Withdraw clears it.
	CreateSwap Kind = "CreateSwap"
	Propose    Kind = "Propose"
	Withdraw   Kind = "Withdraw"
	// CreateCandidate and DeleteCandidate manage the voter-candidate pod.
	CreateCandidate Kind = "CreateCandidate"
	DeleteCandidate Kind = "DeleteCandidate"
	// AcquireLease and ReleaseLease take and free the swap Lease.
	AcquireLease Kind = "AcquireLease"
	ReleaseLease Kind = "ReleaseLease"
	// Snapshot streams and verifies a snapshot from a voter that stays.
	Snapshot Kind = "Snapshot"
	// Cordon marks a node unschedulable and taints it with TaintVoterSwap;
	// Uncordon undoes both (only on a node that carries the taint).
	Cordon   Kind = "Cordon"
	Uncordon Kind = "Uncordon"
	// Evict evicts pods (the Eviction API, so budgets are honoured).
	Evict Kind = "Evict"
	// AddLearner adds the candidate as an etcd learner.
	AddLearner Kind = "AddLearner"
	// SetRoleStep sets desired-role, role-swap, role-step (and role-join)
	// on a node for its node plugin; ClearRoleStep removes the step.
	SetRoleStep   Kind = "SetRoleStep"
	ClearRoleStep Kind = "ClearRoleStep"
	// PromoteMember promotes a learner once etcd accepts it.
	PromoteMember Kind = "PromoteMember"
	// MoveLeader moves etcd's leadership off the outgoing voter.
	MoveLeader Kind = "MoveLeader"
	// RemoveMember removes a member.
	RemoveMember Kind = "RemoveMember"
	// SetEtcdLabel labels a new voter node-role.kubernetes.io/etcd;
	// ClearRoleLabels removes the etcd, control-plane and master labels (and k3s's
	// etcd annotations) from a node whose member is gone.
	SetEtcdLabel    Kind = "SetEtcdLabel"
	ClearRoleLabels Kind = "ClearRoleLabels"
)

// Action is the one thing a pass does, and the status it records after.
type Action struct {
	Kind Kind
	// Swap is the VoterSwap the action belongs to ("" for none).
	Swap string
	// SwapID is the swap's ID (the Lease's, the role steps').
	SwapID string
	Node   string
	// Nodes are the swap's nodes, for the Lease annotation.
	Nodes []string
	// Member is the etcd member acted on; To is MoveLeader's transferee.
	Member, To uint64
	// Endpoints to send a membership change to (the members that answer);
	// Endpoint is the single member a snapshot or leader move is asked of.
	Endpoints []string
	Endpoint  string
	// PeerURL of a learner to add.
	PeerURL string
	// RoleStep and Join are SetRoleStep's values; the desired role is the
	// step's (policy.RoleForStep).
	RoleStep, Join string
	// Pods to evict.
	Pods []types.NamespacedName
	// Outgoing, Reason: CreateSwap's and Propose's.
	Outgoing string
	// Reason is a short CamelCase reason; Message a person's sentence.
	Reason, Message string
	// Then is the status the swap records once the action is done.
	Then *Change
}

// Change is a swap status change. Zero fields change nothing.
type Change struct {
	Phase   holdfastv1.SwapPhase
	Step    holdfastv1.SwapStep
	Outcome holdfastv1.SwapPhase
	SwapID  string
	// Incoming is the node taken for the swap.
	Incoming string
	// StartedAt and FinishedAt are stamped with the pass's time when set.
	StartedAt, FinishedAt bool
	// Deadline of the step; ClearDeadline removes it.
	Deadline      *time.Time
	ClearDeadline bool
	// IncomingMember and OutgoingMember are member IDs (hex).
	IncomingMember, OutgoingMember string
	// Snapshot is the verified snapshot (filled in by the reconciler).
	Snapshot *holdfastv1.SnapshotRecord
	// History is appended (At stamped with the pass's time).
	History []holdfastv1.SwapStepRecord
	// Warning makes the Event a Warning.
	Warning bool
}

// Decision is Next's answer: an action, or why there is none.
type Decision struct {
	// Action is nil when the pass only waits.
	Action *Action
	// Swap is the swap the pass is about ("" when none).
	Swap string
	// Waiting says what the swap waits for (its Progressing condition).
	Waiting, WaitReason string
	// Polled: the wait is for a state no watch reports: etcd's own (a
	// learner starting or catching up, the voters' health) or evicted pods
	// terminating (the cache holds voter candidates only): the next pass
	// looks again after EtcdEvery, not RunningEvery. Every other wait is
	// for a Node, candidate pod, Lease or VoterSwap change, whose watch
	// event runs the pass.
	Polled bool
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

func rec(step holdfastv1.SwapStep, outcome, reason, msg string) holdfastv1.SwapStepRecord {
	return holdfastv1.SwapStepRecord{Step: step, Outcome: outcome, Reason: reason, Message: msg}
}

func at(t time.Time) *time.Time { return &t }
