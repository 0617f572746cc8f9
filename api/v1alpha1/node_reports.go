package v1alpha1

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ActuatorReport is the node plugin's report of the last role step it acted
// on, the JSON value of AnnotationActuator on its own Node.
type ActuatorReport struct {
	// Swap is the swap ID the step belongs to (AnnotationRoleSwap); empty
	// for a step that needs none (finish-demote after a tombstone).
	Swap string `json:"swap,omitempty"`
	// Step is the role step (RoleStep* values).
	Step string `json:"step"`
	// Phase is running, done, failed or refused (Actuator* values).
	Phase string `json:"phase"`
	// Role is the role the host's role file names after the step.
	Role string `json:"role,omitempty"`
	// StartedAt is when the server unit was last started by a promote; the
	// controller waits for a Ready heartbeat after it.
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// At is when the report was written.
	At metav1.Time `json:"at"`
	// Message says why, for a failed or refused step, in a person's words.
	Message string `json:"message,omitempty"`
}

// Tombstone records an etcd member that was removed from its cluster, the
// JSON value of AnnotationTombstone. A host with a tombstone never starts its
// server unit (docs/design.md §5).
type Tombstone struct {
	// MemberID is the removed member's ID, in hex as etcdctl prints it.
	MemberID string `json:"memberID"`
	// ClusterID is the ID of the cluster it was removed from, in hex.
	ClusterID string `json:"clusterID"`
	// At is when the removal was seen.
	At metav1.Time `json:"at"`
	// How the removal was seen.
	How string `json:"how,omitempty"`
}

// Fitness is the node's latest fitness probe results, the JSON value of
// AnnotationFitness.
type Fitness struct {
	// FsyncP99Micros is the 99th percentile latency of O_DSYNC writes of
	// etcd's WAL page size in the member data directory.
	FsyncP99Micros int64 `json:"fsyncP99Micros"`
	// FsyncSamples is how many writes the percentile is over.
	FsyncSamples int32 `json:"fsyncSamples"`
	// PeerRTTMicros is the TCP connect round trip to each voter's peer URL,
	// keyed by that URL; -1 when it did not answer.
	PeerRTTMicros map[string]int64 `json:"peerRTTMicros,omitempty"`
	// At is when the probes ran.
	At metav1.Time `json:"at"`
}

// ParseActuatorReport reads an AnnotationActuator value.
func ParseActuatorReport(s string) (*ActuatorReport, error) {
	var r ActuatorReport
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", AnnotationActuator, err)
	}
	return &r, nil
}

// ActuatorReportOf is the node plugin's report among a Node's annotations;
// nil when there is none or it cannot be read (a reader then waits for the
// next one).
func ActuatorReportOf(annotations map[string]string) *ActuatorReport {
	v, ok := annotations[AnnotationActuator]
	if !ok {
		return nil
	}
	r, err := ParseActuatorReport(v)
	if err != nil {
		return nil
	}
	return r
}

// ParseTombstone reads an AnnotationTombstone value.
func ParseTombstone(s string) (*Tombstone, error) {
	var t Tombstone
	if err := json.Unmarshal([]byte(s), &t); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", AnnotationTombstone, err)
	}
	return &t, nil
}

// ParseRoleJoin reads an AnnotationRoleJoin value: the etcd initial-cluster
// form, comma separated `name=peerURL` entries naming every member the
// promoted server joins, itself included. It returns every problem with its
// field path.
func ParseRoleJoin(s string) (map[string]string, field.ErrorList) {
	path := field.NewPath("metadata", "annotations").Key(AnnotationRoleJoin)
	var errs field.ErrorList
	if strings.TrimSpace(s) == "" {
		return nil, field.ErrorList{field.Required(path, "must name the members to join")}
	}
	members := map[string]string{}
	for entry := range strings.SplitSeq(s, ",") {
		name, peer, ok := strings.Cut(strings.TrimSpace(entry), "=")
		if !ok || name == "" {
			errs = append(errs, field.Invalid(path, s, fmt.Sprintf("entry %q must be name=peerURL", entry)))
			continue
		}
		u, err := url.Parse(peer)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, field.Invalid(path, s, fmt.Sprintf("entry %q must have an http:// or https:// peer URL", entry)))
			continue
		}
		if prev, dup := members[name]; dup && prev != peer {
			errs = append(errs, field.Invalid(path, s, fmt.Sprintf("member %q is named twice", name)))
			continue
		}
		members[name] = peer
	}
	return members, errs
}

// RuntimesReport is the node plugin's list of the unit runtimes on its
// host, the JSON value of AnnotationRuntimes on its own Node. It is read
// from the container runtime (CRI), not from Pod objects, so a runtime whose
// Pod object was removed without the kubelet (a deleted Node, a forced
// delete) is still listed while it runs.
type RuntimesReport struct {
	// At is when the host was listed, on the node's clock (for people:
	// holdfast compares no clocks across machines; Answers orders the
	// listing after a hand-over's podGoneAt).
	At metav1.Time `json:"at"`
	// Runtimes are the runtime pods on the host whose sandbox is ready or
	// has a container that has not exited.
	Runtimes []NodeRuntime `json:"runtimes"`
	// Answers are the hand-overs this listing answers: each unit bound to
	// this node whose binding's handOver.podGoneAt the plugin read before it
	// listed the host, with that time.
	Answers []RuntimesAnswer `json:"answers,omitempty"`
}

// NodeRuntime is one runtime pod on a host.
type NodeRuntime struct {
	Namespace string `json:"namespace"`
	Unit      string `json:"unit"`
	Epoch     int64  `json:"epoch"`
	Pod       string `json:"pod,omitempty"`
	PodUID    string `json:"podUID,omitempty"`
}

// RuntimesAnswer names a hand-over a RuntimesReport answers.
type RuntimesAnswer struct {
	Namespace string      `json:"namespace"`
	Unit      string      `json:"unit"`
	PodGoneAt metav1.Time `json:"podGoneAt"`
}

// RuntimesReportOf is the node plugin's runtimes report among a Node's
// annotations; nil when there is none or it cannot be read (a reader then
// has no evidence and waits for the next one).
func RuntimesReportOf(annotations map[string]string) *RuntimesReport {
	v, ok := annotations[AnnotationRuntimes]
	if !ok {
		return nil
	}
	var r RuntimesReport
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return nil
	}
	return &r
}
