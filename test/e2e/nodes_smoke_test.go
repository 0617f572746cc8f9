//go:build integration && !e2e

package e2e

import "github.com/holdfast-io/holdfast/test/devicesim"

// make test's smoke cluster: a primary and one standby, both real kubelets.
var clusterNodes = []string{"edge-a", "edge-b"}

// clusterDevice: the smoke drills' devices are plain, as most plants' are:
// nothing but the runtimes' own fencing keeps a second writer off them.
const clusterDevice = devicesim.Plain

// clusterEvictionSeconds shortens the apiserver's eviction delay for pods
// on a NotReady or unreachable node (300s by default) so the smoke's
// partition sees kube-controller-manager evict within CI's budget.
const clusterEvictionSeconds = 20

// controlPartitions: one healed at twice the lease, after the failover and
// before any eviction, and one that lasts until the node is NotReady and its
// bystander evicted.
var controlPartitions = []partitionCase{
	{name: "2x-lease", leases: 2},
	{name: "until-evicted", untilEvicted: true},
}
