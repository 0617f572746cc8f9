//go:build integration && !e2e

package e2e

import "github.com/holdfast-io/holdfast/test/devicesim"

// make test's smoke cluster: a primary and one standby, both real kubelets.
var clusterNodes = []string{"edge-a", "edge-b"}

// clusterDevice: the smoke drills' devices are plain, as most plants' are:
// nothing but the runtimes' own fencing keeps a second writer off them.
const clusterDevice = devicesim.Plain
