package unitplacement

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// sharedTargets names the feasible nodes that another unit also names as a
// failover target; the others are dedicated to this unit.
type sharedTargets map[string]bool

// Clone shares the map: nothing changes it after PreScore.
func (s sharedTargets) Clone() fwk.StateData { return s }

// PreScore finds which feasible nodes another unit also names as a target.
func (pl *UnitPlacement) PreScore(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	p, err := readPlacement(state)
	if err != nil {
		// PreFilter skipped this pod: not a runtime pod.
		return fwk.NewStatus(fwk.Skip)
	}
	var units holdfastv1.UnitList
	if err := pl.units.List(ctx, &units, client.UnsafeDisableDeepCopy); err != nil {
		return fwk.AsStatus(err)
	}
	shared := sharedTargets{}
	pl.targets.forEach(units.Items, func(other *holdfastv1.Unit, target func(*corev1.Node) bool) {
		if other.Namespace == p.unit.Namespace && other.Name == p.unit.Name {
			return
		}
		for _, ni := range nodes {
			if node := ni.Node(); target(node) {
				shared[node.Name] = true
			}
		}
	})
	state.Write(scoreStateKey, shared)
	return nil
}

// Score prefers a dedicated node (no other unit names it as a target), then
// the least-loaded, weighted by the args; the result is within 0..100.
func (pl *UnitPlacement) Score(_ context.Context, state fwk.CycleState, _ *corev1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	data, err := state.Read(scoreStateKey)
	if err != nil {
		return 0, fwk.AsStatus(fmt.Errorf("reading %q from the cycle state: %w", scoreStateKey, err))
	}
	shared, ok := data.(sharedTargets)
	if !ok {
		return 0, fwk.AsStatus(fmt.Errorf("%+v cannot be converted to shared targets", data))
	}
	var dedicated int64
	if !shared[nodeInfo.Node().Name] {
		dedicated = fwk.MaxNodeScore
	}
	free := freeScore(nodeInfo)
	wd, wl := pl.args.DedicatedStandbyWeight, pl.args.LoadWeight
	return (wd*dedicated + wl*free) / (wd + wl), nil
}

// freeScore is 0..100: the mean of the node's free CPU and memory shares
// (requests with the scheduler's non-zero minimums, against allocatable).
func freeScore(ni fwk.NodeInfo) int64 {
	free := func(requested, allocatable int64) int64 {
		if allocatable <= 0 || requested >= allocatable {
			return 0
		}
		return (allocatable - requested) * fwk.MaxNodeScore / allocatable
	}
	req, alloc := ni.GetNonZeroRequested(), ni.GetAllocatable()
	return (free(req.GetMilliCPU(), alloc.GetMilliCPU()) + free(req.GetMemory(), alloc.GetMemory())) / 2
}

// ScoreExtensions returns nil: scores are already within 0..100.
func (pl *UnitPlacement) ScoreExtensions() fwk.ScoreExtensions { return nil }
