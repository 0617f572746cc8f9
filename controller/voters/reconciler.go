package voters

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/audit"
	"github.com/holdfast-io/holdfast/policy"
)

// DefaultEtcdEvery is Reconciler.EtcdEvery's default: a few etcd status
// reads a second, and only while a swap waits on etcd.
const DefaultEtcdEvery = 250 * time.Millisecond

// Reconciler runs the passes of the voter controller.
type Reconciler struct {
	// Client writes, and reads Nodes (a cache is fine: every Node write is
	// judged again on the next pass). Reader reads past any cache: the
	// VoterSwaps, the VoterPolicy, the Lease, a node's pods, the Secret.
	Client client.Client
	Reader client.Reader
	// EtcdFor returns the etcd client for a policy (nil: ClientEtcd with
	// the TLS of the policy's clientCertSecretRef).
	EtcdFor  func(ctx context.Context, p *holdfastv1.VoterPolicy) (Etcd, error)
	Recorder events.EventRecorder
	// Audit is the audit trail shared with the unit controller: one line
	// per decision and change, written after its status and Event (nil:
	// none). Actor names this process on it.
	Audit    *audit.Logger
	Actor    string
	Clock    clock.PassiveClock
	Settings Settings
	// SnapshotDir keeps the snapshots, the newest KeepSnapshots of them.
	SnapshotDir   string
	KeepSnapshots int
	// SnapshotVolume says what holds SnapshotDir and where (the volume,
	// the pod and its node), for the record of a snapshot's location.
	SnapshotVolume string
	// CandidateNamespace and CandidateImage are the voter-candidate pod's.
	CandidateNamespace, CandidateImage string
	// RunningEvery and IdleEvery are the pass intervals with and without a
	// swap in progress (the Lease is renewed on every pass, so RunningEvery
	// must stay well inside its duration). Neither is longer than
	// rules.StatusHeartbeat in effect: the status's observedTime needs it.
	RunningEvery, IdleEvery time.Duration
	// EtcdEvery is the pass interval while a swap waits for a state that
	// sends no event (Decision.Polled: etcd's own, a learner starting or
	// catching up, the voters' health; evicted pods terminating); it
	// bounds how long such a wait outlasts its condition.
	EtcdEvery time.Duration
	// AfterAction, when set, runs after an action is carried out and before
	// it is recorded; an error ends the pass there, as a crash would.
	AfterAction func(Action) error

	lastEtcd EtcdView
	// snapshotOK is, per swap ID, the sha256 of the recorded snapshot this
	// process verified (or took) and recorded as such.
	snapshotOK map[string]string
	unfitSince map[string]time.Time
	stepStart  map[string]time.Time
	passes     atomic.Int64
}

// Passes counts the passes this reconciler finished (whatever their
// outcome): "N more passes and nothing happened" is how a test waits for
// the controller to have had its chances, instead of sleeping.
func (r *Reconciler) Passes() int64 { return r.passes.Load() }

func (r *Reconciler) defaults() {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Settings.LeaseDuration == 0 {
		d := DefaultSettings()
		d.Identity = r.Settings.Identity
		r.Settings = d
	}
	if r.RunningEvery == 0 {
		r.RunningEvery = 2 * time.Second
	}
	if r.IdleEvery == 0 {
		r.IdleEvery = 15 * time.Second
	}
	if r.EtcdEvery == 0 {
		r.EtcdEvery = DefaultEtcdEvery
	}
	if r.KeepSnapshots == 0 {
		r.KeepSnapshots = 3
	}
	if r.unfitSince == nil {
		r.unfitSince = map[string]time.Time{}
		r.stepStart = map[string]time.Time{}
		r.snapshotOK = map[string]string{}
	}
	if r.EtcdFor == nil {
		r.EtcdFor = r.clientEtcd
	}
}

// Reconcile runs one pass, whatever the request (there is one swap at a
// time, and one pass sees everything).
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	after, err := r.Pass(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: after}, nil
}

