// Package unitplacement is the UnitPlacement scheduler plugin: it places a
// unit's runtime pod on the unit's primary nodes (first binding) or on one
// of its eligible failover targets (re-bind, automatic or a person's), never
// on the node being left (binding previousNode) or, on the automatic path,
// on a standby already tried (unsettledRebinds, docs/design.md §3 L5, §4), and it
// records the chosen node in the unit's binding with an
// optimistic-concurrency write before it binds the pod (its Bind runs before
// DefaultBinder), so that one epoch binds one pod on one node however many
// schedulers or pods race (L7).
//
// The controller writes the binding (epoch, pod, origin, previousNode) and
// the ledger; this plugin writes only node, pod and boundAt. A person's
// target reaches the scheduler as the pod's required node affinity, which
// kube-scheduler's NodeAffinity plugin enforces beside this one.
package unitplacement

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
	"github.com/holdfast-io/holdfast/scheduler-plugin/apis/config"
	configv1 "github.com/holdfast-io/holdfast/scheduler-plugin/apis/config/v1"
	"github.com/holdfast-io/holdfast/scheduler-plugin/apis/config/validation"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/nodeindex"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/pluginargs"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/pluginmetrics"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/runtimepod"
)

// Name is the plugin's name in the registry and the scheduler configuration.
const Name = "UnitPlacement"

const (
	stateKey      fwk.StateKey = Name
	scoreStateKey fwk.StateKey = Name + "/score"
)

// Refusal phrases that are the same for every unit.
const (
	ReasonNodeBeingLeft = "the node being left"
	ReasonTried         = "already tried in this failover"
	ReasonNotReady      = "not ready"
	ReasonCordoned      = "cordoned"
)

// UnitPlacement places unit runtime pods. Pods without holdfast.io/unit are
// left to the other plugins (Skip).
type UnitPlacement struct {
	handle fwk.Handle
	args   *config.UnitPlacementArgs
	// units reads Units from the informer cache (PreFilter, PreScore).
	units client.Reader
	// live reads and writes Units at the apiserver (Bind).
	live  client.Client
	clock clock.PassiveClock
	// nodes indexes the cluster's nodes by label, so that PreFilter
	// judges the nodes a unit's rules can consider, not every node.
	nodes *nodeindex.Index
	// binder binds a runtime pod once its node is recorded: kube-scheduler's
	// own DefaultBinder, so that the pod is bound exactly as any other.
	binder fwk.BindPlugin
	// targets keeps every unit's compiled target rule for PreScore.
	targets targetMatchers
}

// targetMatchers keeps each unit's compiled target rule by UID until its
// spec changes (generation). PreScore judges every other unit's targets for
// every runtime pod: parsing each unit's selector again per pod would cost
// in proportion to the fleet, on the scheduler's serial loop.
type targetMatchers struct {
	mu    sync.Mutex
	pass  uint64
	byUID map[types.UID]*targetMatcher
}

type targetMatcher struct {
	generation int64
	match      func(*corev1.Node) bool
	seen       uint64
}

// forEach calls fn with the target rule of every unit in units, and forgets
// the rules of units no longer listed.
func (c *targetMatchers) forEach(units []holdfastv1.Unit, fn func(u *holdfastv1.Unit, match func(*corev1.Node) bool)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byUID == nil {
		c.byUID = map[types.UID]*targetMatcher{}
	}
	c.pass++
	for i := range units {
		u := &units[i]
		if u.UID == "" {
			fn(u, policy.TargetMatcher(u))
			continue
		}
		m := c.byUID[u.UID]
		if m == nil || m.generation != u.Generation {
			m = &targetMatcher{generation: u.Generation, match: policy.TargetMatcher(u)}
			c.byUID[u.UID] = m
		}
		m.seen = c.pass
		fn(u, m.match)
	}
	if len(c.byUID) > len(units) {
		for uid, m := range c.byUID {
			if m.seen != c.pass {
				delete(c.byUID, uid)
			}
		}
	}
}

var _ fwk.PreFilterPlugin = &UnitPlacement{}
var _ fwk.FilterPlugin = &UnitPlacement{}
var _ fwk.PreScorePlugin = &UnitPlacement{}
var _ fwk.ScorePlugin = &UnitPlacement{}
var _ fwk.BindPlugin = &UnitPlacement{}
var _ fwk.EnqueueExtensions = &UnitPlacement{}
var _ fwk.SignPlugin = &UnitPlacement{}

// New builds the plugin from its args and the scheduler's handle; it watches
// Units through the scheduler's shared holdfast informers, and indexes nodes
// from the scheduler's Node informer.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, clients, err := runtimepod.Setup(ctx, h, obj, Name, getArgs)
	if err != nil {
		return nil, err
	}
	// One index per plugin instance: the shipped configuration enables the
	// plugin in one profile, so that is one per scheduler, with no shared
	// registry to key and clean up.
	nodes, err := runtimepod.IndexNodes(ctx, h)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	return newPlugin(ctx, h, args, clients.Cached, clients.Live, nodes, clock.RealClock{})
}

func newPlugin(ctx context.Context, h fwk.Handle, args *config.UnitPlacementArgs, units client.Reader, live client.Client, nodes *nodeindex.Index, clk clock.PassiveClock) (*UnitPlacement, error) {
	binder, err := defaultbinder.New(ctx, nil, h)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	return &UnitPlacement{handle: h, args: args, units: units, live: live, nodes: nodes, clock: clk, binder: binder.(fwk.BindPlugin)}, nil
}

