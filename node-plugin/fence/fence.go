// Package fence is the node plugin's fence agent (docs/design.md §5, §3 L7): it
// stops, through CRI and with no grace period, every runtime container on
// this node whose pod's epoch is behind its unit's current binding, and
// removes its sandbox; and, while the apiserver is out of reach, it stops a
// local Failover runtime whose lease is past its deadline by more than the
// hold bound without having fenced (a wedged runtime), or that stopped
// answering past that point.
//
// It reads what runs from CRI itself, not from Pod objects: the kubelet
// copies a pod's labels (holdfast.io/unit, holdfast.io/epoch) onto its
// sandbox, so a container is found even when its Pod object is gone or the
// apiserver is away.
package fence

import (
	"context"
	"fmt"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// Runtime is the part of the CRI runtime service the agent uses
// (k8s.io/cri-api RuntimeService satisfies it).
type Runtime interface {
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	PodSandboxStatus(ctx context.Context, id string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error)
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	StopContainer(ctx context.Context, id string, timeout int64) error
	StopPodSandbox(ctx context.Context, id string) error
	RemovePodSandbox(ctx context.Context, id string) error
}

// Units looks up a unit as last seen from the apiserver (the informer
// cache keeps the last state while the apiserver is away).
type Units interface {
	Unit(ctx context.Context, namespace, name string) (*holdfastv1.Unit, bool)
}

// Pods reads a runtime pod's current labels as last seen from the
// apiserver: the epoch label a promoted warm standby pod is given after its
// sandbox was made. A pod not seen (or of another UID) is not found.
type Pods interface {
	PodLabels(ctx context.Context, namespace, name, uid string) (map[string]string, bool)
}

// LeaseStatus reads a local runtime's GET /v1/lease.
type LeaseStatus interface {
	Status(ctx context.Context, host string, port int32) (*lease.Status, error)
}

// Notifier records a fence action as a Kubernetes Event on the unit; the
// agent calls it only while the apiserver answers, and keeps the actions of
// an outage until then.
type Notifier interface {
	Fenced(ctx context.Context, a Action) error
}

// Labels the kubelet puts on a sandbox.
const (
	labelPodName      = "io.kubernetes.pod.name"
	labelPodNamespace = "io.kubernetes.pod.namespace"
	labelPodUID       = "io.kubernetes.pod.uid"
)

// Reasons of fence actions (Event reasons, audit lines).
const (
	ReasonStaleEpoch    = "StaleRuntimeStopped"
	ReasonWedgedRuntime = "WedgedRuntimeStopped"
	defaultLeasePort    = 9443
	statusTimeout       = time.Second
	maxPendingActions   = 256
)

// Action is one fence action, as audited (auditRecord) and reported.
type Action struct {
	At        time.Time
	Reason    string
	Namespace string
	Unit      string
	Pod       string
	// Epoch is the stopped runtime's epoch.
	Epoch int64
	// BindingEpoch is the unit's binding epoch as the agent knew it.
	BindingEpoch int64
	Sandbox      string
	Containers   []string
	Message      string
}

// observation is a runtime's last answer on the agent's clock.
type observation struct {
	at        time.Time
	status    lease.Status
	answered  bool
	firstSeen time.Time
	// polled is when the runtime was last asked, answered or not: it
	// still answers when its last answer is from its last poll.
	polled time.Time
}

// answersNow says whether the runtime answered its last poll.
func (o observation) answersNow() bool {
	return o.answered && !o.at.Before(o.polled)
}

// Agent is the fence agent.
type Agent struct {
	CRI   Runtime
	Units Units
	// Pods gives a warm standby pod's epoch label (nil: its runtime's
	// lease status alone tells).
	Pods     Pods
	Lease    LeaseStatus
	Notifier Notifier
	Clock    clock.PassiveClock
	// AuditDir holds fence-audit.jsonl, one audit line (internal/audit)
	// per action.
	AuditDir string
	// Node is this node's name, for the audit lines' actor.
	Node string

	mu      sync.Mutex
	seen    map[string]*observation // by sandbox ID
	pending []Action
	// unreachableSince is when the apiserver was first seen out of reach
	// in the current outage; zero while it answers.
	unreachableSince time.Time
	// wedgedStopped holds the runtime pods (podKey) the watchdog stopped in
	// the current outage. The kubelet restarts a stopped pod in a new
	// sandbox, which starts fenced (Ungranted) and is silent until it
	// listens; judged afresh it would be stopped, and audited, again every
	// pass. Cleared when the apiserver answers.
	wedgedStopped map[string]time.Time
}

// podKey names a runtime pod across its sandboxes: namespace, pod, epoch.
func podKey(r runtimeSandbox) string {
	return fmt.Sprintf("%s/%s@%d", r.namespace, r.sb.Labels[labelPodName], r.epoch)
}

func (a *Agent) init() {
	if a.seen == nil {
		a.seen = map[string]*observation{}
	}
	if a.Clock == nil {
		a.Clock = clock.RealClock{}
	}
}

// runtimeSandbox is a holdfast runtime pod's sandbox.
type runtimeSandbox struct {
	sb        *runtimeapi.PodSandbox
	namespace string
	unit      string
	epoch     int64
	// warm: a warm standby pod's sandbox (docs/design.md §3, Warm standby),
	// made before its pod had an epoch; epoch is then warmEpoch's, 0 while
	// it is bound to none.
	warm bool
}

// warmEpoch is a warm standby sandbox's epoch. CRI sandbox labels are fixed
// when the sandbox is made, so a promoted warm pod's never shows its epoch:
// it is the higher of its pod's current epoch label (written before the
// grant) and the epoch its runtime last reported on GET /v1/lease (bound by
// the first grant). 0: bound to no epoch, so it writes nothing.
func (a *Agent) warmEpoch(ctx context.Context, sb *runtimeapi.PodSandbox, namespace string) int64 {
	var epoch int64
	if a.Pods != nil {
		name, uid := sb.Labels[labelPodName], sb.Labels[labelPodUID]
		if m := sb.Metadata; m != nil {
			name, uid = m.Name, m.Uid
		}
		if labels, ok := a.Pods.PodLabels(ctx, namespace, name, uid); ok {
			if e, err := holdfastv1.ParseEpoch(labels[holdfastv1.LabelEpoch]); err == nil {
				epoch = e
			}
		}
	}
	a.mu.Lock()
	if o := a.seen[sb.Id]; o != nil && o.answered && o.status.Epoch > epoch {
		epoch = o.status.Epoch
	}
	a.mu.Unlock()
	return epoch
}

func (a *Agent) runtimeSandboxes(ctx context.Context, namespace, unit string) ([]runtimeSandbox, error) {
	filter := &runtimeapi.PodSandboxFilter{}
	if unit != "" {
		filter.LabelSelector = map[string]string{holdfastv1.LabelUnit: unit, labelPodNamespace: namespace}
	}
	sbs, err := a.CRI.ListPodSandbox(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("listing pod sandboxes: %w", err)
	}
	var out []runtimeSandbox
	for _, sb := range sbs {
		u, ok := sb.Labels[holdfastv1.LabelUnit]
		if !ok {
			continue
		}
		ns := sb.Labels[labelPodNamespace]
		if ns == "" && sb.Metadata != nil {
			ns = sb.Metadata.Namespace
		}
		label, labelled := sb.Labels[holdfastv1.LabelEpoch]
		if _, warm := sb.Labels[holdfastv1.LabelWarmStandby]; warm && !labelled {
			out = append(out, runtimeSandbox{sb: sb, namespace: ns, unit: u, epoch: a.warmEpoch(ctx, sb, ns), warm: true})
			continue
		}
		e, err := holdfastv1.ParseEpoch(label)
		if err != nil {
			// No epoch: not a runtime pod holdfast made; never guess.
			klog.FromContext(ctx).Info("Runtime sandbox without a valid epoch label left alone", "sandbox", sb.Id, "unit", klog.KRef(ns, u))
			continue
		}
		out = append(out, runtimeSandbox{sb: sb, namespace: ns, unit: u, epoch: e})
	}
	return out, nil
}

// FenceStale stops every runtime of namespace/unit (every unit when unit is
// "") whose epoch is behind its unit's binding. It returns the actions taken.
func (a *Agent) FenceStale(ctx context.Context, namespace, unit string) ([]Action, error) {
	a.init()
	sbs, err := a.runtimeSandboxes(ctx, namespace, unit)
	if err != nil {
		return nil, err
	}
	var actions []Action
	var errs []error
	for _, r := range sbs {
		u, ok := a.Units.Unit(ctx, r.namespace, r.unit)
		if !ok || u.Status.RuntimeBinding == nil {
			continue
		}
		bound := u.Status.RuntimeBinding.Epoch
		if r.epoch >= bound || r.epoch == 0 {
			// Epoch 0: a warm standby bound to no epoch writes nothing and
			// may still be promoted.
			continue
		}
		act, err := a.stop(ctx, r, ReasonStaleEpoch, bound,
			fmt.Sprintf("runtime of epoch %d is behind the unit's binding at epoch %d", r.epoch, bound))
		if err != nil {
			fenceFailures.WithLabelValues(r.namespace, r.unit, ReasonStaleEpoch).Inc()
			errs = append(errs, err)
			continue
		}
		if act != nil {
			actions = append(actions, *act)
		}
	}
	return actions, joinErrs(errs)
}

// stop stops a sandbox's containers with no grace period, stops and removes
// the sandbox, and audits it. A sandbox already gone is no action.
func (a *Agent) stop(ctx context.Context, r runtimeSandbox, reason string, bound int64, msg string) (*Action, error) {
	cs, err := a.CRI.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: r.sb.Id})
	if err != nil {
		return nil, fmt.Errorf("listing containers of sandbox %s: %w", r.sb.Id, err)
	}
	act := Action{At: a.Clock.Now(), Reason: reason, Namespace: r.namespace, Unit: r.unit,
		Pod: r.sb.Labels[labelPodName], Epoch: r.epoch, BindingEpoch: bound, Sandbox: r.sb.Id, Message: msg}
	for _, c := range cs {
		if c.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			continue
		}
		// Timeout 0: SIGKILL at once. A stale writer gets no grace.
		if err := a.CRI.StopContainer(ctx, c.Id, 0); err != nil {
			return nil, fmt.Errorf("stopping container %s of %s/%s: %w", c.Id, r.namespace, act.Pod, err)
		}
		act.Containers = append(act.Containers, c.Id)
	}
	if err := a.CRI.StopPodSandbox(ctx, r.sb.Id); err != nil {
		return nil, fmt.Errorf("stopping sandbox %s of %s/%s: %w", r.sb.Id, r.namespace, act.Pod, err)
	}
	if err := a.CRI.RemovePodSandbox(ctx, r.sb.Id); err != nil {
		return nil, fmt.Errorf("removing sandbox %s of %s/%s: %w", r.sb.Id, r.namespace, act.Pod, err)
	}
	a.mu.Lock()
	delete(a.seen, r.sb.Id)
	a.mu.Unlock()
	a.audit(ctx, act)
	return &act, nil
}

