package v1alpha1

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VoterPolicySpec configures the voter controller (docs/design.md §6).
type VoterPolicySpec struct {
	// targetVoters is how many etcd voters the cluster keeps. Odd: an even
	// count tolerates no more failures than one fewer.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 9 && self % 2 == 1",message="must be odd and between 1 and 9"
	TargetVoters int32 `json:"targetVoters,omitempty"`

	// dryRun reports automatic swaps in status.proposedSwap instead of
	// carrying them out. A manual VoterSwap is carried out either way, and a
	// swap in progress is always finished or rolled back.
	// +optional
	// +kubebuilder:default=true
	DryRun *bool `json:"dryRun,omitempty"`

	// cooldownSeconds after a finished swap before the next automatic one;
	// 0 is no cooldown.
	// +optional
	// +kubebuilder:default=3600
	// +kubebuilder:validation:Minimum=0
	CooldownSeconds *int32 `json:"cooldownSeconds,omitempty"`

	// operationTimeoutSeconds bounds each step.
	// +optional
	// +kubebuilder:default=600
	// +kubebuilder:validation:XValidation:rule="self >= 60",message="must be at least 60 seconds"
	OperationTimeoutSeconds int32 `json:"operationTimeoutSeconds,omitempty"`

	// workloadDrainWaitSeconds is how long a candidate's workload pods may
	// take to finish before the swap is abandoned (a planned change never
	// cuts a job); 0 is no wait: a candidate running workload pods abandons
	// the swap at once.
	// +optional
	// +kubebuilder:default=900
	// +kubebuilder:validation:Minimum=0
	WorkloadDrainWaitSeconds *int32 `json:"workloadDrainWaitSeconds,omitempty"`

	// learnerStallSeconds is how long a learner may take to catch up; a
	// candidate that is no voter by learnerStallSeconds plus
	// operationTimeoutSeconds is rolled back.
	// +optional
	// +kubebuilder:default=300
	// +kubebuilder:validation:XValidation:rule="self >= 30",message="must be at least 30 seconds"
	LearnerStallSeconds int32 `json:"learnerStallSeconds,omitempty"`

	// eligibleSelector chooses the nodes that may become voters.
	// +optional
	// +kubebuilder:default={matchLabels:{"holdfast.io/voter-eligible":"true"}}
	EligibleSelector *metav1.LabelSelector `json:"eligibleSelector,omitempty"`

	// fitness sets when a voter is unfit.
	// +optional
	// +kubebuilder:default={}
	Fitness FitnessThresholds `json:"fitness,omitempty"`

	// etcd says how the controller reaches the etcd members.
	// +required
	Etcd EtcdAccess `json:"etcd"`

	// host names the systemd units and directory the node plugin switches.
	// +optional
	// +kubebuilder:default={}
	Host HostRoleSettings `json:"host,omitempty"`
}

// FitnessThresholds decide when a voter is unfit, over a window.
type FitnessThresholds struct {
	// windowSeconds over which probe results are judged.
	// +optional
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=60
	WindowSeconds int32 `json:"windowSeconds,omitempty"`
	// maxFsyncMillis is the highest acceptable fsync latency (p99) on the
	// member data directory.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	MaxFsyncMillis int32 `json:"maxFsyncMillis,omitempty"`
	// maxPeerRTTMillis is the highest acceptable round trip to the peers.
	// +optional
	// +kubebuilder:default=50
	// +kubebuilder:validation:Minimum=1
	MaxPeerRTTMillis int32 `json:"maxPeerRTTMillis,omitempty"`
}

// EtcdAccess says where etcd answers and with which client certificate.
type EtcdAccess struct {
	// endpoints are client URLs of members to reach etcd by at first. The
	// voter controller and the node plugin follow the live member list
	// from there (status.clientURLs, and each member list they read), so
	// this list may name members that swaps have replaced.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:XValidation:rule="self.startsWith('https://') || self.startsWith('http://')",message="must be an http:// or https:// URL"
	// +kubebuilder:validation:items:MaxLength=512
	Endpoints []string `json:"endpoints"`
	// clientCertSecretRef names a Secret with tls.crt, tls.key and ca.crt.
	// +optional
	ClientCertSecretRef *corev1.SecretReference `json:"clientCertSecretRef,omitempty"`
}

