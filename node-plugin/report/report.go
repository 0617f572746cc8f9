// Package report publishes what the host knows on its own Node (docs/design.md §5):
// holdfast.io/provisioned (the server unit is installed; when it is not, an
// Event on the Node says why), the observed role
// label holdfast.io/role, holdfast.io/tombstone (mirroring the host's
// tombstone file), and holdfast.io/fitness (fsync latency of the member data
// directory and round trip to each voter's peer port). It writes only when
// something changed, and probes fitness at most every FitnessEvery.
package report

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/node-plugin/periodic"
)

// Units is what the reporter asks systemd.
type Units interface {
	Provisioned(ctx context.Context) (bool, error)
	// ActiveRole is the role whose unit is active: server, agent or "".
	ActiveRole(ctx context.Context) (string, error)
}

// Reasons is Units that can say why the host is not provisioned (the
// actuators do): the reporter posts it as an Event on the Node.
type Reasons interface {
	// NotProvisioned says what the host lacks, "" when it is provisioned.
	NotProvisioned() (string, error)
}

// NoServerUnit is Units on a host whose voter swaps are off: holdfast-node
// does not reach systemd, so no server unit is provisioned for it and no
// unit's role is known.
type NoServerUnit struct{}

// Provisioned is false: holdfast cannot switch this host to server.
func (NoServerUnit) Provisioned(context.Context) (bool, error) { return false, nil }

// ActiveRole is unknown; the reporter falls back to the role file.
func (NoServerUnit) ActiveRole(context.Context) (string, error) { return "", nil }

// Reporter writes the node's reports.
type Reporter struct {
	Client   client.Client
	NodeName string
	Units    Units
	State    hoststate.State
	// Clock stamps the fitness probes and paces the passes.
	Clock clock.WithTicker
	// Peers returns the voters' peer URLs (nil when unknown).
	Peers func(ctx context.Context) ([]string, error)
	// Every is the pass interval; FitnessEvery bounds the fitness probes.
	Every, FitnessEvery time.Duration
	// FsyncSamples is how many O_DSYNC writes one probe makes.
	FsyncSamples int
	// NoHostState reads no role file or tombstone and leaves the Node's
	// role label and tombstone annotation as they are: with voter swaps off
	// the host state directory is not mounted, and a file not seen is not a
	// file gone (a tombstone stays until voter swaps read it again).
	NoHostState bool
	// NoFitness publishes no fitness: with voter swaps off the member data
	// directory is not mounted and no voter's peers are known.
	NoFitness bool

	lastFitness *holdfastv1.Fitness
	// notProvisioned is the reason last said (posted, or found already
	// reported at start); "" while provisioned. judged is set once a pass
	// has judged the host: a reason whose Event exists is then a return,
	// not the same one found again at start.
	notProvisioned string
	judged         bool
	kickOnce       sync.Once
	kick           chan struct{}
}

func (r *Reporter) kicks() chan struct{} {
	r.kickOnce.Do(func() { r.kick = make(chan struct{}, 1) })
	return r.kick
}

// Kick asks for a pass now: the host state changed (a tombstone written or
// retired, a role switched), and a voter swap waits for the Node to say so.
// It never blocks; kicks before a pending pass are one.
func (r *Reporter) Kick() {
	select {
	case r.kicks() <- struct{}{}:
	default:
	}
}

// WALWriteSize is the size of one probe write: etcd's typical WAL entry
// write, as its own disk guidance measures fdatasync latency with.
const WALWriteSize = 2300

// Pass publishes the reports once.
func (r *Reporter) Pass(ctx context.Context) (err error) {
	if r.FsyncSamples == 0 {
		r.FsyncSamples = 100
	}
	now := r.Clock.Now()
	probe := !r.NoFitness && (r.lastFitness == nil || now.Sub(r.lastFitness.At.Time) >= r.FitnessEvery)
	t := &tally{open: []string{KindProvisioned, KindRole}}
	if !r.NoHostState {
		t.open = append(t.open, KindTombstone)
	}
	if probe {
		t.open = append(t.open, KindFitness)
	}
	defer func() { t.finish(err) }()

	node := &corev1.Node{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: r.NodeName}, node); err != nil {
		return err
	}
	ann := map[string]*string{}
	lbl := map[string]*string{}
	set := func(kind string, patch map[string]*string, have map[string]string, key string, want *string) {
		if cur, ok := have[key]; !ok || cur != *want {
			patch[key] = want
			t.change(kind)
			return
		}
		t.settle(kind)
	}

	prov, err := r.Units.Provisioned(ctx)
	if err != nil {
		return err
	}
	set(KindProvisioned, ann, node.Annotations, holdfastv1.AnnotationProvisioned, new(strconv.FormatBool(prov)))

	role, err := r.Units.ActiveRole(ctx)
	if err != nil {
		return err
	}
	if role == "" && !r.NoHostState {
		if role, err = r.State.Role(); err != nil {
			return err
		}
	}
	if role != "" {
		set(KindRole, lbl, node.Labels, holdfastv1.LabelRole, &role)
	} else {
		t.settle(KindRole)
	}
	r.sayWhyNotProvisioned(ctx, node, prov, role)

	if !r.NoHostState {
		ts, err := r.State.Tombstone()
		if err != nil {
			return err
		}
		switch _, had := node.Annotations[holdfastv1.AnnotationTombstone]; {
		case ts != nil:
			b, _ := json.Marshal(ts)
			set(KindTombstone, ann, node.Annotations, holdfastv1.AnnotationTombstone, new(string(b)))
		case had:
			ann[holdfastv1.AnnotationTombstone] = nil
			t.change(KindTombstone)
		default:
			t.settle(KindTombstone)
		}
	}

	if probe {
		f, err := r.Fitness(ctx)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Fitness probe failed")
			t.fail(KindFitness)
		} else {
			r.lastFitness = f
			b, _ := json.Marshal(f)
			set(KindFitness, ann, node.Annotations, holdfastv1.AnnotationFitness, new(string(b)))
		}
	}

	if len(ann) == 0 && len(lbl) == 0 {
		return nil
	}
	meta := map[string]any{}
	if len(ann) > 0 {
		meta["annotations"] = ann
	}
	if len(lbl) > 0 {
		meta["labels"] = lbl
	}
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	return r.Client.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: r.NodeName}}, client.RawPatch(types.MergePatchType, body))
}

