package unitplacement

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/nodeindex"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/runtimepod"
)

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
	// warmStandby: a warm standby pod, which holds no epoch; it goes to the
	// standby its label names, when policy.WarmStandbyRefusal allows.
	warmStandby
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
	// warmNode is the standby a warm standby pod is kept on, and unit its
	// Unit (mode warmStandby only).
	warmNode, notWarmNode string
	warmUnit              *holdfastv1.Unit
}

// Clone shares the placement: nothing changes it after PreFilter.
func (p *placement) Clone() fwk.StateData { return p }

func unschedulable(format string, args ...any) *fwk.Status {
	// Preemption must never evict anything on a runtime's behalf because of
	// these rules (it could evict another unit's runtime), so every refusal
	// is unresolvable.
	return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf(format, args...))
}

// authorise checks the pod against its unit's binding (policy.BindingClaim)
// and compiles the unit's rules for the cycle.
func authorise(u *holdfastv1.Unit, pod *corev1.Pod) (*placement, *fwk.Status) {
	key := client.ObjectKeyFromObject(u)
	display := runtimepod.Display(key, pod.Namespace)
	if node, warm := policy.WarmStandbyNode(pod); warm {
		// No epoch and no binding to claim: Bind records nothing.
		return &placement{unit: key, display: display, mode: warmStandby, warmNode: node, warmUnit: u,
			notWarmNode: fmt.Sprintf("the warm standby of unit %s is kept on node %s", display, node)}, nil
	}
	epoch, err := holdfastv1.ParseEpoch(pod.Labels[holdfastv1.LabelEpoch])
	if err != nil {
		return nil, unschedulable("no valid %s label", holdfastv1.LabelEpoch)
	}
	b := u.Status.RuntimeBinding
	if reason := policy.BindingClaim(b, display, epoch, pod.Name); reason != "" {
		return nil, unschedulable("%s", reason)
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
	case p.mode == warmStandby:
		return p.notWarmNode
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
	if p.mode == warmStandby {
		return sets.New(p.warmNode), false
	}
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
	if p.mode == warmStandby {
		if node.Name != p.warmNode {
			return p.notWarmNode, true
		}
		return policy.WarmStandbyRefusal(p.warmUnit, node), false
	}
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