// getArgs reads the plugin's args (pluginargs: one rule for the three
// plugins).
var getArgs = pluginargs.For(Name, configv1.SetDefaults_UnitPlacementArgs,
	configv1.Convert_v1_UnitPlacementArgs_To_config_UnitPlacementArgs, validation.ValidateUnitPlacementArgs)

// Name returns the plugin's name.
func (pl *UnitPlacement) Name() string { return Name }

// SignPod lets the scheduler batch pods that are not runtimes: the plugin
// does nothing to them. A runtime pod is refused a signature: its result
// depends on its own unit, epoch and name, and is never reused.
func (pl *UnitPlacement) SignPod(_ context.Context, pod *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return runtimepod.SignPod(pod)
}

// PreFilter reads the pod's Unit from the informer cache and refuses the
// pod outright when its epoch is not the authorised one or another pod holds
// it. It then checks the nodes the unit's rules can consider, found by the
// node index, against those rules (labels, names and node state only); every
// other node is outside them. When none passes it refuses the pod with every
// node's reason counted; otherwise it narrows the cycle to the nodes the
// rules consider (members and the node being left), so that a runtime in a
// cluster of thousands of nodes costs neither a pass nor a Filter over each
// of them, and Filter still words each considered node's refusal.
func (pl *UnitPlacement) PreFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	key, ok := policy.RuntimeUnit(pod)
	if !ok {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	var u holdfastv1.Unit
	if err := pl.units.Get(ctx, key, &u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, unschedulable("unit %s not found", runtimepod.Display(key, pod.Namespace))
		}
		return nil, fwk.AsStatus(err)
	}
	p, status := authorise(&u, pod)
	if !status.IsSuccess() {
		return nil, status
	}
	state.Write(stateKey, p)
	return p.narrow(klog.FromContext(ctx), pod, nodes, pl.nodes, pl.handle.SnapshotSharedLister().NodeInfos())
}

// narrow is PreFilter's pass over the candidates (every node when the index
// cannot tell), each judged on the cycle's snapshot.
func (p *placement) narrow(logger klog.Logger, pod *corev1.Pod, nodes []fwk.NodeInfo, index *nodeindex.Index, snapshot fwk.NodeInfoLister) (*fwk.PreFilterResult, *fwk.Status) {
	if len(nodes) == 0 {
		return nil, nil
	}
	considered := sets.New[string]()
	refusals := map[string]int{}
	// Nodes outside the rules, nearly all of a large cluster, share one
	// reason per placement: counted, not hashed.
	examined, outside := 0, 0
	fits := false
	judge := func(node *corev1.Node) {
		examined++
		reason, out := p.unitRefusal(node)
		if out {
			outside++
			return
		}
		considered.Insert(node.Name)
		if reason == "" {
			reason = nodeRefusal(logger, node, pod)
		}
		if reason == "" {
			fits = true
		} else {
			refusals[reason]++
		}
	}
	names, all := p.candidates(index)
	if all {
		for _, ni := range nodes {
			if node := ni.Node(); node != nil {
				judge(node)
			}
		}
	} else {
		for name := range names {
			// The index only narrows: a name the snapshot does not hold
			// (the index is ahead of it) is not judged.
			if ni, err := snapshot.Get(name); err == nil && ni.Node() != nil {
				judge(ni.Node())
			}
		}
	}
	if fits {
		return &fwk.PreFilterResult{NodeNames: considered}, nil
	}
	// Every node not examined is outside the rules: the refusal counts
	// every node, as a pass over each would.
	for _, ni := range nodes {
		if ni.Node() != nil {
			outside++
		}
	}
	outside -= examined
	if outside > 0 {
		refusals[p.outsideReason()] += outside
	}
	// Counted as the scheduler counts Filter refusals, so the event reads
	// the same either way.
	counts := make([]string, 0, len(refusals))
	for reason, n := range refusals {
		counts = append(counts, fmt.Sprintf("%d %s", n, reason))
	}
	sort.Strings(counts)
	return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, strings.Join(counts, ", "))
}

// PreFilterExtensions returns nil: the rules do not depend on other pods.
func (pl *UnitPlacement) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter admits node when the unit's rules and the node's state allow it.
func (pl *UnitPlacement) Filter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	p, err := readPlacement(state)
	if err != nil {
		return fwk.AsStatus(err)
	}
	node := nodeInfo.Node()
	if reason, _ := p.unitRefusal(node); reason != "" {
		pluginmetrics.FilterRefusals.WithLabelValues(Name, p.refusalClass(reason)).Inc()
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reason)
	}
	if reason := nodeRefusal(klog.FromContext(ctx), node, pod); reason != "" {
		pluginmetrics.FilterRefusals.WithLabelValues(Name, nodeRefusalClass(reason)).Inc()
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reason)
	}
	return nil
}

func readPlacement(state fwk.CycleState) (*placement, error) {
	data, err := state.Read(stateKey)
	if err != nil {
		return nil, fmt.Errorf("reading %q from the cycle state: %w", stateKey, err)
	}
	p, ok := data.(*placement)
	if !ok {
		return nil, fmt.Errorf("%+v cannot be converted to a placement", data)
	}
	return p, nil
}

// EventsToRegister requeues a rejected runtime pod when a node appears or
// changes in a way the rules read. A change of its Unit requeues it from the
// plugin's own informer (runtimepod.RequeueOnUnitChange).
func (pl *UnitPlacement) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel | fwk.UpdateNodeTaint | fwk.UpdateNodeCondition}},
	}, nil
}
