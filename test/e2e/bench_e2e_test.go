//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/e2e/scenario"
)

// benchRuns numbers the benchmark's runs (the testing package runs it with
// b.N = 1 first), so every iteration's namespace is new.
var benchRuns int

// BenchmarkNodeCutFailover measures, per iteration, a unit's failover on
// real kubelets from its primary's link going down to the standby's runtime
// holding the lease (the controller's LeaseReestablished Event), for a 10s
// lease (hold bound 5s, margin 5s). It reports the seconds and their ratio
// to lease + hold bound, the yardstick (goal: median <= 1.15x plus
// the runtime's start-up). Each iteration is a fresh unit in its own
// namespace; run with -benchtime=Nx.
func BenchmarkNodeCutFailover(b *testing.B) {
	benchRuns++
	const leaseSeconds = 10
	lease := leaseSeconds * time.Second
	var total time.Duration
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		u, err := world.CreateUnit(ctx, scenario.UnitOptions{Namespace: fmt.Sprintf("bench-cut-%d-%d", benchRuns, i), Name: "kiln",
			LeaseSeconds: leaseSeconds, Primary: world.NodeNames[0], Targets: world.NodeNames[1:]})
		if err != nil {
			b.Fatal(err)
		}
		b1, err := u.WaitHeld(ctx, 1, 3*time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		node := world.Nodes[b1.Node]
		if err := node.Cut(); err != nil {
			b.Fatal(err)
		}
		cutAt := time.Now()
		_, err = u.WaitHeld(ctx, 2, 5*time.Minute)
		if merr := node.Mend(); merr != nil {
			b.Error(merr)
		}
		if err != nil {
			b.Fatal(err)
		}
		evs, err := u.Events(ctx)
		if err != nil {
			b.Fatal(err)
		}
		var took time.Duration
		for _, e := range evs {
			if e.Reason == evLeaseReestablished {
				took = e.EventTime.Sub(cutAt)
			}
		}
		if took <= 0 {
			b.Fatalf("no %s Event after the cut", evLeaseReestablished)
		}
		b.Logf("failover %d: %.2fs (%.2fx lease + hold bound)", i, took.Seconds(), took.Seconds()/(lease+holdfastv1.HoldBound(lease)).Seconds())
		total += took
		if err := u.Delete(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
	mean := total / time.Duration(b.N)
	b.ReportMetric(mean.Seconds(), "s/failover")
	b.ReportMetric(mean.Seconds()/(lease+holdfastv1.HoldBound(lease)).Seconds(), "x(lease+hold)")
}