func (r *Reconciler) clientEtcd(ctx context.Context, p *holdfastv1.VoterPolicy) (Etcd, error) {
	ref := p.Spec.Etcd.ClientCertSecretRef
	if ref == nil {
		return &ClientEtcd{}, nil
	}
	ns := ref.Namespace
	if ns == "" {
		ns = r.CandidateNamespace
	}
	s := &corev1.Secret{}
	if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, s); err != nil {
		return nil, fmt.Errorf("VoterPolicy %s spec.etcd.clientCertSecretRef: reading Secret %s/%s: %w", p.Name, ns, ref.Name, err)
	}
	tlsCfg, err := TLSFromSecret(s)
	if err != nil {
		return nil, fmt.Errorf("VoterPolicy %s spec.etcd.clientCertSecretRef: %w", p.Name, err)
	}
	return &ClientEtcd{TLS: tlsCfg}, nil
}

// Pass observes, records the policy status, asks Next and carries out at
// most one action. It returns when the next pass is due.
func (r *Reconciler) Pass(ctx context.Context) (time.Duration, error) {
	r.defaults()
	defer func() {
		r.passes.Add(1)
		passesTotal.Inc()
	}()
	log := klog.FromContext(ctx)
	o, etcd, err := r.observe(ctx)
	if err != nil || o == nil {
		return r.IdleEvery, err
	}
	if err := r.recordPolicy(ctx, o, o.Cluster()); err != nil {
		return 0, err
	}
	d := Next(o)
	if err := r.recordAutomatic(ctx, o, d); err != nil {
		return 0, err
	}
	swap := findSwap(o.Swaps, d.Swap)
	r.exportDeadlines(o.Swaps)
	every := r.IdleEvery
	if runningSwap(o.Swaps) != nil || pendingSwap(o.Swaps) != nil {
		every = r.RunningEvery
	}
	// The status's heartbeat needs a pass at least this often, whatever
	// the idle interval: admission refuses swaps on a stale status.
	every = min(every, policy.StatusHeartbeat)
	if d.Action == nil {
		every = r.nextPassIn(d, every)
		if swap != nil && d.Waiting != "" {
			return every, r.setProgressing(ctx, swap, metav1.ConditionTrue, d.WaitReason, d.Waiting)
		}
		return every, nil
	}
	a := d.Action
	log.V(1).Info("Voter swap action", "kind", a.Kind, "swap", a.Swap, "node", a.Node, "reason", a.Reason)
	if err := r.carryOut(ctx, o, etcd, swap, a); err != nil {
		actionsTotal.WithLabelValues(string(a.Kind), "error").Inc()
		log.Info("Voter swap action failed; tried again on a later pass", "kind", a.Kind, "swap", a.Swap, "node", a.Node, "err", err.Error())
		if learnerNotReady(a, err) && swap != nil {
			// etcd refuses to promote a learner that has not caught up
			// yet: a state of etcd's, looked at again after EtcdEvery,
			// not an error backed off exponentially.
			return min(every, r.EtcdEvery), r.recordRetry(ctx, o, swap, a, err)
		}
		if budgetRefused(a, err) && swap != nil {
			// A disruption budget allowing no eviction now is the
			// cluster's state too: tried again on the next pass, which
			// renews the swap Lease (a backoff could outlast it). No watch
			// reports a budget's change, so the pass interval bounds it.
			return every, r.recordRetry(ctx, o, swap, a, err)
		}
		if swap != nil && !swap.Status.Phase.Finished() {
			return every, errors.Join(err, r.recordRetry(ctx, o, swap, a, err))
		}
		return every, err
	}
	actionsTotal.WithLabelValues(string(a.Kind), "ok").Inc()
	if r.AfterAction != nil {
		if err := r.AfterAction(*a); err != nil {
			return 0, err
		}
	}
	if err := r.record(ctx, o, swap, a); err != nil {
		return 0, err
	}
	if swap != nil && swap.Status.Snapshot != nil && (a.Kind == Snapshot || a.Reason == holdfastv1.SwapReasonSnapshotVerified) {
		r.snapshotOK[swap.Status.SwapID] = swap.Status.Snapshot.SHA256
	}
	// The next action follows at once.
	return time.Millisecond, nil
}

