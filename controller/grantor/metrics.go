package grantor

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	renewals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_grantor_renewals_total",
		Help: "Control lease renewal attempts by outcome (Acknowledged, Refused, Unreachable).",
	}, []string{"outcome"})
	renewalSkew = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "holdfast_grantor_renewal_skew_seconds",
		Help:    "How late each renewal attempt went out against its planned time.",
		Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5},
	})
	renewalTimeouts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "holdfast_grantor_renewal_timeouts_total",
		Help: "Renewal attempts that got no answer within their bound. A starved grantor (CPU, network) shows these rising together with holdfast_grantor_renewals_backing_off.",
	})
	backingOff = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "holdfast_grantor_renewals_backing_off",
		Help: "Renewal loops whose last attempt got no answer in time and that are backing off (longer attempt bound; slower retry where the runtime holds no lease). Many at once: the grantor is starved, and healthy runtimes may fence.",
	})
	authFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_grantor_renewal_authentication_failures_total",
		Help: "Renewal attempts that ended because the lease channel did not authenticate, by reason: refused_by_runtime (the runtime refused this grantor's certificate: another CA, expired, or the lease CA rotated before the runtime got the new bundle), runtime_unverified (the endpoint's certificate did not prove it to be the binding's runtime; nothing was sent), not_tls (the endpoint speaks plain HTTP), handshake_failed. Each keeps its unit's runtime from being renewed.",
	}, []string{"reason"})
	loopsGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "holdfast_grantor_renewal_loops",
		Help: "Renewal loops running in this process.",
	})
)

func init() {
	metrics.Registry.MustRegister(renewals, renewalSkew, renewalTimeouts, backingOff, loopsGauge, authFailures)
	for _, r := range []string{authRefusedByRuntime, authRuntimeUnverified, authNotTLS, authHandshake} {
		authFailures.WithLabelValues(r)
	}
}
