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

func init() { metrics.Registry.MustRegister(fences) }
