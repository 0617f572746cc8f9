// Package standbycolocation is the StandbyColocation scheduler plugin: it
// keeps a unit's runtime off a node that already hosts another unit's
// runtime when the unit says colocation: Refuse, and under Warn scores such
// a node down and, when the runtime lands there anyway, records a Warning
// event on the Unit (docs/design.md §4): after several failures shared spares can
// end up carrying several units, and an operator must see it.
package standbycolocation

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
	"github.com/holdfast-io/holdfast/scheduler-plugin/apis/config"
	configv1 "github.com/holdfast-io/holdfast/scheduler-plugin/apis/config/v1"
	"github.com/holdfast-io/holdfast/scheduler-plugin/apis/config/validation"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/pluginargs"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/pluginmetrics"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/runtimepod"
)

// Name is the plugin's name in the registry and the scheduler configuration.
const Name = "StandbyColocation"

// ReasonRuntimeColocated is the reason of the Warning event on a Unit whose
// runtime was placed beside another unit's under Warn.
const ReasonRuntimeColocated = "RuntimeColocated"

const (
	stateKey   fwk.StateKey = Name
	reserveKey fwk.StateKey = Name + "/reserved"
)

// StandbyColocation guards co-location of unit runtimes. Pods without
// holdfast.io/unit are left alone (Skip).
type StandbyColocation struct {
	handle fwk.Handle
	args   *config.StandbyColocationArgs
	units  client.Reader
}

var _ fwk.PreFilterPlugin = &StandbyColocation{}
var _ fwk.FilterPlugin = &StandbyColocation{}
var _ fwk.PreScorePlugin = &StandbyColocation{}
var _ fwk.ScorePlugin = &StandbyColocation{}
var _ fwk.ReservePlugin = &StandbyColocation{}
var _ fwk.PostBindPlugin = &StandbyColocation{}
var _ fwk.EnqueueExtensions = &StandbyColocation{}
var _ fwk.SignPlugin = &StandbyColocation{}

// New builds the plugin from its args and the scheduler's handle; it reads
// Units through the scheduler's shared holdfast informers.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, clients, err := runtimepod.Setup(ctx, h, obj, Name, getArgs)
	if err != nil {
		return nil, err
	}
	return newPlugin(h, args, clients.Cached), nil
}

func newPlugin(h fwk.Handle, args *config.StandbyColocationArgs, units client.Reader) *StandbyColocation {
	return &StandbyColocation{handle: h, args: args, units: units}
}

// getArgs reads the plugin's args (pluginargs: one rule for the three
// plugins).
var getArgs = pluginargs.For(Name, configv1.SetDefaults_StandbyColocationArgs,
	configv1.Convert_v1_StandbyColocationArgs_To_config_StandbyColocationArgs, validation.ValidateStandbyColocationArgs)

// Name returns the plugin's name.
func (pl *StandbyColocation) Name() string { return Name }

// SignPod lets the scheduler batch pods that are not runtimes: the plugin
// does nothing to them. A runtime pod is refused a signature: its result
// depends on its own unit and the runtimes around it.
func (pl *StandbyColocation) SignPod(_ context.Context, pod *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return runtimepod.SignPod(pod)
}

// guard is the pod's unit and its co-location policy, found by PreFilter.
type guard struct {
	unit   types.NamespacedName
	ref    *corev1.ObjectReference
	policy holdfastv1.ColocationPolicy
}

// Clone shares the guard: nothing changes it after PreFilter.
func (g *guard) Clone() fwk.StateData { return g }

// colocated names the other units whose runtimes the chosen node hosts.
type colocated []string

// Clone shares the list: nothing changes it after Reserve.
func (c colocated) Clone() fwk.StateData { return c }

func readGuard(state fwk.CycleState) (*guard, bool) {
	data, err := state.Read(stateKey)
	if err != nil {
		return nil, false
	}
	g, ok := data.(*guard)
	return g, ok
}

// otherRuntimes names, sorted, the units other than unit whose runtime pods
// the node hosts (assumed pods included, so two runtimes placed back to back
// see each other), by policy.HostsOtherRuntime, the controller's rule.
func otherRuntimes(nodeInfo fwk.NodeInfo, unit types.NamespacedName, fromNamespace string) []string {
	var names []string
	for _, pi := range nodeInfo.GetPods() {
		pod := pi.GetPod()
		if pod.Spec.NodeName == "" {
			// An assumed pod carries its node in the NodeInfo only.
			pod = pod.DeepCopy()
			pod.Spec.NodeName = nodeInfo.Node().Name
		}
		if !policy.HostsOtherRuntime(pod, unit) {
			continue
		}
		other, _ := policy.RuntimeUnit(pod)
		if name := runtimepod.Display(other, fromNamespace); !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// PreFilter reads the unit's co-location policy; under Warn it skips Filter.
func (pl *StandbyColocation) PreFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	key, ok := policy.RuntimeUnit(pod)
	if !ok {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	var u holdfastv1.Unit
	if err := pl.units.Get(ctx, key, &u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("unit %s not found", runtimepod.Display(key, pod.Namespace)))
		}
		return nil, fwk.AsStatus(err)
	}
	g := &guard{
		unit: key,
		ref: &corev1.ObjectReference{
			APIVersion: holdfastv1.GroupVersion.String(), Kind: "Unit",
			Namespace: u.Namespace, Name: u.Name, UID: u.UID, ResourceVersion: u.ResourceVersion,
		},
		policy: u.Spec.Availability.Colocation,
	}
	if g.policy == "" {
		g.policy = pl.args.DefaultPolicy
	}
	state.Write(stateKey, g)
	if g.policy != holdfastv1.ColocationRefuse {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	return nil, nil
}

// PreFilterExtensions returns nil: refusals are unresolvable, so preemption
// never simulates removing another unit's runtime.
func (pl *StandbyColocation) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter refuses, under Refuse, a node that hosts another unit's runtime.
// Unresolvable: preemption must never evict another unit's runtime to make
// room.
func (pl *StandbyColocation) Filter(_ context.Context, state fwk.CycleState, pod *corev1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	g, ok := readGuard(state)
	if !ok {
		return fwk.AsStatus(fmt.Errorf("reading %q from the cycle state", stateKey))
	}
	if others := otherRuntimes(nodeInfo, g.unit, pod.Namespace); len(others) > 0 {
		pluginmetrics.FilterRefusals.WithLabelValues(Name, "hosts_other_runtime").Inc()
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "hosts the runtime of unit "+others[0])
	}
	return nil
}

