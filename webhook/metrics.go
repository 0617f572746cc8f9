package webhook

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// The admission metrics every path's handler records, whether or not they
// are registered (the suite's in-process server registers them nowhere).
var (
	admissionRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_webhook_admission_requests_total",
		Help: "Admission requests answered, by resource (nodes, leases, units, voterswaps, pods, pods/binding), operation, allowed (true, false) and reason: empty when allowed, else the refusal's API status reason (Forbidden: a policy rule; Invalid: a malformed value; InternalError: the webhook could not read what it needed and failed closed). A rise of InternalError is the webhook failing, not people being refused.",
	}, []string{"resource", "operation", "allowed", "reason"})
	admissionDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "holdfast_webhook_admission_duration_seconds",
		Help:    "How long the webhook took to answer an admission request, by resource. The apiserver gives up after the configuration's timeoutSeconds and, failing closed, refuses the change.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"resource"})
)

// RegisterAdmissionMetrics registers holdfast_webhook_admission_requests_total
// and holdfast_webhook_admission_duration_seconds on reg.
func RegisterAdmissionMetrics(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{admissionRequests, admissionDuration} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// pathResources is the resource label of each path: a fixed set, whatever
// a request names.
var pathResources = map[string]string{
	PathNode:       "nodes",
	PathLease:      "leases",
	PathUnit:       "units",
	PathVoterSwap:  "voterswaps",
	PathPod:        "pods",
	PathPodBinding: "pods/binding",
}

// measured records each answer of next under resource.
type measured struct {
	resource string
	next     admission.Handler
}

func (m measured) Handle(ctx context.Context, req admission.Request) admission.Response {
	start := time.Now()
	res := m.next.Handle(ctx, req)
	admissionDuration.WithLabelValues(m.resource).Observe(time.Since(start).Seconds())
	reason := ""
	if !res.Allowed {
		reason = "Unknown"
		if res.Result != nil && res.Result.Reason != "" {
			reason = string(res.Result.Reason)
		}
	}
	admissionRequests.WithLabelValues(m.resource, string(req.Operation), strconv.FormatBool(res.Allowed), reason).Inc()
	return res
}
