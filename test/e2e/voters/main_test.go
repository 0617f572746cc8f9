//go:build e2e

// Package voters holds the voter drills: holdfast-controller --role voters
// swapping the etcd members of a real cluster's own control plane. The
// kube-apiserver's etcd is three members, each the server unit of its
// node's systemd (test/dbusdouble's Manager on the node's private bus) in
// the node's network namespace, and holdfast-node, a pod on each real
// kubelet, carries out the host half of every step. A fourth node is a
// voter-eligible standby. The drills watch etcd with a writer and a quorum
// sampler, and the swap through its status, Events and metrics.
//
// Its own package (and cluster) so the failover drills' link cuts never
// touch a voter; it runs under make test-e2e only.
package voters

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/holdfast-io/holdfast/test/e2e/scenario"
)

var world *scenario.World

// The nodes: three voters and a voter-eligible standby.
var (
	voterNodes   = []string{"cp-a", "cp-b", "cp-c"}
	standbyNodes = []string{"cp-d"}
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	start := time.Now()
	logf := func(f string, a ...any) {
		fmt.Fprintf(os.Stderr, "e2e-voters %6.1fs: %s\n", time.Since(start).Seconds(), fmt.Sprintf(f, a...))
	}
	w, err := scenario.Up(ctx, scenario.Options{Nodes: append(append([]string{}, voterNodes...), standbyNodes...),
		Controllers: 1, Logf: logf, Voters: &scenario.VotersOptions{Voters: voterNodes, Standbys: standbyNodes}})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e-voters: starting the cluster: %v\n", err)
		os.Exit(1)
	}
	world = w
	logf("cluster up")
	code := m.Run()
	logf("drills done; stopping the cluster")
	if err := w.Down(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e-voters: stopping the cluster: %v\n", err)
		if code == 0 {
			code = 1
		}
	} else {
		logf("cluster stopped; nothing left behind")
	}
	os.Exit(code)
}
