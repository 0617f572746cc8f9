package role

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// steps counts the role steps' phases as the actuator reports them, so a
// swap's progress on this host (and a step failing over and over) shows
// without reading the Node's annotation.
var steps = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "holdfast_node_actuator_steps_total",
	Help: "Role steps this node's actuator reported on its Node (holdfast.io/actuator), by step (promote, step-down, finish-demote, rollback; unknown for a step it does not know) and phase: running (started), done, failed (retried with backoff), refused (changed nothing; judged again on every Node change and every minute, and counted each time).",
}, []string{"step", "phase"})

func init() { metrics.Registry.MustRegister(steps) }

// stepLabel bounds the step label to the steps there are: the annotation
// is free text.
func stepLabel(step string) string {
	switch step {
	case holdfastv1.RoleStepPromote, holdfastv1.RoleStepStepDown, holdfastv1.RoleStepFinishDemote, holdfastv1.RoleStepRollback:
		return step
	}
	return "unknown"
}