// Pending is the number of actions whose Event is not posted yet.
func (a *Agent) Pending() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.pending)
}

// Observe polls every local runtime's lease status. Run it every pass, so
// the last answers are fresh when the apiserver goes away.
func (a *Agent) Observe(ctx context.Context) error {
	a.init()
	sbs, err := a.runtimeSandboxes(ctx, "", "")
	if err != nil {
		return err
	}
	live := map[string]bool{}
	for _, r := range sbs {
		if r.sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		live[r.sb.Id] = true
		u, ok := a.Units.Unit(ctx, r.namespace, r.unit)
		if !ok {
			continue
		}
		host := a.sandboxHost(ctx, r.sb.Id)
		port := u.Spec.Runtime.LeasePort
		if port == 0 {
			port = defaultLeasePort
		}
		c, cancel := context.WithTimeout(ctx, statusTimeout)
		st, err := a.Lease.Status(c, host, port)
		cancel()
		now := a.Clock.Now()
		a.mu.Lock()
		o := a.seen[r.sb.Id]
		if o == nil {
			o = &observation{firstSeen: now}
			a.seen[r.sb.Id] = o
		}
		o.polled = now
		// A warm standby's answer is what tells its epoch (warmEpoch).
		if err == nil && (st.Epoch == r.epoch || r.warm) {
			o.at, o.status, o.answered = now, *st, true
		}
		a.mu.Unlock()
	}
	a.mu.Lock()
	for id := range a.seen {
		if !live[id] {
			delete(a.seen, id)
		}
	}
	a.mu.Unlock()
	return nil
}

