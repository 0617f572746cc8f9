package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/e2e/scenario"
)

// The demo's etcd: the apiserver's own members on edge-b, edge-c and
// edge-d, and edge-a (the unit's primary, whose link the failover cuts) a
// voter-eligible standby: a cut member would stall the apiserver's etcd
// client for the whole failover. After the failover edge-a is back and is
// swapped in for edge-d, which hosts no runtime (a drained runtime pod
// would be a second failover).
var (
	demoNodes    = []string{"edge-a", "edge-b", "edge-c", "edge-d"}
	demoVoters   = &scenario.VotersOptions{Voters: []string{"edge-b", "edge-c", "edge-d"}, Standbys: []string{"edge-a"}}
	demoStandbys = []string{"edge-b", "edge-c"}
)

// swap replaces the voter out with in while a writer puts a key every
// 50 ms, and prints the swap's steps as its status recorded them.
func swap(ctx context.Context, w *scenario.World, out, in string, logf func(string, ...any)) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cli, err := w.EtcdClient(w.EtcdEndpoints()...)
	if err != nil {
		return err
	}
	defer cli.Close()
	before, _, clusterID, err := scenario.EtcdMembers(ctx, cli)
	if err != nil {
		return err
	}
	if err := w.WaitVotersHealthy(ctx, 3*time.Minute, before...); err != nil {
		return err
	}
	if err := w.WaitProvisioned(ctx, in, 2*time.Minute); err != nil {
		return err
	}
	logf("etcd voters (the apiserver's own etcd) %v, cluster %x; swapping %s out, %s in", before, clusterID, out, in)
	writer := scenario.StartEtcdWriter(cli, "/holdfast-demo/")
	quorum := scenario.StartQuorumWatch(cli, 200*time.Millisecond)
	s := &holdfastv1.VoterSwap{ObjectMeta: metav1.ObjectMeta{GenerateName: "swap-" + out + "-"},
		Spec: holdfastv1.VoterSwapSpec{Outgoing: out, Incoming: in, Reason: "demo: " + in + " is back", Origin: holdfastv1.SwapManual}}
	if err := w.Client.Create(ctx, s); err != nil {
		return err
	}
	logf("created VoterSwap %s", s.Name)
	step := ""
	for !s.Status.Phase.Finished() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("swap %s at step %s: %w", s.Name, s.Status.Step, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
		if err := w.Client.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
			return err
		}
		if string(s.Status.Step) != step {
			step = string(s.Status.Step)
			logf("swap step %s", step)
		}
	}
	samples, bad := quorum.Stop()
	r, err := writer.Stop(ctx)
	if err != nil {
		return err
	}
	after, learners, id, err := scenario.EtcdMembers(ctx, cli)
	if err != nil {
		return err
	}
	fmt.Println()
	fmt.Printf("Steps of VoterSwap %s (%s), %s:\n", s.Name, s.Status.SwapID, s.Status.Phase)
	for _, h := range s.Status.History {
		fmt.Printf("  %+7.2fs  %-13s %-9s %s: %s\n", h.At.Sub(s.Status.StartedAt.Time).Seconds(), h.Step, h.Outcome, h.Reason, h.Message)
	}
	if ph, err := w.SwapPhases(ctx, s.Name); err != nil {
		fmt.Printf("The swap's phases could not be read: %v\n", err)
	} else {
		fmt.Printf("Phases of the swap (each span: what the controller waited for before its record; whole seconds):\n%s\n", ph)
		fmt.Printf("The swap took %.0fs; the writer's longest stall %v.\n", ph.Total.Seconds(), r.Longest.Round(time.Millisecond))
	}
	fmt.Printf("etcd voters now %v (learners %v), cluster %x (before: %x)\n", after, learners, id, clusterID)
	fmt.Printf("writer: %s\n", r)
	fmt.Printf("quorum: %d samples, %d without a voter leader\n", samples, len(bad))
	if s.Status.Phase != holdfastv1.SwapSucceeded {
		return fmt.Errorf("swap %s", s.Status.Phase)
	}
	if len(r.Lost) > 0 || len(r.Failed) > 0 || len(bad) > 0 || id != clusterID || r.NotLinearizable != nil {
		return fmt.Errorf("lost %v, failed %v, samples without a voter leader %d, cluster %x, history: %v", r.Lost, r.Failed, len(bad), id, r.NotLinearizable)
	}
	return nil
}
