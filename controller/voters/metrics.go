package voters

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics of the voter controller. The chart's alerts read two of them:
//
//	HoldfastSwapOverdue:     max by (swap) (time() - holdfast_voters_swap_step_deadline_timestamp_seconds) > 0
//	HoldfastEvenVoterCount:  max(holdfast_voters_even) == 1
var (
	stepDeadline = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "holdfast_voters_swap_step_deadline_timestamp_seconds",
		Help: "Deadline of the current step of the swap in progress (Unix seconds), by swap ID; absent when no swap runs.",
	}, []string{"swap"})
	votersEven = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "holdfast_voters_even",
		Help: "1 while etcd has an even number of voters (a swap stopped between promotion and removal), else 0.",
	})
	votersGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "holdfast_voters_count",
		Help: "etcd voters by etcd's own member list.",
	})
	learnersGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "holdfast_voters_learners",
		Help: "etcd learners by etcd's own member list.",
	})
	etcdHealthy = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "holdfast_etcd_healthy",
		Help: "1 when every etcd member answers, they agree on a leader and there is no learner or unstarted member.",
	})
	swapsFinished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_voters_swaps_finished_total",
		Help: "Swaps finished, by phase (Succeeded, RolledBack, Abandoned, Refused).",
	}, []string{"phase"})
	actionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_voters_swap_actions_total",
		Help: "Actions the voter controller carried out, by kind and result (ok, error).",
	}, []string{"kind", "result"})
	passesTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "holdfast_voters_passes_total",
		Help: "Passes of the voter controller (each observes etcd and refreshes VoterPolicy status); flat while it cannot hold its election or read the apiserver.",
	})
	stepSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "holdfast_voters_swap_step_duration_seconds",
		Help:    "How long each finished swap step took.",
		Buckets: []float64{0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800},
	}, []string{"step"})
)

func init() {
	metrics.Registry.MustRegister(stepDeadline, votersEven, votersGauge, learnersGauge, etcdHealthy, swapsFinished, actionsTotal, passesTotal, stepSeconds)
}