// nextPassIn is when a pass that only waits is followed by the next, with
// every the pass interval otherwise: a wait on a state no watch reports
// (etcd's own, evicted pods terminating) is looked at again after
// EtcdEvery; any other wait is met by a watch event, every
// being the fallback.
func (r *Reconciler) nextPassIn(d Decision, every time.Duration) time.Duration {
	if d.Polled {
		return min(every, r.EtcdEvery)
	}
	return every
}

func findSwap(swaps []holdfastv1.VoterSwap, name string) *holdfastv1.VoterSwap {
	for i := range swaps {
		if swaps[i].Name == name {
			return &swaps[i]
		}
	}
	return nil
}

// observe reads everything a pass decides from, and renews the Lease when
// this process holds it.
func (r *Reconciler) observe(ctx context.Context) (*Observation, Etcd, error) {
	now := r.Clock.Now()
	p := &holdfastv1.VoterPolicy{}
	if err := r.Reader.Get(ctx, client.ObjectKey{Name: holdfastv1.VoterPolicyName}, p); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	o := &Observation{Now: now, Settings: r.Settings, Policy: p, Nodes: map[string]*corev1.Node{}, Pods: map[string][]corev1.Pod{},
		UnfitSince: r.unfitSince}
	var swaps holdfastv1.VoterSwapList
	if err := r.Reader.List(ctx, &swaps); err != nil {
		return nil, nil, err
	}
	o.Swaps = swaps.Items
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes); err != nil {
		return nil, nil, err
	}
	for i := range nodes.Items {
		o.Nodes[nodes.Items[i].Name] = &nodes.Items[i]
	}
	lease, err := r.getLease(ctx)
	if err != nil {
		return nil, nil, err
	}
	// Only a Lease still held is renewed: one that lapsed in this process's
	// hands is taken again by Next, which records the lapse.
	if policy.SwapLeaseHolder(lease) == r.Settings.Identity && r.Settings.Identity != "" && policy.SwapLeaseHeld(lease, now) {
		l := r.leaseOps()
		renewed, err := l.Renew(ctx, lease, now)
		if err != nil {
			klog.FromContext(ctx).Info("Swap Lease renewal failed; judging it as read again", "err", err.Error())
			if lease, err = r.getLease(ctx); err != nil {
				return nil, nil, err
			}
		} else {
			lease = renewed
		}
	}
	o.Lease = lease

	etcd, err := r.EtcdFor(ctx, p)
	if err != nil {
		o.Etcd = EtcdView{Err: err.Error()}
	} else {
		o.Etcd = etcd.Observe(ctx, observeEndpoints(p, r.lastEtcd))
		if o.Etcd.Err == "" {
			r.lastEtcd = o.Etcd
		}
	}
	if c := o.Cluster(); c.Reached {
		UpdateUnfitSince(r.unfitSince, c.Voters, o.Nodes, p, now)
	}

	var focus *holdfastv1.VoterSwap
	if s := runningSwap(o.Swaps); s != nil {
		focus = s
		if recd := s.Status.Snapshot; recd != nil && SnapshotGuarded(s.Status.Step) && r.snapshotOK[s.Status.SwapID] != recd.SHA256 {
			o.SnapshotCheck = &SnapshotCheck{}
			if err := VerifySnapshot(filepath.Join(r.SnapshotDir, recd.Name), recd); err != nil {
				o.SnapshotCheck.Err = err.Error()
			}
		}
		for _, n := range swapNodes(s) {
			pods, err := (&Nodes{Reader: r.Reader}).PodsOn(ctx, n)
			if err != nil {
				return nil, nil, err
			}
			o.Pods[n] = pods
		}
	} else if s := pendingSwap(o.Swaps); s != nil {
		focus = s
	}
	if focus != nil {
		if o.Candidate, err = r.candidates().Get(ctx, focus.Name); err != nil {
			return nil, nil, err
		}
	}
	return o, etcd, nil
}

