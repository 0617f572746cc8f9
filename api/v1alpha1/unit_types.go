package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AvailabilityMode says what happens to a unit when its runtime's node is lost.
// +kubebuilder:validation:Enum=Autonomy;Failover
type AvailabilityMode string

const (
	// Autonomy keeps controlling through a partition and never self-fences;
	// failover is by hand only, with a confirmation that the old node is fenced.
	Autonomy AvailabilityMode = "Autonomy"
	// Failover holds a control lease, self-fences when renewals stop, and is
	// re-bound automatically after the lease expired plus the margin.
	Failover AvailabilityMode = "Failover"
)

// ColocationPolicy says what a re-bind does with a target that already hosts
// another unit's runtime.
// +kubebuilder:validation:Enum=Refuse;Warn
type ColocationPolicy string

const (
	// ColocationRefuse never places this unit's runtime beside another unit's.
	ColocationRefuse ColocationPolicy = "Refuse"
	// ColocationWarn places it there only when nothing better exists, with a
	// Warning event on the Unit.
	ColocationWarn ColocationPolicy = "Warn"
)

// LeaseState is the grantor's view of a binding's control lease.
// +kubebuilder:validation:Enum=Pending;Held;Expired
type LeaseState string

const (
	// LeasePending: no renewal acknowledged yet at this binding.
	LeasePending LeaseState = "Pending"
	// LeaseHeld: the last renewal was acknowledged within the lease duration.
	LeaseHeld LeaseState = "Held"
	// LeaseExpired: the binding passed its deadline (§3 L4); see Expiry.
	LeaseExpired LeaseState = "Expired"
)

// ExpiryVerdict is what an Expired lease means, captured at the transition.
// +kubebuilder:validation:Enum=SelfFenced;StartupFailed
type ExpiryVerdict string

const (
	// VerdictSelfFenced: a renewal had been acknowledged at this binding, so
	// the runtime has certainly held and fenced by its own clock.
	VerdictSelfFenced ExpiryVerdict = "SelfFenced"
	// VerdictStartupFailed: no renewal was ever acknowledged at this binding;
	// the runtime did not come up within the start-up grace. Nothing was
	// fenced, because nothing was ever granted.
	VerdictStartupFailed ExpiryVerdict = "StartupFailed"
)

// RenewalOutcome is what the last renewal attempt before an expiry got back.
// +kubebuilder:validation:Enum=Refused;Unreachable;NotAttempted
type RenewalOutcome string

const (
	// RenewalRefused: the runtime's own handler answered and refused (over
	// the authenticated channel: an endpoint that proved to be the binding's
	// runtime, which may have refused the grantor's certificate); the
	// runtime is up and reachable.
	RenewalRefused RenewalOutcome = "Refused"
	// RenewalUnreachable: no answer from the runtime's handler (connection
	// refused, reset or timed out, or nothing at its address proved to be
	// the binding's runtime, and no grant was sent); the node may be gone.
	RenewalUnreachable RenewalOutcome = "Unreachable"
	// RenewalNotAttempted: the runtime never had an address to renew at.
	RenewalNotAttempted RenewalOutcome = "NotAttempted"
)

// BindingOrigin says which road made a binding.
// +kubebuilder:validation:Enum=Initial;Automatic;Manual;HandOver
type BindingOrigin string

const (
	// OriginInitial: the unit's first binding, on a primary node.
	OriginInitial BindingOrigin = "Initial"
	// OriginAutomatic: an automatic re-bind after an expiry; the node the
	// scheduler records is added to unsettledRebinds (§3 L5).
	OriginAutomatic BindingOrigin = "Automatic"
	// OriginManual: a person's failover (holdfast.io/failover-to).
	OriginManual BindingOrigin = "Manual"
)

// UnitSpec is the desired state of a unit.
type UnitSpec struct {
	// runtime describes the unit runtime pod.
	// +required
	Runtime UnitRuntime `json:"runtime"`

	// nodeSelector chooses the primary node(s): nodes that reach the unit's
	// field I/O. The first binding lands on one of them.
	// +required
	// +kubebuilder:validation:MinProperties=1
	NodeSelector map[string]string `json:"nodeSelector"`

	// availability chooses between partition autonomy and automatic failover.
	// The default is spelled out because the CRD's rules are checked against
	// it before nested defaults apply.
	// +optional
	// +kubebuilder:default={mode:Autonomy,leaseDurationSeconds:30,runtimeStartupGraceSeconds:120,colocation:Warn}
	Availability Availability `json:"availability,omitempty"`
}

