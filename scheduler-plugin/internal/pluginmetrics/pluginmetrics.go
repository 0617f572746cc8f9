// Package pluginmetrics holds the holdfast plugins' metrics, registered in
// kube-scheduler's legacy registry, which it serves on /metrics. Labels are
// fixed codes (plugin names, reason classes, outcomes), never node, pod or
// unit names, so the scheduler's series stay bounded in any cluster.
package pluginmetrics

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	// FilterRefusals counts nodes a plugin's Filter refused, by reason
	// class.
	FilterRefusals = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "holdfast_scheduler_filter_refusals_total",
		Help:           "Nodes a holdfast plugin's Filter refused for a pod, by plugin and reason class. UnitPlacement: not_primary, not_target, bound_elsewhere (the binding records another node), node_being_left, tried (already tried in this failover), not_warm_standby (a warm standby pod off the standby it names, or a standby that may not keep it), not_ready, cordoned, untolerated_taint. StandbyColocation: hosts_other_runtime. VoterEligibility: not_voter_eligible, pinned, not_provisioned, not_ready, etcd_member (a voter or learner already), tombstone (carries a tombstone of this cluster). UnitPlacement narrows a cycle to the nodes its rules consider, so nodes outside them are not counted here.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"plugin", "reason"})
	// BindingRecords counts UnitPlacement's writes of a runtime's node into
	// its Unit's binding, by outcome.
	BindingRecords = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "holdfast_scheduler_binding_records_total",
		Help:           "UnitPlacement's records of a runtime pod's node in its Unit's binding before the pod is bound, by outcome: recorded, already_recorded (an earlier attempt of the same pod recorded it), refused (the epoch or node is no longer the pod's to take; the pod is not bound), error (the apiserver did not take the write; the pod is retried). A rise of refused is racing schedulers or a binding that moved on.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"outcome"})
)

// The outcomes of BindingRecords.
const (
	Recorded        = "recorded"
	AlreadyRecorded = "already_recorded"
	Refused         = "refused"
	Error           = "error"
)

var once sync.Once

// Register registers the metrics once, however many profiles instantiate
// the plugins.
func Register() {
	once.Do(func() { legacyregistry.MustRegister(FilterRefusals, BindingRecords) })
}
