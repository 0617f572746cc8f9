//go:build integration

package webhook_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
	"github.com/holdfast-io/holdfast/test/testenv"
)

// L14 through the real apiserver: a unit admitted under a faster grantor
// keeps its lease when the installed grantor's timings raise the floor
// above it; an edit of its spec that leaves the lease below the floor is
// refused and changes nothing, and the same edit that raises the lease to
// the floor is allowed.
func TestAnEditOfAUnitBelowARaisedFloorIsRefused(t *testing.T) {
	kilnCluster(t)
	ns := env.Namespace(t)
	shipped := opts.Grantor
	t.Cleanup(func() { installGrantor(t, shipped) })
	fast := policy.GrantorTimings{ElectionLeaseDuration: 2 * time.Second, ElectionRenewDeadline: 1500 * time.Millisecond,
		ElectionRetryPeriod: 500 * time.Millisecond, ReadIdleTimeout: time.Second, PingTimeout: time.Second, WarmStart: policy.WarmStartBudget}
	if floor, ok := fast.LeaseFloor(); !ok || floor > 20*time.Second {
		t.Fatalf("the faster grantor's floor is %v (%v), want at most 20s", floor, ok)
	}
	installGrantor(t, fast)
	allowed(t, served(t, func() testenv.Result {
		return env.Kubectl().Run(t, unitYAML(ns, "kiln-1", "    mode: Failover\n    leaseDurationSeconds: 20\n    targets: {nodes: [edge-2]}"), "create", "-f", "-")
	}))

	installGrantor(t, shipped)
	patch := func(p string) testenv.Result {
		return env.Kubectl().Run(t, "", "patch", "-n", ns, "unit", "kiln-1", "--type", "merge", "-p", p)
	}
	res := served(t, func() testenv.Result { return patch(`{"spec":{"availability":{"targets":{"nodes":["edge-3"]}}}}`) })
	refusal(t, "unit-edit-below-floor", res, "spec.availability.leaseDurationSeconds: Invalid value: 20: must be at least 30",
		"plus 5s to spare = 19.9s; at 30s it has 20s")
	var u holdfastv1.Unit
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "kiln-1"}, &u); err != nil {
		t.Fatal(err)
	}
	if got := u.Spec.Availability.Targets.Nodes; len(got) != 1 || got[0] != "edge-2" {
		t.Fatalf("a refused edit changed the unit's targets to %v", got)
	}
	allowed(t, patch(`{"spec":{"availability":{"leaseDurationSeconds":30,"targets":{"nodes":["edge-3"]}}}}`))
}

// installGrantor restarts the suite's webhook server as if installed with
// the grantor's timings g.
func installGrantor(t *testing.T, g policy.GrantorTimings) {
	t.Helper()
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	if opts.Grantor == g {
		return
	}
	stopServer()
	opts.Grantor = g
	if err := startServer(); err != nil {
		t.Fatalf("restarting the webhook server: %v", err)
	}
}

// served runs a kubectl request until the apiserver reaches the webhook
// server (a restarted server may miss the first calls), so the answer is
// the rule's, not a failed call.
func served(t *testing.T, run func() testenv.Result) testenv.Result {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res := run()
		if !strings.Contains(res.Stderr, "failed calling webhook") || time.Now().After(deadline) {
			return res
		}
		time.Sleep(200 * time.Millisecond)
	}
}