// sayWhyNotProvisioned makes the reason a host is not provisioned visible
// where an operator looks, which the provisioned annotation alone is not: a
// log line and an Event on the Node (kubectl describe node), reason
// NotProvisioned, when the report turns false or its reason changes. A
// Warning on a host that runs a member (role server): the voter gates
// refuse to swap it out until it is fixed. The Event is named after the
// node and the reason, so a restarted reporter does not post the same one
// again while it lasts; a reason that returns after another or after the
// host was provisioned is posted again. One that could not be posted is
// tried again on the next pass.
func (r *Reporter) sayWhyNotProvisioned(ctx context.Context, node *corev1.Node, prov bool, role string) {
	log := klog.FromContext(ctx)
	u, ok := r.Units.(Reasons)
	if prov || !ok {
		r.notProvisioned, r.judged = "", true
		return
	}
	why, err := u.NotProvisioned()
	if err != nil {
		log.Error(err, "Reading why the host is not provisioned")
		return
	}
	if why == "" || why == r.notProvisioned {
		return
	}
	returned := r.judged
	r.judged = true
	log.Info("Host not provisioned", "node", klog.KObj(node), "reason", why)
	typ := corev1.EventTypeNormal
	if role == holdfastv1.RoleServer {
		typ = corev1.EventTypeWarning
	}
	sum := sha256.Sum256([]byte(why))
	now := metav1.NewTime(r.Clock.Now())
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.not-provisioned.%x", node.Name, sum[:8]), Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID},
		Reason:         holdfastv1.EventReasonNotProvisioned, Message: why, Type: typ,
		Source:         corev1.EventSource{Component: "holdfast-node", Host: node.Name},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "holdfast.io/holdfast-node", ReportingInstance: node.Name, Action: "Report",
	}
	err = r.Client.Create(ctx, ev)
	if apierrors.IsAlreadyExists(err) && returned {
		// A return: posted anew under a name of its own (the node plugin
		// may create Events, never edit one).
		ev.Name = fmt.Sprintf("%s.%x", ev.Name, now.UnixNano())
		err = r.Client.Create(ctx, ev)
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		log.Error(err, "Posting the Event that says why the host is not provisioned")
		return
	}
	r.notProvisioned = why
}

// Fitness runs the probes: fsync latency in the member data directory (or
// its nearest existing parent on a host that is no member yet) and a TCP
// connect round trip to each voter's peer URL.
func (r *Reporter) Fitness(ctx context.Context) (*holdfastv1.Fitness, error) {
	dir := r.State.MemberDataDir
	for {
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			break
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil, fmt.Errorf("no directory to probe for %s", r.State.MemberDataDir)
		}
		dir = parent
	}
	lat, err := FsyncLatencies(dir, r.FsyncSamples)
	if err != nil {
		return nil, err
	}
	f := &holdfastv1.Fitness{FsyncP99Micros: P99(lat).Microseconds(), FsyncSamples: int32(len(lat)), At: metav1.Time{Time: r.Clock.Now()}}
	if r.Peers != nil {
		peers, err := r.Peers(ctx)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Voter peer URLs unknown", "err", err)
		}
		for _, p := range peers {
			if f.PeerRTTMicros == nil {
				f.PeerRTTMicros = map[string]int64{}
			}
			f.PeerRTTMicros[p] = PeerRTT(ctx, p).Microseconds()
		}
	}
	return f, nil
}

// P99 is the 99th percentile (nearest rank).
func P99(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	idx := (len(s)*99+99)/100 - 1
	return s[min(idx, len(s)-1)]
}

// PeerRTT is the TCP connect time to a peer URL, -1µs when it does not
// answer within a second.
func PeerRTT(ctx context.Context, peer string) time.Duration {
	u, err := url.Parse(peer)
	if err != nil || u.Host == "" {
		return -time.Microsecond
	}
	d := net.Dialer{Timeout: time.Second}
	start := time.Now()
	c, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return -time.Microsecond
	}
	rtt := time.Since(start)
	c.Close()
	return rtt
}

// Start runs passes every Every until ctx ends (a manager Runnable).
func (r *Reporter) Start(ctx context.Context) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Every == 0 {
		r.Every = 30 * time.Second
	}
	if r.FitnessEvery == 0 {
		r.FitnessEvery = 5 * time.Minute
	}
	return periodic.RunKicked(ctx, r.Clock, r.Every, r.kicks(), func(ctx context.Context) {
		if err := r.Pass(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Node report failed")
		}
	})
}
