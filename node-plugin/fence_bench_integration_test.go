//go:build integration

package nodeplugin_test

import (
	"path/filepath"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/fence"
)

// BenchmarkFenceAfterBindingChange measures, on real containerd and runc,
// the time from the write of a new binding epoch to the old runtime's
// container no longer running (stop/op) and to its sandbox removed
// (removed/op). Run: go test -tags integration -run '^$' -bench Fence
// -benchtime 5x ./node-plugin/
func BenchmarkFenceAfterBindingChange(b *testing.B) {
	r := newRig(b)
	port := freePort(b)
	u := r.unit("bench", holdfastv1.Failover, port, 1)
	agent := &fence.Agent{CRI: r.rt, Lease: fence.HTTPLease{}, Clock: clocktesting.NewFakeClock(time.Now()), AuditDir: filepath.Join(r.dir, "audit")}
	startManager(b, func(mgr ctrl.Manager) error {
		agent.Units = fence.CacheUnits{Client: mgr.GetClient()}
		return (&fence.UnitReconciler{Agent: agent}).SetupWithManager(mgr)
	})
	var stop, removed time.Duration
	epoch, n := int64(1), 0
	for b.Loop() {
		b.StopTimer()
		sb, c := r.runtime("bench", epoch, port, holdfastv1.Failover)
		b.StartTimer()
		start := time.Now()
		r.bind(u, epoch+1)
		for r.running(c) {
			time.Sleep(2 * time.Millisecond)
		}
		stop += time.Since(start)
		for !r.sandboxGone(sb) {
			time.Sleep(2 * time.Millisecond)
		}
		removed += time.Since(start)
		epoch++
		n++
	}
	b.ReportMetric(float64(stop.Microseconds())/1000/float64(n), "ms-to-stop/op")
	b.ReportMetric(float64(removed.Microseconds())/1000/float64(n), "ms-to-removed/op")
}
