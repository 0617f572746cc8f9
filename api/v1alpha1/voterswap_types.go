package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SwapOrigin says who asked for a swap.
// +kubebuilder:validation:Enum=Manual;Automatic
type SwapOrigin string

const (
	// SwapManual: a person asked (kubectl create, kubectl holdfast swap). It
	// is carried out even under dryRun and skips the fitness verdict and the
	// cooldown, but no other gate.
	SwapManual SwapOrigin = "Manual"
	// SwapAutomatic: the voter controller decided.
	SwapAutomatic SwapOrigin = "Automatic"
)

// SwapPhase is where a swap stands.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;RolledBack;Abandoned;Refused
type SwapPhase string

const (
	SwapPending    SwapPhase = "Pending"
	SwapRunning    SwapPhase = "Running"
	SwapSucceeded  SwapPhase = "Succeeded"
	SwapRolledBack SwapPhase = "RolledBack"
	SwapAbandoned  SwapPhase = "Abandoned"
	SwapRefused    SwapPhase = "Refused"
)

// Finished reports whether the phase is terminal.
func (p SwapPhase) Finished() bool {
	switch p {
	case SwapSucceeded, SwapRolledBack, SwapAbandoned, SwapRefused:
		return true
	}
	return false
}

// SwapStep is the step of docs/design.md §6 a swap is at.
// +kubebuilder:validation:Enum=Gates;Snapshot;Promote;Regate;StepDown;RemoveMember;FinishDemote;Release;Rollback
type SwapStep string

const (
	StepGates        SwapStep = "Gates"        // §6.1
	StepSnapshot     SwapStep = "Snapshot"     // §6.1
	StepPromote      SwapStep = "Promote"      // §6.2
	StepRegate       SwapStep = "Regate"       // §6.3
	StepStepDown     SwapStep = "StepDown"     // §6.4
	StepRemoveMember SwapStep = "RemoveMember" // §6.4
	StepFinishDemote SwapStep = "FinishDemote" // §6.4
	StepRelease      SwapStep = "Release"      // §6.5
	StepRollback     SwapStep = "Rollback"     // §6.2 failure branch
)

// VoterSwapSpec is what a person or the controller asked for. Immutable.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: delete this VoterSwap and create a new one"
// +kubebuilder:validation:XValidation:rule="!has(self.incoming) || self.incoming != self.outgoing",message="must differ from outgoing",fieldPath=".incoming"
type VoterSwapSpec struct {
	// outgoing is the node of the voter to demote to an agent.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Outgoing string `json:"outgoing"`

	// incoming is the node to promote to a voter. Empty: the scheduler picks
	// a voter-eligible candidate (docs/design.md §4).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Incoming string `json:"incoming,omitempty"`

	// reason says why, for the record.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`

	// origin is Manual (a person asked) or Automatic (the controller decided).
	// +optional
	// +kubebuilder:default=Manual
	Origin SwapOrigin `json:"origin,omitempty"`
}

// SnapshotRecord describes the verified etcd snapshot taken before a swap.
type SnapshotRecord struct {
	// name of the snapshot file.
	// +required
	Name string `json:"name"`
	// location is where the file is kept: its path, the volume holding it
	// (persistentVolumeClaim/NAME, or emptyDir: gone with the pod) and the
	// controller pod and node that wrote it. docs/voter-swap.md says how
	// to restore from it.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Location string `json:"location,omitempty"`
	// member the snapshot was streamed from (a voter that stays).
	// +optional
	Member string `json:"member,omitempty"`
	// sizeBytes of the snapshot.
	// +required
	SizeBytes int64 `json:"sizeBytes"`
	// sha256 of the snapshot, hex.
	// +required
	SHA256 string `json:"sha256"`
	// revision of the etcd store the snapshot holds.
	// +required
	Revision int64 `json:"revision"`
	// takenAt is when the snapshot was verified.
	// +optional
	TakenAt *metav1.Time `json:"takenAt,omitempty"`
}

// SwapStepRecord is one entry of a swap's history.
type SwapStepRecord struct {
	// step the record is about.
	// +required
	Step SwapStep `json:"step"`
	// outcome of the step: Started, Done, Failed, Retried, RolledBack...
	// +required
	Outcome string `json:"outcome"`
	// reason is a short CamelCase reason.
	// +optional
	Reason string `json:"reason,omitempty"`
	// message says what happened in a sentence.
	// +optional
	Message string `json:"message,omitempty"`
	// at is when it happened.
	// +required
	At metav1.Time `json:"at"`
}

// VoterSwapStatus is the observed progress of a swap.
type VoterSwapStatus struct {
	// swapID is <UTC %Y%m%dT%H%M%SZ>-<out>-<in>.
	// +optional
	SwapID string `json:"swapID,omitempty"`
	// incoming is the node being promoted: spec.incoming, or the scheduler's
	// pick when the spec named none.
	// +optional
	Incoming string `json:"incoming,omitempty"`
	// step is the step in progress.
	// +optional
	Step SwapStep `json:"step,omitempty"`
	// phase is where the swap stands.
	// +optional
	Phase SwapPhase `json:"phase,omitempty"`
	// outcome is the terminal phase the swap finishes into once its Release
	// step is done (Succeeded, RolledBack, Abandoned or Refused); set when
	// the swap enters Release, so a restarted controller finishes it alike.
	// +optional
	Outcome SwapPhase `json:"outcome,omitempty"`
	// snapshot taken and verified before any membership change.
	// +optional
	Snapshot *SnapshotRecord `json:"snapshot,omitempty"`
	// outgoingMemberID and incomingMemberID are etcd member IDs in hex.
	// +optional
	OutgoingMemberID string `json:"outgoingMemberID,omitempty"`
	// +optional
	IncomingMemberID string `json:"incomingMemberID,omitempty"`
	// startedAt is when the Lease was taken.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// deadline of the current step.
	// +optional
	Deadline *metav1.Time `json:"deadline,omitempty"`
	// finishedAt is when the swap reached a terminal phase.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// history of the steps, oldest first.
	// +optional
	// +listType=atomic
	History []SwapStepRecord `json:"history,omitempty"`
	// conditions of the swap.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// VoterSwap replaces one etcd voter with another, one swap at a time.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=holdfast
// +kubebuilder:printcolumn:name="Out",type=string,JSONPath=`.spec.outgoing`
// +kubebuilder:printcolumn:name="In",type=string,JSONPath=`.status.incoming`
// +kubebuilder:printcolumn:name="Step",type=string,JSONPath=`.status.step`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VoterSwap struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec VoterSwapSpec `json:"spec"`
	// +optional
	Status VoterSwapStatus `json:"status,omitempty"`
}

// VoterSwapList is a list of VoterSwaps.
//
// +kubebuilder:object:root=true
type VoterSwapList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VoterSwap `json:"items"`
}

func init() {
	SchemeBuilder.Register(&VoterSwap{}, &VoterSwapList{})
}
