package leadership

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	leaderGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "holdfast_grantor_leader",
		Help: "1 while this process holds the grantor's leadership, 0 otherwise (also 0 while standing down).",
	})
	standingDown = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "holdfast_grantor_standing_down",
		Help: "1 while this process, having lost leadership without being asked, goes on renewing what it holds.",
	})
	leadershipLosses = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "holdfast_grantor_leadership_losses_total",
		Help: "Times this process lost the grantor's leadership without being asked.",
	})
)

func init() {
	metrics.Registry.MustRegister(leaderGauge, standingDown, leadershipLosses)
}