// sandboxHost is where a runtime's lease endpoint answers: the sandbox's
// IP, or loopback for a host-network sandbox (runtime pods use the host
// network).
func (a *Agent) sandboxHost(ctx context.Context, id string) string {
	st, err := a.CRI.PodSandboxStatus(ctx, id, false)
	if err == nil && st.Status != nil && st.Status.Network != nil && st.Status.Network.Ip != "" {
		return st.Status.Network.Ip
	}
	return "127.0.0.1"
}

// APIServerUnreachable records whether the apiserver answered this pass.
func (a *Agent) APIServerUnreachable(unreachable bool) {
	a.init()
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case !unreachable:
		a.unreachableSince = time.Time{}
		a.wedgedStopped = nil
	case a.unreachableSince.IsZero():
		a.unreachableSince = a.Clock.Now()
	}
}

// FenceWedged stops local Failover runtimes whose lease is past deadline +
// holdBound and not fenced, by their last answer; one that no longer answers
// is judged by its last answer's deadline (or, never having answered, by a
// whole lease and hold bound from the start of the outage). It does nothing
// while the apiserver answers: then the controller re-binds and the epoch
// fence applies. Autonomy runtimes never self-fence and are never stopped.
func (a *Agent) FenceWedged(ctx context.Context) ([]Action, error) {
	a.init()
	a.mu.Lock()
	since := a.unreachableSince
	a.mu.Unlock()
	if since.IsZero() {
		return nil, nil
	}
	sbs, err := a.runtimeSandboxes(ctx, "", "")
	if err != nil {
		return nil, err
	}
	now := a.Clock.Now()
	var actions []Action
	var errs []error
	for _, r := range sbs {
		if r.sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		u, ok := a.Units.Unit(ctx, r.namespace, r.unit)
		if !ok || u.Spec.Availability.Mode != holdfastv1.Failover {
			continue
		}
		a.mu.Lock()
		o := a.seen[r.sb.Id]
		var obs observation
		if o != nil {
			obs = *o
		}
		a.mu.Unlock()
		why := wedged(now, since, obs, u)
		if why == "" {
			continue
		}
		a.mu.Lock()
		stoppedAt, again := a.wedgedStopped[podKey(r)]
		a.mu.Unlock()
		// Once per outage: a pod stopped already is stopped again only when
		// it answers, granted anew, past its deadline + hold bound and not
		// fenced; silence or Ungranted from its restart is not a wedge.
		if again && !(obs.answered && obs.status.RemainingMillis != nil && obs.at.After(stoppedAt)) {
			continue
		}
		var bound int64
		if u.Status.RuntimeBinding != nil {
			bound = u.Status.RuntimeBinding.Epoch
		}
		act, err := a.stop(ctx, r, ReasonWedgedRuntime, bound, why)
		if err != nil {
			fenceFailures.WithLabelValues(r.namespace, r.unit, ReasonWedgedRuntime).Inc()
			errs = append(errs, err)
			continue
		}
		a.mu.Lock()
		if a.wedgedStopped == nil {
			a.wedgedStopped = map[string]time.Time{}
		}
		a.wedgedStopped[podKey(r)] = act.At
		a.mu.Unlock()
		actions = append(actions, *act)
	}
	return actions, joinErrs(errs)
}

