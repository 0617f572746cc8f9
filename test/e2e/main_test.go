//go:build integration || e2e

// Package e2e holds the drills: holdfast on real kubelets (test/cluster)
// with faults injected the way nodes and networks fail, each asserted from
// the outside: the device's own write log, the Unit's status and Events,
// the controllers' metrics. One cluster serves the package; every drill has
// its own namespace, unit and device, and puts back what it broke.
//
// The whole matrix runs under the e2e build tag (make test-e2e).
package e2e

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

func TestMain(m *testing.M) {
	// The harness's clients log nothing of their own.
	ctrllog.SetLogger(logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	start := time.Now()
	logf := func(f string, a ...any) {
		fmt.Fprintf(os.Stderr, "e2e %6.1fs: %s\n", time.Since(start).Seconds(), fmt.Sprintf(f, a...))
	}
	w, err := scenario.Up(ctx, scenario.Options{Nodes: clusterNodes, Logf: logf})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: starting the cluster: %v\n", err)
		os.Exit(1)
	}
	world = w
	logf("cluster up")
	code := m.Run()
	logf("drills done; stopping the cluster")
	if err := w.Down(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: stopping the cluster: %v\n", err)
		if code == 0 {
			code = 1
		}
	} else {
		logf("cluster stopped; nothing left behind")
	}
	os.Exit(code)
}