// PreScore scores under Warn only; under Refuse Filter already decided.
func (pl *StandbyColocation) PreScore(_ context.Context, state fwk.CycleState, _ *corev1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	if g, ok := readGuard(state); !ok || g.policy != holdfastv1.ColocationWarn {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// Score takes penaltyPerRuntime off the highest score for every other
// unit's runtime on the node.
func (pl *StandbyColocation) Score(_ context.Context, state fwk.CycleState, pod *corev1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	g, ok := readGuard(state)
	if !ok {
		return 0, fwk.AsStatus(fmt.Errorf("reading %q from the cycle state", stateKey))
	}
	n := int64(len(otherRuntimes(nodeInfo, g.unit, pod.Namespace)))
	return max(fwk.MinNodeScore, fwk.MaxNodeScore-n*pl.args.PenaltyPerRuntime), nil
}

// ScoreExtensions returns nil: scores are already within 0..100.
func (pl *StandbyColocation) ScoreExtensions() fwk.ScoreExtensions { return nil }

// Reserve notes, under Warn, the other runtimes on the chosen node for
// PostBind's event.
func (pl *StandbyColocation) Reserve(_ context.Context, state fwk.CycleState, pod *corev1.Pod, nodeName string) *fwk.Status {
	g, ok := readGuard(state)
	if !ok || g.policy != holdfastv1.ColocationWarn {
		return nil
	}
	nodeInfo, err := pl.handle.SnapshotSharedLister().NodeInfos().Get(nodeName)
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("reading node %s from the snapshot: %w", nodeName, err))
	}
	if others := otherRuntimes(nodeInfo, g.unit, pod.Namespace); len(others) > 0 {
		state.Write(reserveKey, colocated(others))
	}
	return nil
}

// Unreserve forgets what Reserve noted.
func (pl *StandbyColocation) Unreserve(_ context.Context, state fwk.CycleState, _ *corev1.Pod, _ string) {
	state.Delete(reserveKey)
}

// PostBind records the Warning event on the Unit once the runtime is bound
// beside another unit's.
func (pl *StandbyColocation) PostBind(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodeName string) {
	g, ok := readGuard(state)
	if !ok {
		return
	}
	data, err := state.Read(reserveKey)
	if err != nil {
		return
	}
	others, ok := data.(colocated)
	if !ok || len(others) == 0 {
		return
	}
	what := "the runtime of unit " + others[0]
	if len(others) > 1 {
		what = "the runtimes of units " + strings.Join(others, ", ")
	}
	klog.FromContext(ctx).Info("Runtime placed beside another unit's runtime", "pod", klog.KObj(pod), "unit", g.unit, "node", nodeName, "others", others)
	pl.handle.EventRecorder().Eventf(g.ref, pod, corev1.EventTypeWarning, ReasonRuntimeColocated, "Scheduling",
		"Runtime pod %s placed on node %s beside %s (colocation: Warn)", pod.Name, nodeName, what)
}

// EventsToRegister requeues a refused runtime pod when another runtime pod
// goes away. A change of its Unit (policy edited to Warn) requeues it from
// the plugin's own informer (runtimepod.RequeueOnUnitChange).
func (pl *StandbyColocation) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}, QueueingHintFn: queueOnRuntimeGone},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add}},
	}, nil
}

func queueOnRuntimeGone(logger klog.Logger, pod *corev1.Pod, oldObj, _ any) (fwk.QueueingHint, error) {
	if tomb, ok := oldObj.(cache.DeletedFinalStateUnknown); ok {
		oldObj = tomb.Obj
	}
	gone, ok := oldObj.(*corev1.Pod)
	if !ok {
		return fwk.Queue, fmt.Errorf("want a deleted Pod, got %T", oldObj)
	}
	if _, ok := policy.RuntimeUnit(gone); !ok || gone.Spec.NodeName == "" {
		return fwk.QueueSkip, nil
	}
	logger.V(5).Info("A runtime pod left its node; a refused runtime may now fit", "pod", klog.KObj(pod), "gone", klog.KObj(gone))
	return fwk.Queue, nil
}
