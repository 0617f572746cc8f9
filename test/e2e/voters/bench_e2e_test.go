//go:build e2e

package voters

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/e2e/scenario"
	"github.com/holdfast-io/holdfast/test/etcdwatch"
)

// BenchmarkVoterSwapPhases accounts for every second of a voter swap on
// real kubelets (issue 26): per iteration the first voter is swapped for
// the node that is not one, while a writer puts a key every 50 ms, and the
// swap's phases are read from what the cluster recorded (scenario.SwapPhases:
// the VoterSwap's history and the node plugins' reports, whole seconds).
// Each phase is reported as its median over the iterations ("s-<phase>",
// what it waits for in scenario's table), with the median and the largest
// swap (creation -> finished) and the writer's longest stall over all of
// them. No write may fail or be lost, as in the drills.
// HOLDFAST_E2E_INSTALL=chart runs it against the chart-installed
// components, the demo's (the node plugin's default report interval).
func BenchmarkVoterSwapPhases(b *testing.B) {
	by := map[string][]time.Duration{}
	var total []time.Duration
	var stall time.Duration
	for i := 0; i < b.N; i++ {
		cli, err := world.EtcdClient(world.EtcdEndpoints()...)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		before, learners, _, err := scenario.EtcdMembers(ctx, cli)
		if err != nil || len(learners) > 0 {
			b.Fatalf("members: voters %v learners %v: %v", before, learners, err)
		}
		if err := world.WaitVotersHealthy(ctx, 2*time.Minute, before...); err != nil {
			b.Fatal(err)
		}
		out, in := before[0], ""
		for _, n := range world.NodeNames {
			if world.Nodes[n].Host != nil && !slices.Contains(before, n) {
				in = n
			}
		}
		if err := world.WaitProvisioned(ctx, in, 2*time.Minute); err != nil {
			b.Fatal(err)
		}
		x := etcdwatch.Watch(cli, "/holdfast-writer/bench-swap/")
		name, err := createSwapB(ctx, out, in)
		if err != nil {
			b.Fatal(err)
		}
		if err := waitSucceeded(ctx, name); err != nil {
			b.Fatal(err)
		}
		n, bad := x.Q.Stop()
		r, err := x.W.Stop(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(r.Lost) > 0 || len(r.Failed) > 0 || r.NotLinearizable != nil || len(bad) > 0 {
			b.Fatalf("swap %s -> %s: writer %s; %d of %d quorum samples without a voter leader", out, in, r, len(bad), n)
		}
		ph, err := world.SwapPhases(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("swap %d, %s -> %s: %.0fs, writer: %s\n%s", i, out, in, ph.Total.Seconds(), r, ph)
		for k, d := range ph.ByName() {
			by[k] = append(by[k], d)
		}
		total = append(total, ph.Total)
		stall = max(stall, r.Longest)
		cli.Close()
		cancel()
	}
	for _, k := range scenario.SwapPhaseNames() {
		if ds := by[k]; len(ds) > 0 {
			b.ReportMetric(median(ds).Seconds(), "s-"+k)
		}
	}
	b.ReportMetric(median(total).Seconds(), "s-median-swap")
	b.ReportMetric(slices.Max(total).Seconds(), "s-max-swap")
	b.ReportMetric(float64(stall.Milliseconds()), "ms-longest-stall")
}

func createSwapB(ctx context.Context, out, in string) (string, error) {
	s := &holdfastv1.VoterSwap{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-" + out + "-"},
		Spec: holdfastv1.VoterSwapSpec{Outgoing: out, Incoming: in, Reason: "e2e benchmark", Origin: holdfastv1.SwapManual}}
	err := world.Client.Create(ctx, s)
	return s.Name, err
}

// waitSucceeded waits for the swap to finish, as Succeeded (a read the
// apiserver cannot answer while its etcd changes members is tried again).
func waitSucceeded(ctx context.Context, name string) error {
	s := &holdfastv1.VoterSwap{}
	for {
		err := world.Client.Get(ctx, client.ObjectKey{Name: name}, s)
		switch {
		case err == nil && s.Status.Phase.Finished():
			if s.Status.Phase != holdfastv1.SwapSucceeded {
				return fmt.Errorf("swap %s finished %s: %s\nhistory:\n%s\nnodes:\n%s", name, s.Status.Phase, describe(s), history(s), nodeReports())
			}
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("swap %s: %w; last read %v: %s\nhistory:\n%s", name, ctx.Err(), err, describe(s), history(s))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// median of ds (the lower middle one for an even count).
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}