func (r *Reconciler) getLease(ctx context.Context) (*coordinationv1.Lease, error) {
	l := &coordinationv1.Lease{}
	err := r.Reader.Get(ctx, client.ObjectKey{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName}, l)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the swap Lease: %w", err)
	}
	return l, nil
}

func (r *Reconciler) leaseOps() *SwapLease {
	return &SwapLease{Client: r.Client, Identity: r.Settings.Identity, Duration: r.Settings.LeaseDuration}
}

func (r *Reconciler) candidates() *Candidates {
	return &Candidates{Client: r.Client, Reader: r.Reader, Namespace: r.CandidateNamespace, Image: r.CandidateImage}
}

// recordPolicy writes the VoterPolicy status this pass observed, before any
// action: the webhook's gates and its role-label rule read it.
func (r *Reconciler) recordPolicy(ctx context.Context, o *Observation, c *Cluster) error {
	st := PolicyStatus(o, c)
	votersGauge.Set(float64(len(c.Voters)))
	learnersGauge.Set(float64(len(c.Learners)))
	etcdHealthy.Set(b2f(c.Healthy()))
	votersEven.Set(b2f(st.EvenSince != nil))
	if equality.Semantic.DeepEqual(st, o.Policy.Status) {
		return nil
	}
	p := o.Policy.DeepCopy()
	p.Status = st
	if err := r.Client.Status().Update(ctx, p); err != nil {
		return fmt.Errorf("recording VoterPolicy status: %w", err)
	}
	o.Policy = p
	return nil
}

// recordAutomatic writes VoterPolicy's AutomaticSwap condition when this
// pass's decision changes it, with a Warning Event when an unfit voter or
// automatic swaps start being held back (a created swap or a proposal has
// its own Event).
func (r *Reconciler) recordAutomatic(ctx context.Context, o *Observation, d Decision) error {
	cond, ok := AutomaticCondition(o, d)
	if !ok {
		return nil
	}
	cond.Message = truncate(cond.Message, 32000)
	old := meta.FindStatusCondition(o.Policy.Status.Conditions, cond.Type)
	if old != nil && old.Status == cond.Status && old.Reason == cond.Reason && old.Message == cond.Message {
		return nil
	}
	p := o.Policy.DeepCopy()
	setCondition(&p.Status.Conditions, cond, metav1.NewTime(o.Now))
	if err := r.Client.Status().Update(ctx, p); err != nil {
		return fmt.Errorf("recording VoterPolicy condition %s: %w", cond.Type, err)
	}
	o.Policy = p
	if r.Recorder != nil && heldBack(cond.Reason) && (old == nil || old.Reason != cond.Reason) {
		r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, cond.Reason, holdfastv1.ConditionAutomaticSwap, "%s", truncate(cond.Message, 1000))
	}
	return nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (r *Reconciler) exportDeadlines(swaps []holdfastv1.VoterSwap) {
	stepDeadline.Reset()
	for i := range swaps {
		s := &swaps[i]
		if s.Status.Phase == holdfastv1.SwapRunning && s.Status.Deadline != nil {
			stepDeadline.WithLabelValues(s.Status.SwapID).Set(float64(s.Status.Deadline.Unix()))
		}
	}
}

