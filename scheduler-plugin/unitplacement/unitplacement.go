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
	"slices"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/retry"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
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
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/holdfastclient"
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
	pluginmetrics.Register()
	args, err := getArgs(obj)
	if err != nil {
		return nil, err
	}
	clients, err := holdfastclient.For(ctx, h, &holdfastv1.Unit{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	if err := runtimepod.RequeueOnUnitChange(ctx, h, clients); err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
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
	if _, ok := policy.RuntimeUnit(pod); ok {
		return nil, fwk.NewStatus(fwk.Unschedulable, "a unit runtime pod is placed on its own")
	}
	return nil, nil
}

// placementMode is what kind of binding an epoch is.
type placementMode int

const (
	// firstBinding: no node is being left; the runtime goes to a primary.
	firstBinding placementMode = iota
	// automaticRebind: the controller re-binds on its own; targets only,
	// each tried once (L5).
	automaticRebind
	// manualRebind: a person named the node (the pod's node affinity);
	// targets only, the ledger does not bind a person.
	manualRebind
)

// placement is what PreFilter learnt about the pod's unit and epoch; Filter,
// Score and Bind read it. It is never changed after PreFilter.
type placement struct {
	unit    types.NamespacedName
	display string
	epoch   int64
	binding holdfastv1.RuntimeBinding
	mode    placementMode
	primary func(*corev1.Node) bool
	target  func(*corev1.Node) bool
	// What the node index looks up: spec.nodeSelector, targets.nodes, and
	// targets.selector (nil when there is none or it is empty).
	nodeSelector   map[string]string
	targetNodes    []string
	targetSelector labels.Selector
	// boundNode is set when the binding already records this very pod's
	// node (a binding that failed after the record): the pod goes there or
	// nowhere.
	boundNode string
	// The unit's refusals, worded once per cycle rather than once per node.
	notPrimary, notTarget, boundElsewhere string
}

// Clone shares the placement: nothing changes it after PreFilter.
func (p *placement) Clone() fwk.StateData { return p }

func unschedulable(format string, args ...any) *fwk.Status {
	// Preemption must never evict anything on a runtime's behalf because of
	// these rules (it could evict another unit's runtime), so every refusal
	// is unresolvable.
	return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf(format, args...))
}

// authorise checks the pod against its unit's binding: the pod's epoch must
// be the authorised one and no other pod may hold it.
func authorise(u *holdfastv1.Unit, pod *corev1.Pod) (*placement, *fwk.Status) {
	key := client.ObjectKeyFromObject(u)
	display := runtimepod.Display(key, pod.Namespace)
	epoch, err := holdfastv1.ParseEpoch(pod.Labels[holdfastv1.LabelEpoch])
	if err != nil {
		return nil, unschedulable("no valid %s label", holdfastv1.LabelEpoch)
	}
	b := u.Status.RuntimeBinding
	switch {
	case b == nil:
		return nil, unschedulable("unit %s has no authorised binding", display)
	case b.Epoch != epoch:
		return nil, unschedulable("epoch %d is not the authorised epoch %d of unit %s", epoch, b.Epoch, display)
	case b.Pod != "" && b.Pod != pod.Name:
		if b.Node != "" {
			return nil, unschedulable("epoch %d of unit %s is already bound to node %s by pod %s", epoch, display, b.Node, b.Pod)
		}
		return nil, unschedulable("epoch %d of unit %s belongs to pod %s", epoch, display, b.Pod)
	case b.Node != "" && b.Pod == "":
		return nil, unschedulable("epoch %d of unit %s is already bound to node %s", epoch, display, b.Node)
	}
	p := &placement{
		unit: key, display: display, epoch: epoch, binding: *b, boundNode: b.Node,
		// The rules the webhook and the controller judge targets and
		// primaries by, compiled once for the cycle's many nodes.
		primary:        policy.PrimaryMatcher(u),
		target:         policy.TargetMatcher(u),
		notPrimary:     "not a primary node of unit " + display,
		notTarget:      "not a failover target of unit " + display,
		boundElsewhere: fmt.Sprintf("epoch %d is bound to node %s", epoch, b.Node),
		nodeSelector:   u.Spec.NodeSelector,
	}
	switch b.Origin {
	case holdfastv1.OriginManual:
		p.mode = manualRebind
	case holdfastv1.OriginAutomatic:
		p.mode = automaticRebind
	case holdfastv1.OriginInitial:
		p.mode = firstBinding
	default:
		// A binding written before origin existed: one that leaves a
		// node is read as the stricter automatic path.
		p.mode = firstBinding
		if b.PreviousNode != "" {
			p.mode = automaticRebind
		}
	}
	if t := u.Spec.Availability.Targets; t != nil {
		p.targetNodes = t.Nodes
		if t.Selector != nil {
			// rules.TargetMatcher reads a selector that does not parse as
			// selecting nothing; say so once rather than on every node.
			sel, err := metav1.LabelSelectorAsSelector(t.Selector)
			if err != nil {
				return nil, unschedulable("unit %s has an invalid spec.availability.targets.selector: %v", display, err)
			}
			if !sel.Empty() { // as rules.TargetMatcher: an empty one selects nothing
				p.targetSelector = sel
			}
		}
	}
	if p.mode == automaticRebind && u.Spec.Availability.Mode != holdfastv1.Failover {
		return nil, unschedulable("unit %s is in %s mode: only a person's failover re-binds it", display, holdfastv1.Autonomy)
	}
	return p, nil
}

