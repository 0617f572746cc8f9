// Package votereligibility is the VoterEligibility scheduler plugin: it
// places the voter controller's candidate pod (holdfast.io/role:
// voter-candidate) only on a node that may become an etcd voter: eligible,
// provisioned, not pinned, Ready, not already a member and without a
// tombstone of this cluster, so that a removed member never comes back as a
// server (docs/design.md §4, §6). Among those it prefers the fittest node.
package votereligibility

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/scheduler-plugin/apis/config"
	configv1 "github.com/holdfast-io/holdfast/scheduler-plugin/apis/config/v1"
	"github.com/holdfast-io/holdfast/scheduler-plugin/apis/config/validation"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/holdfastclient"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/pluginargs"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/pluginmetrics"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/requeue"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/signature"
)

// Name is the plugin's name in the registry and the scheduler configuration.
const Name = "VoterEligibility"

const stateKey fwk.StateKey = Name

// Fitness thresholds used when the VoterPolicy leaves them at zero (a
// policy stored before its defaults): the CRD's defaults.
const (
	fallbackMaxFsyncMillis   = 10
	fallbackMaxPeerRTTMillis = 50
	fallbackWindow           = 600 * time.Second
)

// unfit is the raw score of a node without a usable fitness report; it
// normalises below every node with one.
const unfit = math.MinInt64

// VoterEligibility places voter-candidate pods. Other pods are left alone
// (Skip).
type VoterEligibility struct {
	args     *config.VoterEligibilityArgs
	policies client.Reader
	clock    clock.PassiveClock
}

var _ fwk.PreFilterPlugin = &VoterEligibility{}
var _ fwk.FilterPlugin = &VoterEligibility{}
var _ fwk.PreScorePlugin = &VoterEligibility{}
var _ fwk.ScorePlugin = &VoterEligibility{}
var _ fwk.ScoreExtensions = &VoterEligibility{}
var _ fwk.EnqueueExtensions = &VoterEligibility{}
var _ fwk.SignPlugin = &VoterEligibility{}

// New builds the plugin from its args and the scheduler's handle; it reads
// the VoterPolicy through the scheduler's shared holdfast informers.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := getArgs(obj)
	if err != nil {
		return nil, err
	}
	clients, err := holdfastclient.For(ctx, h, &holdfastv1.VoterPolicy{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	// A changed VoterPolicy (members, cluster ID, selector) requeues the
	// waiting candidates from the informer the plugin reads.
	logger := klog.FromContext(ctx)
	activator, err := requeue.New(h, holdfastv1.LabelRole, func(pod *corev1.Pod) (string, bool) {
		return holdfastv1.RoleVoterCandidate, isCandidate(pod)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	if err := clients.OnChange(ctx, &holdfastv1.VoterPolicy{}, func(client.Object) {
		activator.Activate(logger, holdfastv1.RoleVoterCandidate)
	}); err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	return newPlugin(args, clients.Cached, clock.RealClock{}), nil
}

func newPlugin(args *config.VoterEligibilityArgs, policies client.Reader, clk clock.PassiveClock) *VoterEligibility {
	pluginmetrics.Register()
	return &VoterEligibility{args: args, policies: policies, clock: clk}
}

// getArgs reads the plugin's args (pluginargs: one rule for the three
// plugins).
var getArgs = pluginargs.For(Name, configv1.SetDefaults_VoterEligibilityArgs,
	configv1.Convert_v1_VoterEligibilityArgs_To_config_VoterEligibilityArgs, validation.ValidateVoterEligibilityArgs)

// Name returns the plugin's name.
func (pl *VoterEligibility) Name() string { return Name }

// SignPod lets the scheduler batch pods that are not voter candidates: the
// plugin does nothing to them. A candidate is refused a signature: its
// result depends on the VoterPolicy, which is not node state.
func (pl *VoterEligibility) SignPod(_ context.Context, pod *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return signature.Alone(isCandidate(pod), "a voter candidate")
}

// candidacy is what PreFilter read from the VoterPolicy.
type candidacy struct {
	rules         *candidateRules
	maxFsync      float64
	maxPeerRTT    float64
	freshSince    time.Time
	fsyncWeight   float64
	peerRTTWeight float64
}

// Clone shares the candidacy: nothing changes it after PreFilter.
func (c *candidacy) Clone() fwk.StateData { return c }

func isCandidate(pod *corev1.Pod) bool {
	return pod.Labels[holdfastv1.LabelRole] == holdfastv1.RoleVoterCandidate
}

func readCandidacy(state fwk.CycleState) (*candidacy, error) {
	data, err := state.Read(stateKey)
	if err != nil {
		return nil, fmt.Errorf("reading %q from the cycle state: %w", stateKey, err)
	}
	c, ok := data.(*candidacy)
	if !ok {
		return nil, fmt.Errorf("%+v cannot be converted to a candidacy", data)
	}
	return c, nil
}

// PreFilter reads the VoterPolicy: its eligibility selector, members,
// cluster ID and fitness thresholds.
func (pl *VoterEligibility) PreFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if !isCandidate(pod) {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	var policy holdfastv1.VoterPolicy
	if err := pl.policies.Get(ctx, types.NamespacedName{Name: pl.args.VoterPolicyName}, &policy); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("no VoterPolicy %s", pl.args.VoterPolicyName))
		}
		return nil, fwk.AsStatus(err)
	}
	if sel := policy.Spec.EligibleSelector; sel != nil {
		// rules.NodeEligible reads a selector that does not parse as
		// selecting nothing; say so once rather than on every node.
		if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("VoterPolicy %s has an invalid spec.eligibleSelector: %v", policy.Name, err))
		}
	}
	f := policy.Spec.Fitness
	c := &candidacy{
		rules:         newCandidateRules(&policy),
		maxFsync:      orFallback(float64(f.MaxFsyncMillis), fallbackMaxFsyncMillis),
		maxPeerRTT:    orFallback(float64(f.MaxPeerRTTMillis), fallbackMaxPeerRTTMillis),
		fsyncWeight:   float64(pl.args.FsyncWeight),
		peerRTTWeight: float64(pl.args.PeerRTTWeight),
	}
	window := time.Duration(f.WindowSeconds) * time.Second
	if window <= 0 {
		window = fallbackWindow
	}
	c.freshSince = pl.clock.Now().Add(-window)
	state.Write(stateKey, c)
	return nil, nil
}