// carryOut does the action's work outside the swap's status.
func (r *Reconciler) carryOut(ctx context.Context, o *Observation, etcd Etcd, swap *holdfastv1.VoterSwap, a *Action) error {
	nodes := &Nodes{Client: r.Client, Reader: r.Reader}
	needEtcd := func() error {
		if etcd == nil {
			return errors.New("no etcd client: " + o.Etcd.Err)
		}
		return nil
	}
	switch a.Kind {
	case Record, Refuse:
		return nil
	case CreateSwap:
		s := &holdfastv1.VoterSwap{ObjectMeta: metav1.ObjectMeta{GenerateName: "auto-" + a.Outgoing + "-"},
			Spec: holdfastv1.VoterSwapSpec{Outgoing: a.Outgoing, Reason: a.Message, Origin: holdfastv1.SwapAutomatic}}
		if err := r.Client.Create(ctx, s); err != nil {
			return fmt.Errorf("creating the automatic VoterSwap: %w", err)
		}
		a.Swap = s.Name
		return nil
	case Propose, Withdraw:
		p := o.Policy.DeepCopy()
		p.Status.ProposedSwap = nil
		if a.Kind == Propose {
			p.Status.ProposedSwap = &holdfastv1.ProposedSwap{Outgoing: a.Outgoing, Reason: a.Message, At: metav1.NewTime(o.Now)}
		}
		return r.Client.Status().Update(ctx, p)
	case CreateCandidate:
		return r.candidates().Create(ctx, swap)
	case DeleteCandidate:
		return r.candidates().Delete(ctx, swap.Name)
	case AcquireLease:
		_, err := r.leaseOps().Acquire(ctx, o.Lease, a.SwapID, a.Nodes, o.Now)
		return err
	case ReleaseLease:
		return r.leaseOps().Release(ctx, o.Lease)
	case Snapshot:
		if err := needEtcd(); err != nil {
			return err
		}
		if r.SnapshotDir == "" {
			return errors.New("no snapshot directory (--snapshot-dir)")
		}
		recd, err := etcd.Snapshot(ctx, a.Endpoint, filepath.Join(r.SnapshotDir, SnapshotFile(a.SwapID)))
		if err != nil {
			return err
		}
		recd.Member = a.Node
		recd.Location = SnapshotLocation(filepath.Join(r.SnapshotDir, recd.Name), r.SnapshotVolume)
		a.Then.Snapshot = recd
		a.Message = fmt.Sprintf("snapshot %s from %s verified: %d bytes, sha256 %s, revision %d", recd.Name, a.Node, recd.SizeBytes, recd.SHA256, recd.Revision)
		if err := PruneSnapshots(r.SnapshotDir, r.KeepSnapshots); err != nil {
			klog.FromContext(ctx).Info("Pruning old snapshots failed", "err", err.Error())
		}
		return nil
	case Cordon:
		return nodes.Cordon(ctx, a.Node, a.SwapID)
	case Uncordon:
		return nodes.Uncordon(ctx, a.Node)
	case Evict:
		return nodes.Evict(ctx, a.Pods)
	case SetRoleStep:
		return nodes.SetRoleStep(ctx, a.Node, a.SwapID, a.RoleStep, a.Join)
	case ClearRoleStep:
		return nodes.ClearRoleStep(ctx, a.Node)
	case SetEtcdLabel:
		return nodes.SetEtcdLabel(ctx, a.Node)
	case ClearRoleLabels:
		return nodes.ClearRoleLabels(ctx, a.Node)
	case AddLearner:
		if err := needEtcd(); err != nil {
			return err
		}
		id, err := etcd.AddLearner(ctx, a.Endpoints, a.PeerURL)
		if err != nil {
			return fmt.Errorf("adding %s as a learner: %w", a.Node, err)
		}
		a.Then.IncomingMember = HexID(id)
		return nil
	case PromoteMember:
		if err := needEtcd(); err != nil {
			return err
		}
		if err := etcd.Promote(ctx, a.Endpoints, a.Member); err != nil {
			return fmt.Errorf("promoting member %s of %s: %w", HexID(a.Member), a.Node, err)
		}
		return nil
	case RemoveMember:
		if err := needEtcd(); err != nil {
			return err
		}
		if err := etcd.Remove(ctx, a.Endpoints, a.Member); err != nil {
			return fmt.Errorf("removing member %s of %s: %w", HexID(a.Member), a.Node, err)
		}
		return nil
	case MoveLeader:
		if err := needEtcd(); err != nil {
			return err
		}
		if err := etcd.MoveLeader(ctx, a.Endpoint, a.To); err != nil {
			return fmt.Errorf("moving leadership off %s: %w", a.Node, err)
		}
		return nil
	}
	return fmt.Errorf("unknown action %q", a.Kind)
}