// outsideReason is unitRefusal's reason for every node outside the rules.
func (p *placement) outsideReason() string {
	switch {
	case p.boundNode != "":
		return p.boundElsewhere
	case p.mode == firstBinding:
		return p.notPrimary
	}
	return p.notTarget
}

// candidates names the nodes the unit's rules can consider for this epoch,
// from the node index: the recorded node; or the primaries (first binding)
// or the targets (re-bind), and the node being left. all is true when every
// node must be judged: no index, one that has not yet seen every node, or a
// target selector the index cannot serve (only NotIn or DoesNotExist).
func (p *placement) candidates(index *nodeindex.Index) (names sets.Set[string], all bool) {
	if index == nil || !index.Synced() {
		return nil, true
	}
	if p.boundNode != "" {
		return sets.New(p.boundNode), false
	}
	if p.mode == firstBinding {
		names = sets.New[string]()
		if len(p.nodeSelector) > 0 { // as rules.PrimaryMatcher: none selects nothing
			names = index.Matching(p.nodeSelector)
		}
	} else {
		names = sets.New(p.targetNodes...)
		if p.targetSelector != nil {
			selected, ok := index.Selecting(p.targetSelector)
			if !ok {
				return nil, true
			}
			names = names.Union(selected)
		}
	}
	if p.binding.PreviousNode != "" {
		names.Insert(p.binding.PreviousNode)
	}
	return names, false
}

// unitRefusal is why the unit's rules keep this epoch off node, or "".
// outside is true for a node the rules do not consider at all: not a
// primary (first binding) or target (re-bind), or the epoch is bound
// elsewhere. In a
// large cluster that is nearly every node, and the least interesting reason.
func (p *placement) unitRefusal(node *corev1.Node) (reason string, outside bool) {
	if p.boundNode != "" {
		// The binding is recorded and never undone (a bind reported as
		// failed may have landed): only that node, whatever the ledger
		// says since (the controller adds it there for this very pod).
		if node.Name != p.boundNode {
			return p.boundElsewhere, true
		}
		return "", false
	}
	if node.Name == p.binding.PreviousNode {
		return ReasonNodeBeingLeft, false
	}
	switch p.mode {
	case manualRebind:
		if !p.target(node) {
			return p.notTarget, true
		}
	case automaticRebind:
		if !p.target(node) {
			return p.notTarget, true
		}
		if slices.Contains(p.binding.UnsettledRebinds, node.Name) {
			return ReasonTried, false
		}
	default:
		if !p.primary(node) {
			return p.notPrimary, true
		}
	}
	return "", false
}

