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
// With HOLDFAST_E2E_VOTERS_LAYOUT=staticpod (scenario.LayoutStaticPod) the
// four nodes are kubeadm hosts instead: each member is the etcd static pod
// its kubelet runs, and holdfast-node's StaticPod actuator writes and
// removes the manifests. The drills' host checks (cluster.Host's
// ServerState, AgentState, MemberPID, PauseMember) read either layout, so
// one drill body runs on both (make test-e2e: STATICPOD_VOTER_DRILLS).
//
// Its own package (and cluster) so the failover drills' link cuts never
// touch a voter; it runs under make test-e2e only.
package voters

import (
	"testing"
	"time"

	"github.com/holdfast-io/holdfast/test/e2e/scenario"
)

var world *scenario.World

// The nodes: three voters and a voter-eligible standby.
var (
	voterNodes   = []string{"cp-a", "cp-b", "cp-c"}
	standbyNodes = []string{"cp-d"}
)

func TestMain(m *testing.M) {
	scenario.Main(m, "e2e-voters", 20*time.Minute, scenario.Options{Nodes: append(append([]string{}, voterNodes...), standbyNodes...),
		Controllers: 1, Voters: &scenario.VotersOptions{Voters: voterNodes, Standbys: standbyNodes}}, &world)
}