// Actuators the node plugin switches a host's role with.
const (
	// ActuatorSystemd starts and stops the server and agent units over
	// D-Bus (k3s-style hosts).
	ActuatorSystemd = "Systemd"
	// ActuatorStaticPod writes and removes the etcd and kube-apiserver
	// static pod manifests the kubelet runs (kubeadm's stacked etcd).
	ActuatorStaticPod = "StaticPod"
)

// HostRoleSettings names what the node plugin switches on a host.
// +kubebuilder:validation:XValidation:rule="!has(self.actuator) || self.actuator != 'StaticPod' || has(self.staticPod)",message="staticPod is required when actuator is StaticPod",fieldPath=".staticPod"
// +kubebuilder:validation:XValidation:rule="!has(self.staticPod) || (has(self.actuator) && self.actuator == 'StaticPod')",message="staticPod is set only when actuator is StaticPod",fieldPath=".staticPod"
type HostRoleSettings struct {
	// actuator says how the node plugin switches the host's role: Systemd
	// (the server and agent units) or StaticPod (the kubelet's etcd and
	// kube-apiserver manifests, kubeadm's stacked etcd). One etcd cluster
	// has one topology, so it is one setting for every node.
	// +optional
	// +kubebuilder:default=Systemd
	// +kubebuilder:validation:Enum=Systemd;StaticPod
	Actuator string `json:"actuator,omitempty"`
	// staticPod configures the StaticPod actuator.
	// +optional
	StaticPod *StaticPodSettings `json:"staticPod,omitempty"`
	// serverUnit is the systemd unit of the server (etcd member).
	// +optional
	// +kubebuilder:default="k3s.service"
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9:_.@-]+\.service$`
	ServerUnit string `json:"serverUnit,omitempty"`
	// agentUnit is the systemd unit of the agent.
	// +optional
	// +kubebuilder:default="k3s-agent.service"
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9:_.@-]+\.service$`
	AgentUnit string `json:"agentUnit,omitempty"`
	// memberDataDir is the etcd member's data directory on the host. Empty:
	// the actuator's default, k3s's /var/lib/rancher/k3s/server/db with
	// Systemd, kubeadm's /var/lib/etcd with StaticPod
	// (MemberDataDirOrDefault).
	// +optional
	// +kubebuilder:validation:Pattern=`^/`
	MemberDataDir string `json:"memberDataDir,omitempty"`
	// serverTombstone is the file the server writes itself when its member
	// is removed; a host where it exists never starts its server. Empty:
	// etcd/tombstone under memberDataDir (k3s's server/db/etcd/tombstone).
	// +optional
	// +kubebuilder:validation:Pattern=`^/`
	ServerTombstone string `json:"serverTombstone,omitempty"`
}

// Member data directories of the actuators' hosts, when
// spec.host.memberDataDir is empty.
const (
	// DefaultMemberDataDirSystemd is k3s's (server/db).
	DefaultMemberDataDirSystemd = "/var/lib/rancher/k3s/server/db"
	// DefaultMemberDataDirStaticPod is kubeadm's (etcd.local.dataDir).
	DefaultMemberDataDirStaticPod = "/var/lib/etcd"
)

// DefaultMemberDataDir is the member data directory of actuator's hosts:
// kubeadm's for StaticPod, k3s's otherwise (Systemd, the default).
func DefaultMemberDataDir(actuator string) string {
	if actuator == ActuatorStaticPod {
		return DefaultMemberDataDirStaticPod
	}
	return DefaultMemberDataDirSystemd
}

// MemberDataDirOrDefault is memberDataDir, or when it is empty the
// default of the actuator (DefaultMemberDataDir). The default is here, not
// in the CRD: a CRD default cannot follow another field.
func (h HostRoleSettings) MemberDataDirOrDefault() string {
	if h.MemberDataDir != "" {
		return h.MemberDataDir
	}
	return DefaultMemberDataDir(h.Actuator)
}

// StaticPodSettings are the kubeadm layout the StaticPod actuator writes
// into. The node plugin issues the member's certificates from the etcd CA
// under pkiDir (etcd/ca.crt, etcd/ca.key) and writes the etcd manifest
// itself; the kube-apiserver manifest is the operator's, copied from
// apiServerTemplate.
type StaticPodSettings struct {
	// etcdImage is the image of the etcd static pod (registry.k8s.io/etcd
	// of the cluster's kubeadm version).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	EtcdImage string `json:"etcdImage"`
	// manifestsDir is the kubelet's staticPodPath.
	// +optional
	// +kubebuilder:default="/etc/kubernetes/manifests"
	// +kubebuilder:validation:Pattern=`^/`
	ManifestsDir string `json:"manifestsDir,omitempty"`
	// pkiDir is kubeadm's certificate directory (etcd/ca.crt and etcd/ca.key
	// under it).
	// +optional
	// +kubebuilder:default="/etc/kubernetes/pki"
	// +kubebuilder:validation:Pattern=`^/`
	PKIDir string `json:"pkiDir,omitempty"`
	// apiServerTemplate is the kube-apiserver manifest a promoted host runs,
	// provisioned by the operator; a host without it is not provisioned.
	// +optional
	// +kubebuilder:default="/etc/kubernetes/holdfast/kube-apiserver.yaml"
	// +kubebuilder:validation:Pattern=`^/`
	APIServerTemplate string `json:"apiServerTemplate,omitempty"`
}