// nodeRefusal is why no runtime may start on node now, or "".
func nodeRefusal(logger klog.Logger, node *corev1.Node, pod *corev1.Pod) string {
	switch {
	case !policy.NodeReady(node):
		return ReasonNotReady
	case node.Spec.Unschedulable:
		return ReasonCordoned
	}
	taint, untolerated := v1helper.FindMatchingUntoleratedTaint(logger, node.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, false)
	if untolerated {
		return "untolerated taint " + taint.Key
	}
	return ""
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

// Bind records the runtime's node in its unit's binding and then binds the
// pod as DefaultBinder does; it skips every other pod, which DefaultBinder
// (after it in the profile's bind order) binds. The record is taken here
// rather than at PreBind because kube-scheduler patches a pod's
// status.nominatedNodeName before any PreBind that has work to do: one more
// apiserver write per runtime, which nothing of holdfast reads.
func (pl *UnitPlacement) Bind(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodeName string) *fwk.Status {
	if _, ok := policy.RuntimeUnit(pod); !ok {
		return fwk.NewStatus(fwk.Skip)
	}
	if status := pl.record(ctx, pod, nodeName); !status.IsSuccess() {
		return status
	}
	return pl.binder.Bind(ctx, state, pod, nodeName)
}

// errRecheck sends record round its retry loop to decide on the
// apiserver's copy of the Unit.
var errRecheck = apierrors.NewConflict(holdfastv1.GroupVersion.WithResource("units").GroupResource(), "", fmt.Errorf("re-read from the apiserver"))

// record writes nodeName, the pod and the time into the unit's binding with
// an update conditioned on the Unit's resourceVersion, re-reading and
// re-checking on every conflict: of two pods or two schedulers racing for
// one epoch exactly one write lands, and the other finds the epoch bound and
// is refused, so its pod is never bound. The ledger is the controller's: it
// adds the recorded node of an Automatic binding to unsettledRebinds. The
// record is never undone, even when the binding that follows fails (a bind
// reported as failed may have landed): the pod, scheduled again, may go to
// the recorded node only (placement.boundNode), and record accepts it there
// without a second write.
func (pl *UnitPlacement) record(ctx context.Context, pod *corev1.Pod, nodeName string) *fwk.Status {
	logger := klog.FromContext(ctx)
	key, _ := policy.RuntimeUnit(pod)
	display := runtimepod.Display(key, pod.Namespace)
	node, err := pl.handle.SharedInformerFactory().Core().V1().Nodes().Lister().Get(nodeName)
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("reading node %s: %w", nodeName, err))
	}
	var refusal *fwk.Status
	already := false
	// The first attempt starts from the informer's copy, which saves a
	// round trip on the path every runtime takes; a conflict, or a refusal
	// read from that copy, is decided again on the apiserver's.
	cached := true
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		reader := client.Reader(pl.live)
		if cached {
			reader = pl.units
			defer func() { cached = false }()
		}
		refusal, already = nil, false
		var u holdfastv1.Unit
		if err := reader.Get(ctx, key, &u); err != nil {
			if apierrors.IsNotFound(err) && !cached {
				refusal = unschedulable("unit %s not found", display)
				return nil
			}
			if cached {
				return errRecheck
			}
			return err
		}
		p, status := authorise(&u, pod)
		if !status.IsSuccess() {
			if cached {
				return errRecheck
			}
			refusal = status
			return nil
		}
		if reason, _ := p.unitRefusal(node); reason != "" {
			if cached {
				return errRecheck
			}
			refusal = unschedulable("node %s: %s", nodeName, reason)
			return nil
		}
		if p.boundNode == nodeName {
			already = true // recorded by an earlier attempt of this pod
			return nil
		}
		b := u.Status.RuntimeBinding
		b.Node = nodeName
		b.Pod = pod.Name
		b.BoundAt = &metav1.Time{Time: pl.clock.Now()}
		return pl.live.Status().Update(ctx, &u)
	})
	if err != nil {
		pluginmetrics.BindingRecords.WithLabelValues(pluginmetrics.Error).Inc()
		return fwk.AsStatus(fmt.Errorf("recording node %s in the binding of unit %s: %w", nodeName, display, err))
	}
	if refusal != nil {
		pluginmetrics.BindingRecords.WithLabelValues(pluginmetrics.Refused).Inc()
		logger.V(2).Info("Runtime pod refused at Bind", "pod", klog.KObj(pod), "unit", key, "node", nodeName, "reason", refusal.Message())
		return refusal
	}
	if already {
		pluginmetrics.BindingRecords.WithLabelValues(pluginmetrics.AlreadyRecorded).Inc()
	} else {
		pluginmetrics.BindingRecords.WithLabelValues(pluginmetrics.Recorded).Inc()
	}
	logger.V(2).Info("Recorded the runtime binding", "pod", klog.KObj(pod), "unit", key, "node", nodeName)
	return nil
}

// EventsToRegister requeues a rejected runtime pod when a node appears or
// changes in a way the rules read. A change of its Unit requeues it from the
// plugin's own informer (runtimepod.RequeueOnUnitChange).
func (pl *UnitPlacement) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel | fwk.UpdateNodeTaint | fwk.UpdateNodeCondition}},
	}, nil
}
