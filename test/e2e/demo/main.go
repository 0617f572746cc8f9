// Command demo is `make demo`: it installs holdfast with its chart (helm
// install charts/holdfast, every component's image built here) on a local
// cluster of real kubelets (test/cluster: four nodes each in its own network
// and mount namespace, the apiserver's etcd members running on edge-b..d as
// their systemd's server unit), creates a Failover unit driving a simulated
// Modbus device, cuts the primary node's links, and prints the failover's
// timeline as the cluster recorded it: the unit's Events, the device's own
// write log and the node plugin's fence audit. Then holdfast-controller
// --role voters swaps edge-a, back from its cut, into the etcd voters for
// edge-d, and the demo prints the swap's steps and what a writer saw. It
// then leaves the cluster up, prints how to reach it, and removes
// everything on Ctrl-C.
//
// It needs root (namespaces, cgroups) and the binaries of make k8s-bin
// cri-bin cni-bin.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/e2e/scenario"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

type entry struct {
	at   time.Time
	what string
}

func run() error {
	// The harness's clients log nothing of their own.
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	logf := func(f string, a ...any) {
		fmt.Printf("[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(f, a...))
	}
	upCtx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	w, err := scenario.Up(upCtx, scenario.Options{Nodes: demoNodes, Voters: demoVoters, Install: scenario.Chart, Logf: logf})
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("demo: stopping the cluster")
		if err := w.Down(); err != nil {
			fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		} else {
			fmt.Println("demo: stopped; nothing left behind")
		}
	}()

	if err := failover(ctx, w, logf); err != nil {
		fmt.Fprintf(os.Stderr, "demo: the failover did not complete: %v\n", err)
	}
	fmt.Println()
	// The node that failed is back: it takes edge-d's place among the voters.
	if err := swap(ctx, w, "edge-d", demoVoters.Standbys[0], logf); err != nil {
		fmt.Fprintf(os.Stderr, "demo: the voter swap did not complete: %v\n", err)
	}
	fmt.Println()
	fmt.Printf("The cluster stays up. Its apiserver lives in network namespace %s:\n", w.HubNetns)
	fmt.Printf("  ip netns exec %s kubectl --kubeconfig %s get units -A\n", w.HubNetns, w.Kubeconfig)
	fmt.Println("Ctrl-C stops it and removes everything it made.")
	<-ctx.Done()
	return nil
}

