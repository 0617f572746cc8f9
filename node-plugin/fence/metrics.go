package fence

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// fences counts the runtimes this node's fence agent stopped: each one is a
// runtime that still ran past its binding or its lease, which an operator
// wants to hear of beside the Event and the audit line.
var fences = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "holdfast_node_fences_total",
	Help: "Runtime sandboxes this node's fence agent stopped, by unit and reason (StaleRuntimeStopped: an epoch behind its unit's binding; WedgedRuntimeStopped: past its lease deadline and hold bound, not fenced, while the apiserver was out of reach).",
}, []string{"namespace", "unit", "reason"})

// fenceFailures counts fence actions CRI did not carry out: the runtime may
// still run, so each one is worse news than a fence.
var fenceFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "holdfast_node_fence_failures_total",
	Help: "Fence actions this node's fence agent could not finish, by unit and reason (StaleRuntimeStopped, WedgedRuntimeStopped): the container runtime did not list, stop or remove the runtime's containers or sandbox. The runtime may still run; the agent tries again on its next pass (a stale one at least every second). Any rise points at the node's container runtime.",
}, []string{"namespace", "unit", "reason"})

func init() { metrics.Registry.MustRegister(fences, fenceFailures) }
