package prestage

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// pulls counts pre-staging pulls: a failed one is a re-bind onto this node
// that would wait on the pull, or find no image.
var pulls = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "holdfast_node_image_pulls_total",
	Help: "Runtime image pulls this node made through CRI to pre-stage the image of a unit naming it as a failover target, by result: pulled, failed (the pull was refused or did not finish; retried with backoff). While it fails, a re-bind onto this node waits on the pull, or finds no image.",
}, []string{"result"})

func init() { metrics.Registry.MustRegister(pulls) }