func failover(ctx context.Context, w *scenario.World, logf func(string, ...any)) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	// The least lease the installed grantor keeps through a leader change
	// (the webhook refuses a shorter one).
	lease := w.LeaseFloor()
	// HOLDFAST_DEMO_WARM_STANDBY=true keeps a warm pod on each standby: the
	// failover then promotes one and the phases show no schedule or start.
	warm := os.Getenv("HOLDFAST_DEMO_WARM_STANDBY") == "true"
	u, err := w.CreateUnit(ctx, scenario.UnitOptions{Namespace: "demo", Name: "kiln", LeaseSeconds: lease,
		Primary: w.NodeNames[0], Targets: demoStandbys, WarmStandby: warm})
	if err != nil {
		return err
	}
	logf("created Failover unit demo/kiln (lease %ds, the grantor's floor), primary %s, standbys %v", lease, w.NodeNames[0], demoStandbys)
	b1, err := u.WaitHeld(ctx, 1, 3*time.Minute)
	if err != nil {
		return err
	}
	if err := u.WaitWrites(ctx, b1.Epoch, 5, time.Minute); err != nil {
		return err
	}
	logf("epoch %d holds its lease on %s and drives the device", b1.Epoch, b1.Node)
	if warm {
		pods, err := u.WaitWarmReady(ctx, 3*time.Minute)
		if err != nil {
			return err
		}
		for n, p := range pods {
			logf("warm pod %s ready on standby %s: devices read, no epoch, nothing written", p.Name, n)
		}
	}
	// The lease channel is mutual TLS: the runtime took its
	// certificate from the holdfast.io/lease signer, and takes grants only
	// from the grantor's.
	if code, answer, err := u.BystanderGrant(ctx, b1.Node, b1.Epoch); err == nil {
		logf("a bystander's grant to epoch %d's lease port in plain HTTP: %d %s", b1.Epoch, code, answer)
	}
	// A leader elected moments ago reads no expiry as a fence until its
	// acquisition + stand-down + lease + margin (L6): a failover inside that
	// waits for it (its LeadershipHoldOff Event says until when). The
	// failover shown is one of a settled leader.
	got, err := u.Get(ctx)
	if err != nil {
		return err
	}
	a := got.Spec.Availability
	logf("waiting out the grantor leader's hold-off (its election + stand-down + lease %v + margin %v)", a.LeaseDuration(), a.RebindMargin())
	if err := w.WaitHoldOffOver(ctx, a.LeaseDuration(), a.RebindMargin()); err != nil {
		return err
	}
	node := w.Nodes[b1.Node]
	if err := node.Cut(); err != nil {
		return err
	}
	cutAt := time.Now()
	logf("cut the link of %s", b1.Node)
	b2, err := u.WaitHeld(ctx, 2, 5*time.Minute)
	if err != nil {
		_ = node.Mend()
		return err
	}
	logf("epoch %d holds its lease on %s", b2.Epoch, b2.Node)
	if err := node.Mend(); err != nil {
		return err
	}
	mendAt := time.Now()
	logf("mended the link of %s", b1.Node)
	// Give the node plugin time to hear of the new epoch and stop the stale
	// runtime.
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		acts, _ := w.FenceActions(b1.Node)
		if len(acts) > 0 {
			break
		}
		time.Sleep(time.Second)
	}

	tl := []entry{{cutAt, "link of " + b1.Node + " cut"}, {mendAt, "link of " + b1.Node + " mended"}}
	evs, err := u.Events(ctx)
	if err != nil {
		return err
	}
	for _, e := range evs {
		tl = append(tl, entry{eventTime(e.EventTime.Time, e.DeprecatedFirstTimestamp.Time), fmt.Sprintf("Unit event %s: %s", e.Reason, e.Note)})
	}
	log, err := u.Writes(ctx)
	if err != nil {
		return err
	}
	turns, turnsErr := u.Turns(ctx)
	for _, t := range turns {
		tl = append(tl, entry{t.First, fmt.Sprintf("device: first write of %s", t.Writer.Name)},
			entry{t.Last, fmt.Sprintf("device: last write of %s (%d accepted, %d refused)", t.Writer.Name, t.Accepted, t.Refused)})
	}
	for _, wr := range log {
		if !wr.Accepted {
			tl = append(tl, entry{wr.Time, fmt.Sprintf("device: refused epoch %d (%s)", wr.Epoch, wr.Reason)})
		}
	}
	acts, err := w.FenceActions(b1.Node)
	if err != nil {
		return err
	}
	for _, a := range acts {
		tl = append(tl, entry{a.At, fmt.Sprintf("holdfast-node on %s: %s %s (epoch %d, binding at %d)", b1.Node, a.Reason, a.Pod, a.Epoch, a.BindingEpoch)})
	}
	sort.SliceStable(tl, func(i, j int) bool { return tl[i].at.Before(tl[j].at) })
	fmt.Println()
	fmt.Printf("Timeline of the failover (seconds from the cut; lease %ds, hold bound %v):\n", lease, holdfastv1.HoldBound(time.Duration(lease)*time.Second))
	for _, e := range tl {
		fmt.Printf("  %+7.2fs  %s\n", e.at.Sub(cutAt).Seconds(), e.what)
	}
	// Readiness comes on its probe's period, after the lease maybe.
	_, _ = u.WaitConditionStatus(ctx, holdfastv1.ConditionRuntimeReady, metav1.ConditionTrue, time.Minute)
	if ph, err := u.FailoverPhases(ctx, cutAt, b1.Epoch, b2.Epoch); err != nil {
		fmt.Printf("The phases could not be read: %v\n", err)
	} else {
		fmt.Printf("Phases of the failover (cut -> epoch %d's first device write %.2fs):\n", b2.Epoch, ph.Total().Seconds())
		for _, p := range ph.List() {
			fmt.Printf("  %-9s %6.2fs  %s\n", p.Name, p.D.Seconds(), p.What)
		}
		if !ph.Warm {
			fmt.Printf("  (the pod turned Ready %.2fs after its container started, on its probe's period)\n", ph.ReadyAfterStart().Seconds())
		}
	}
	if turnsErr != nil {
		return fmt.Errorf("two writers on the device: %w", turnsErr)
	}
	fmt.Printf("The device (%s mode) saw one writer at a time.\n", u.Device)
	return nil
}

func eventTime(t, first time.Time) time.Time {
	if !t.IsZero() {
		return t
	}
	return first
}
