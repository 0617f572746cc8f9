//go:build integration || e2e

// Package e2e holds the drills: holdfast on real kubelets (test/cluster)
// with faults injected the way nodes and networks fail, each asserted from
// the outside: the device's own write log, the Unit's status and Events,
// the controllers' metrics. One cluster serves the package; every drill has
// its own namespace, unit and device, and puts back what it broke.
//
// The whole matrix runs under the e2e build tag (make test-e2e), once with
// devices that check the writer's epoch and once with plain ones
// (scenario.DeviceEnv).
package e2e

import (
	"testing"
	"time"

	"github.com/holdfast-io/holdfast/test/e2e/scenario"
)

var world *scenario.World

func TestMain(m *testing.M) {
	scenario.Main(m, "e2e", 10*time.Minute, scenario.Options{Nodes: clusterNodes, Device: clusterDevice, EvictionSeconds: clusterEvictionSeconds}, &world)
}
