package report

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The kinds of report the reporter publishes on its Node.
const (
	KindProvisioned = "provisioned"
	KindRole        = "role"
	KindTombstone   = "tombstone"
	KindFitness     = "fitness"
)

// reports counts the reports written and those a pass could not bring up to
// date: the voter controller, the scheduler and the webhook judge this host
// by them, so reports that stop landing matter before anything else fails.
var reports = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "holdfast_node_reports_total",
	Help: "The node plugin's reports on its own Node, by kind (provisioned, role, tombstone, fitness) and result: written (a changed value the Node took; an unchanged one is neither written nor counted) or failed (a pass could not bring it up to date: the host could not be read, the fitness probe failed, or the Node could not be read or patched; the next pass tries again). Failures that go on leave the voter controller, the scheduler and the webhook judging this host by old reports.",
}, []string{"kind", "result"})

func init() { metrics.Registry.MustRegister(reports) }

// tally is one pass's account of its reports: those still to judge, and
// those changed and put in the Node's patch.
type tally struct{ open, changed []string }

// settle marks kind judged: unchanged, or with nothing to publish.
func (t *tally) settle(kind string) {
	for i, k := range t.open {
		if k == kind {
			t.open = append(t.open[:i], t.open[i+1:]...)
			return
		}
	}
}

// change marks kind judged and in the patch.
func (t *tally) change(kind string) {
	t.settle(kind)
	t.changed = append(t.changed, kind)
}

// fail counts kind failed and judged.
func (t *tally) fail(kind string) {
	t.settle(kind)
	reports.WithLabelValues(kind, "failed").Inc()
}

// finish counts the pass's reports: the changed ones written when the pass
// ended without err; with err, every one not yet judged or not written
// failed.
func (t *tally) finish(err error) {
	result := "written"
	if err != nil {
		result = "failed"
		for _, k := range t.open {
			reports.WithLabelValues(k, result).Inc()
		}
	}
	for _, k := range t.changed {
		reports.WithLabelValues(k, result).Inc()
	}
}