// ProposedSwap is an automatic swap the controller would carry out.
type ProposedSwap struct {
	// +required
	Outgoing string `json:"outgoing"`
	// +optional
	Incoming string `json:"incoming,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +required
	At metav1.Time `json:"at"`
}

// SwapOutcome records the last finished swap.
type SwapOutcome struct {
	// name of the VoterSwap.
	// +required
	Name string `json:"name"`
	// +optional
	SwapID string `json:"swapID,omitempty"`
	// +required
	Phase SwapPhase `json:"phase"`
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
}

// VoterPolicyStatus is what the voter controller observed.
type VoterPolicyStatus struct {
	// observedGeneration is the spec generation last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// voters are the nodes whose members vote, by etcd's own member list.
	// +optional
	// +listType=set
	Voters []string `json:"voters,omitempty"`
	// learners are the nodes whose members are learners.
	// +optional
	// +listType=set
	Learners []string `json:"learners,omitempty"`
	// clientURLs are the voters' client URLs, from etcd's own member list
	// (learners left out: they do not answer a linearizable member list).
	// The node plugins reach etcd through them and spec.etcd.endpoints.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=512
	ClientURLs []string `json:"clientURLs,omitempty"`
	// leader is the node of the etcd leader.
	// +optional
	Leader string `json:"leader,omitempty"`
	// clusterID is the etcd cluster ID (hex) the members report. A node
	// whose tombstone names this cluster never becomes a candidate again.
	// +optional
	ClusterID string `json:"clusterID,omitempty"`
	// evenSince is when the voter count became even; unset while odd.
	// +optional
	EvenSince *metav1.Time `json:"evenSince,omitempty"`
	// proposedSwap is the automatic swap dryRun held back.
	// +optional
	ProposedSwap *ProposedSwap `json:"proposedSwap,omitempty"`
	// lastSwap is the last finished swap.
	// +optional
	LastSwap *SwapOutcome `json:"lastSwap,omitempty"`
	// observedTime is when the voter controller last observed etcd for this
	// status (stamped at least every 15 s while it runs). Admission refuses
	// a swap while it is over a minute old: the status is stale and says
	// nothing about etcd now.
	// +optional
	ObservedTime *metav1.Time `json:"observedTime,omitempty"`
	// conditions of the policy: EtcdHealthy, VotersEven, AutomaticSwap.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// VoterPolicy configures voter swaps. A singleton named "default".
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=holdfast
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'default'",message="VoterPolicy is a singleton: its name must be default"
// +kubebuilder:printcolumn:name="Target",type=integer,JSONPath=`.spec.targetVoters`
// +kubebuilder:printcolumn:name="Voters",type=string,JSONPath=`.status.voters`
// +kubebuilder:printcolumn:name="Leader",type=string,JSONPath=`.status.leader`
// +kubebuilder:printcolumn:name="DryRun",type=boolean,JSONPath=`.spec.dryRun`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VoterPolicy struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec VoterPolicySpec `json:"spec"`
	// +optional
	Status VoterPolicyStatus `json:"status,omitempty"`
}

// VoterPolicyList is a list of VoterPolicies.
//
// +kubebuilder:object:root=true
type VoterPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VoterPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&VoterPolicy{}, &VoterPolicyList{})
}

// MemberEndpoints are the client URLs to reach etcd by: the voters' as the
// voter controller last read them (status.clientURLs), then
// spec.etcd.endpoints, without repeats. A client also tries the members
// it learned itself first: see the node plugin and the voter controller.
func (p *VoterPolicy) MemberEndpoints() []string {
	var out []string
	for _, u := range append(slices.Clone(p.Status.ClientURLs), p.Spec.Etcd.Endpoints...) {
		if u != "" && !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out
}
