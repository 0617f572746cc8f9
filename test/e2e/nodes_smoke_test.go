//go:build integration && !e2e

package e2e

import (
	"time"

	"github.com/holdfast-io/holdfast/test/devicesim"
)

// make test's smoke cluster: a primary and one standby, both real kubelets.
var clusterNodes = []string{"edge-a", "edge-b"}

// clusterDevice: the smoke drills' devices are plain, as most plants' are:
// nothing but the runtimes' own fencing keeps a second writer off them.
const clusterDevice = devicesim.Plain

// clusterEvictionSeconds shortens the apiserver's eviction delay for pods
// on a NotReady or unreachable node (300s by default) so the smoke's
// partition sees kube-controller-manager evict within CI's budget.
const clusterEvictionSeconds = 20

// controlPartitions: a partition briefer than the failover takes (healed at
// twice the lease, while epoch 2 starts), and one that lasts until the node
// is NotReady and its bystander evicted.
var controlPartitions = []partitionCase{
	{name: "2x-lease", lasts: 20 * time.Second},
	{name: "until-evicted", untilEvicted: true},
}