// wedged says why a runtime must be stopped, "" when it must not.
func wedged(now, outage time.Time, o observation, u *holdfastv1.Unit) string {
	if o.answered && o.status.Mode == holdfastv1.Autonomy {
		return ""
	}
	if o.answered && o.status.Fenced {
		// Fenced writes nothing; whether it still answers does not matter.
		return ""
	}
	hold := time.Duration(o.status.HoldBoundMillis) * time.Millisecond
	if !o.answered || hold <= 0 {
		// The binding's recorded promise, not the spec (L11): a lease
		// shortened on a live unit leaves its runtime the longer hold.
		hold = u.PromisedHoldBound()
	}
	switch {
	case o.answered && o.status.RemainingMillis != nil:
		deadline := o.at.Add(time.Duration(*o.status.RemainingMillis) * time.Millisecond)
		if now.After(deadline.Add(hold)) {
			if o.answersNow() {
				return fmt.Sprintf("lease past its deadline by %s, more than the hold bound %s, and not fenced (state %s)",
					now.Sub(deadline).Round(time.Millisecond), hold, o.status.State)
			}
			return fmt.Sprintf("runtime stopped answering; its lease deadline passed %s ago, more than the hold bound %s",
				now.Sub(deadline).Round(time.Millisecond), hold)
		}
	case o.answered:
		// Answering without a deadline: never granted, so fenced by
		// definition (Ungranted) unless it says otherwise.
		return ""
	default:
		limit := outage.Add(u.PromisedLease() + hold)
		if now.After(limit) {
			return fmt.Sprintf("runtime never answered on its lease port; a whole lease and hold bound (%s) passed since the apiserver went out of reach",
				u.PromisedLease()+hold)
		}
	}
	return ""
}

func joinErrs(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%d fence actions failed, first: %w", len(errs), errs[0])
}