func orFallback(v, fallback float64) float64 {
	if v <= 0 {
		return fallback
	}
	return v
}

// PreFilterExtensions returns nil: eligibility does not depend on other pods.
func (pl *VoterEligibility) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter admits only a node that may become a voter. Unresolvable:
// preemption cannot make a node eligible.
func (pl *VoterEligibility) Filter(_ context.Context, state fwk.CycleState, _ *corev1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	c, err := readCandidacy(state)
	if err != nil {
		return fwk.AsStatus(err)
	}
	if reason := c.rules.refusal(nodeInfo.Node()); reason != "" {
		pluginmetrics.FilterRefusals.WithLabelValues(Name, refusalClass[reason]).Inc()
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reason)
	}
	return nil
}

// PreScore scores voter candidates only.
func (pl *VoterEligibility) PreScore(_ context.Context, state fwk.CycleState, pod *corev1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	if _, err := readCandidacy(state); err != nil || !isCandidate(pod) {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// Score is minus the node's weighted fitness cost: the fsync p99 and the
// worst peer round trip, each as a fraction of the policy's threshold, in
// thousandths. A node without a fresh report that can be judged (see
// fitnessMillis) scores below every node with one.
func (pl *VoterEligibility) Score(_ context.Context, state fwk.CycleState, _ *corev1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	c, err := readCandidacy(state)
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	v, ok := nodeInfo.Node().Annotations[holdfastv1.AnnotationFitness]
	if !ok {
		return unfit, nil
	}
	var f holdfastv1.Fitness
	if err := json.Unmarshal([]byte(v), &f); err != nil || f.At.Time.Before(c.freshSince) {
		return unfit, nil
	}
	fsync, rtt, ok := fitnessMillis(&f)
	if !ok {
		return unfit, nil
	}
	cost := (c.fsyncWeight*fsync/c.maxFsync + c.peerRTTWeight*rtt/c.maxPeerRTT) /
		(c.fsyncWeight + c.peerRTTWeight)
	return -int64(math.Round(min(cost, 1e6) * 1000)), nil
}

// ScoreExtensions normalises the fitness scores.
func (pl *VoterEligibility) ScoreExtensions() fwk.ScoreExtensions { return pl }

// NormalizeScore maps the fittest node to 100 and the least fit with a
// report to 1; nodes without one get 0.
func (pl *VoterEligibility) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *corev1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for _, s := range scores {
		if s.Score == unfit {
			continue
		}
		lo, hi = min(lo, s.Score), max(hi, s.Score)
	}
	for i := range scores {
		switch {
		case scores[i].Score == unfit:
			scores[i].Score = fwk.MinNodeScore
		case hi == lo:
			scores[i].Score = fwk.MaxNodeScore
		default:
			scores[i].Score = 1 + (scores[i].Score-lo)*(fwk.MaxNodeScore-1)/(hi-lo)
		}
	}
	return nil
}

// EventsToRegister requeues a rejected candidate when a node appears or its
// labels, annotations, conditions or taints change. A changed VoterPolicy
// requeues it from the plugin's own informer (see New).
func (pl *VoterEligibility) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel | fwk.UpdateNodeAnnotation | fwk.UpdateNodeCondition | fwk.UpdateNodeTaint}},
	}, nil
}