// UnitRuntime describes the runtime pod holdfast creates for each binding.
// +kubebuilder:validation:XValidation:rule="self.healthPort != self.leasePort",message="healthPort and leasePort must differ",fieldPath=".leasePort"
// +kubebuilder:validation:XValidation:rule="!has(self.metricsPort) || (self.metricsPort != self.healthPort && self.metricsPort != self.leasePort)",message="metricsPort must differ from healthPort and leasePort",fieldPath=".metricsPort"
type UnitRuntime struct {
	// image is the unit runtime's container image.
	// +required
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`

	// imagePullPolicy of the runtime container.
	// +optional
	// +kubebuilder:default=IfNotPresent
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// args passed to the runtime.
	// +optional
	// +listType=atomic
	Args []string `json:"args,omitempty"`

	// env of the runtime container.
	// +optional
	// +listType=atomic
	Env []corev1.EnvVar `json:"env,omitempty"`

	// resources of the runtime container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// healthPort serves gRPC health: the readiness and liveness services.
	// The pod uses the host network, so runtimes sharing a node need distinct
	// ports.
	// +optional
	// +kubebuilder:default=9440
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	HealthPort int32 `json:"healthPort,omitempty"`

	// leasePort serves the control lease endpoint (POST/GET /v1/lease).
	// +optional
	// +kubebuilder:default=9443
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	LeasePort int32 `json:"leasePort,omitempty"`

	// metricsPort serves the runtime's Prometheus /metrics. Like the other
	// two it is a host port: runtimes sharing a node need distinct ports,
	// and the scheduler refuses a node where the port is taken.
	// +optional
	// +kubebuilder:default=9441
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	MetricsPort int32 `json:"metricsPort,omitempty"`
}

// Availability is the unit's availability policy (docs/design.md §3).
// +kubebuilder:validation:XValidation:rule="self.runtimeStartupGraceSeconds >= self.leaseDurationSeconds",message="must be at least leaseDurationSeconds",fieldPath=".runtimeStartupGraceSeconds"
// +kubebuilder:validation:XValidation:rule="!has(self.rebindMarginSeconds) || self.rebindMarginSeconds * 2 >= (self.leaseDurationSeconds < 10 ? 10 : (self.leaseDurationSeconds > 60 ? 60 : self.leaseDurationSeconds))",message="must be at least the hold bound (half the lease, clamped to 5s..30s)",fieldPath=".rebindMarginSeconds"
// +kubebuilder:validation:XValidation:rule="!has(self.warmStandby) || !self.warmStandby || self.mode == 'Failover'",message="needs mode Failover: only an automatic re-bind promotes a warm standby",fieldPath=".warmStandby"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Failover' || (has(self.targets) && ((has(self.targets.nodes) && size(self.targets.nodes) > 0) || has(self.targets.selector)))",message="must name at least one node or a selector when mode is Failover",fieldPath=".targets"
type Availability struct {
	// mode is Autonomy (the default: never self-fences, failover by hand
	// only) or Failover (lease, self-fence, automatic re-bind).
	// +optional
	// +kubebuilder:default=Autonomy
	Mode AvailabilityMode `json:"mode,omitempty"`

	// leaseDurationSeconds is how long a runtime may go without an
	// acknowledged renewal before it holds and then fences.
	// +optional
	// +kubebuilder:default=30
	// +kubebuilder:validation:XValidation:rule="self >= 10 && self <= 600",message="must be between 10 and 600 seconds"
	LeaseDurationSeconds int32 `json:"leaseDurationSeconds,omitempty"`

	// runtimeStartupGraceSeconds is how long a freshly bound runtime that has
	// never had a renewal acknowledged gets, from its first address, before
	// holdfast declares that it failed to start. Never below the lease.
	// +optional
	// +kubebuilder:default=120
	// +kubebuilder:validation:XValidation:rule="self <= 3600",message="must be at most 3600 seconds"
	RuntimeStartupGraceSeconds int32 `json:"runtimeStartupGraceSeconds,omitempty"`

	// rebindMarginSeconds is how long after an expiry holdfast waits before a
	// new writer may start. At least the hold bound; unset means the hold
	// bound plus 5s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self <= 600",message="must be at most 600 seconds"
	RebindMarginSeconds *int32 `json:"rebindMarginSeconds,omitempty"`

	// targets are the eligible standby nodes for a re-bind.
	// +optional
	Targets *FailoverTargets `json:"targets,omitempty"`

	// colocation says whether a re-bind may land on a target that already
	// hosts another unit's runtime (Warn) or never does (Refuse).
	// +optional
	// +kubebuilder:default=Warn
	Colocation ColocationPolicy `json:"colocation,omitempty"`

	// warmStandby keeps a runtime pod ready on each designated standby
	// before any failure (devices connected and read, no lease, no epoch),
	// so a re-bind promotes it by the new epoch's grant instead of creating,
	// scheduling and starting a pod. It writes nothing until it holds that
	// lease, after the margin. Failover mode only.
	// +optional
	WarmStandby bool `json:"warmStandby,omitempty"`
}

// FailoverTargets names eligible standby nodes by name, by label, or both.
type FailoverTargets struct {
	// nodes are standby node names.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	Nodes []string `json:"nodes,omitempty"`

	// selector chooses standby nodes by label.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// RuntimeIncarnation names one life of a runtime process: a container that
// restarts in place keeps its pod but loses every piece of lease state.
type RuntimeIncarnation struct {
	// podUID of the runtime pod.
	// +required
	PodUID string `json:"podUID"`
	// restartCount of the runtime container.
	// +required
	RestartCount int32 `json:"restartCount"`
}

// LeaseExpiryRecord is the verdict captured at the Expired transition.
type LeaseExpiryRecord struct {
	// verdict: SelfFenced when a renewal had been acknowledged at this
	// binding, StartupFailed when none ever was.
	// +required
	Verdict ExpiryVerdict `json:"verdict"`
	// lastAttempt is what the last renewal attempt got back.
	// +required
	LastAttempt RenewalOutcome `json:"lastAttempt"`
	// message carries the last attempt's error or response.
	// +optional
	Message string `json:"message,omitempty"`
	// at is when the grantor declared the lease Expired.
	// +required
	At metav1.Time `json:"at"`
	// epoch of the binding the verdict was captured at.
	// +required
	Epoch int64 `json:"epoch"`
}

// UnplacedSchedulerWords precedes the scheduler's own words in an
// UnplacedRebind's message; kubectl holdfast status cuts there to show them
// alone in a table cell.
const UnplacedSchedulerWords = "the scheduler could not place it: "

// UnplacedRebind is an automatic re-bind whose runtime pod was never placed.
type UnplacedRebind struct {
	// epoch of the binding that was never placed.
	// +required
	// +kubebuilder:validation:Minimum=1
	Epoch int64 `json:"epoch"`
	// message says why: the scheduler's last word on the pod
	// (FailedScheduling), or that no scheduler reported on it.
	// +optional
	Message string `json:"message,omitempty"`
}

// RuntimeBinding is the unit's current binding of its runtime to a node.
type RuntimeBinding struct {
	// node the runtime is bound to; empty until the scheduler placed it.
	// +optional
	Node string `json:"node,omitempty"`
	// epoch is the fencing token: strictly increasing per unit, one per binding.
	// +required
	// +kubebuilder:validation:Minimum=1
	Epoch int64 `json:"epoch"`
	// pod is the runtime pod's name: <unit>-runtime-e<epoch>, or the warm
	// standby pod this binding promoted (<unit>-warm-<suffix>).
	// +optional
	Pod string `json:"pod,omitempty"`
	// podUID is the UID of the warm standby pod this binding promoted; the
	// grantor grants only to the runtime that proves to be that pod. Empty
	// for a pod created for the binding, which proves its epoch instead.
	// +optional
	PodUID string `json:"podUID,omitempty"`
	// boundAt is when the scheduler recorded the node.
	// +optional
	BoundAt *metav1.Time `json:"boundAt,omitempty"`
	// firstAddressAt is when the runtime pod first had an IP; the start-up
	// grace runs from here.
	// +optional
	FirstAddressAt *metav1.Time `json:"firstAddressAt,omitempty"`
	// leaseState is the grantor's view of the control lease.
	// +optional
	LeaseState LeaseState `json:"leaseState,omitempty"`
	// leaseStateEpoch is the epoch leaseState was observed at. A re-bind
	// carries the previous state under the new epoch; a state whose epoch is
	// behind the binding's is carried, not observed. Zero means this
	// binding's own (objects written before the field existed).
	// +optional
	LeaseStateEpoch int64 `json:"leaseStateEpoch,omitempty"`
	// leaseEstablishedBy is the runtime incarnation that first had a renewal
	// acknowledged at this binding. Written once.
	// +optional
	LeaseEstablishedBy *RuntimeIncarnation `json:"leaseEstablishedBy,omitempty"`
	// lastAcknowledgedRenewal is when the last renewal was acknowledged.
	// +optional
	LastAcknowledgedRenewal *metav1.MicroTime `json:"lastAcknowledgedRenewal,omitempty"`
	// expiry is the verdict captured when the lease went Expired.
	// +optional
	Expiry *LeaseExpiryRecord `json:"expiry,omitempty"`
	// unsettledRebinds are the nodes the automatic path has re-bound to since
	// a runtime was last confirmed; each is tried at most once.
	// +optional
	// +listType=set
	UnsettledRebinds []string `json:"unsettledRebinds,omitempty"`
	// unplacedRebinds are the automatic re-binds since a runtime was last
	// confirmed whose pod no scheduler placed on a node before its start-up
	// grace ran out. Each counts as one attempt against the budget, like a
	// node in unsettledRebinds: another re-bind nobody can place would
	// repeat an experiment whose result is in hand.
	// +optional
	// +listType=map
	// +listMapKey=epoch
	UnplacedRebinds []UnplacedRebind `json:"unplacedRebinds,omitempty"`
	// origin is the road that made this binding: Initial, Automatic, Manual
	// or HandOver. Empty on bindings written before the field existed.
	// +optional
	Origin BindingOrigin `json:"origin,omitempty"`
	// previousNode is the node the previous binding was on: the node this
	// binding is leaving, where the scheduler never places it.
	// +optional
	PreviousNode string `json:"previousNode,omitempty"`
	// requestID names the person's request a Manual binding carried out
	// (the holdfast.io/request-id annotation the webhook set with it, or
	// the requested node when there was none), so a repeated pass never
	// carries it out twice.
	// +optional
	RequestID string `json:"requestID,omitempty"`
	// promise is what the runtime at this binding runs with and may have
	// been granted: its mode, the longest lease, the hold bound and margin
	// that follow, the spec.runtime its pod was built from (L11). Written
	// with the binding and before any longer grant is sent.
	// +optional
	Promise *RuntimePromise `json:"promise,omitempty"`
	// handOver is set while the binding is handed over to a new runtime
	// process (a change of mode or spec.runtime).
	// +optional
	HandOver *HandOver `json:"handOver,omitempty"`
}

// LeaseStateCarried reports whether leaseState was carried over from a
// previous binding by a re-bind rather than observed at this one.
func (b *RuntimeBinding) LeaseStateCarried() bool {
	return b.LeaseStateEpoch != 0 && b.LeaseStateEpoch < b.Epoch
}

// UnitStatus is the observed state of a unit.
type UnitStatus struct {
	// observedGeneration is the spec generation the controller last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// runtimeBinding is the current binding.
	// +optional
	RuntimeBinding *RuntimeBinding `json:"runtimeBinding,omitempty"`

	// conditions: RuntimeReady, Held, FailoverSuspended, FailoverRequest,
	// LeaseExpired.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Unit is a piece of plant equipment driven by one unit runtime pod.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,categories=holdfast
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.availability.mode`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.runtimeBinding.node`
// +kubebuilder:printcolumn:name="Epoch",type=integer,JSONPath=`.status.runtimeBinding.epoch`
// +kubebuilder:printcolumn:name="Lease",type=string,JSONPath=`.status.runtimeBinding.leaseState`
// +kubebuilder:printcolumn:name="Held",type=string,JSONPath=`.status.conditions[?(@.type=="Held")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Unit struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec UnitSpec `json:"spec"`
	// +optional
	Status UnitStatus `json:"status,omitempty"`
}

// UnitList is a list of Units.
//
// +kubebuilder:object:root=true
type UnitList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Unit `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Unit{}, &UnitList{})
}
