//go:build e2e

package e2e

import (
	"time"

	"github.com/holdfast-io/holdfast/test/devicesim"
	"github.com/holdfast-io/holdfast/test/e2e/scenario"
)

// The matrix's cluster: a primary and two standbys, all real kubelets.
var clusterNodes = scenario.DefaultNodes

// clusterDevice is the matrix's device mode unless scenario.DeviceEnv says
// otherwise (make test-e2e runs it in both).
const clusterDevice = devicesim.OwnerEpoch

// clusterEvictionSeconds: the apiserver's default eviction delay (300s).
const clusterEvictionSeconds = 0

// controlPartitions: one healed at twice the lease, after the failover and
// before any eviction, and one of ten minutes, through NotReady and the
// default 300s eviction.
var controlPartitions = []partitionCase{
	{name: "2x-lease", leases: 2},
	{name: "10-minutes", lasts: 10 * time.Minute, evicts: true},
}
