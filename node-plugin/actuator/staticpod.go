package actuator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/atomicfile"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
)

// MirrorPods reads the mirror pods the kubelet publishes for its static
// pods. The real one reads the apiserver past any cache (APIMirrorPods).
type MirrorPods interface {
	// MirrorPod returns the pod namespace/name; nil when there is none.
	MirrorPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
}

// APIMirrorPods is MirrorPods from the apiserver, uncached: a wait ends on
// the pod as it is now.
type APIMirrorPods struct{ Reader client.Reader }

// MirrorPod implements MirrorPods.
func (m APIMirrorPods) MirrorPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	err := m.Reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, pod)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading mirror pod %s/%s: %w", namespace, name, err)
	}
	return pod, nil
}

// WaitingError is a step that has done its part and waits for the kubelet
// or etcd: the step is still running, and is repeated (it is idempotent)
// after RetryAfter or when the Node changes.
type WaitingError struct {
	Reason     string
	RetryAfter time.Duration
}

func (e *WaitingError) Error() string { return e.Reason }

// IsWaiting says whether err is a wait, and when to look again.
func IsWaiting(err error) (time.Duration, bool) {
	var w *WaitingError
	if errors.As(err, &w) {
		return w.RetryAfter, true
	}
	return 0, false
}

// Defaults of StaticPodConfig.
const (
	DefaultManifestsDir      = "/etc/kubernetes/manifests"
	DefaultPKIDir            = "/etc/kubernetes/pki"
	DefaultAPIServerTemplate = "/etc/kubernetes/holdfast/kube-apiserver.yaml"
	DefaultStaticPodTimeout  = 5 * time.Minute
	DefaultStaticPodRecheck  = 2 * time.Second
)

// StaticPodConfig says what the static pod actuator writes.
type StaticPodConfig struct {
	// NodeName is this node: the member's name, the mirror pods' suffix.
	NodeName string
	// ManifestsDir is the kubelet's staticPodPath.
	ManifestsDir string
	// PKIDir is kubeadm's PKI directory (etcd/ca.crt, etcd/ca.key).
	PKIDir string
	// APIServerTemplate is the operator's kube-apiserver manifest.
	APIServerTemplate string
	// KubeletKubeconfig is the kubelet's kubeconfig: a host whose kubelet
	// reaches only this node's kube-apiserver is not provisioned
	// (kubeletStranded).
	KubeletKubeconfig string
	EtcdImage         string
	// ClientPort and MetricsPort of the member (kubeadm's 2379 and 2381).
	ClientPort, MetricsPort int
	// StartCondition is the argv of the etcd pod's init container (the
	// host's holdfast-node start-condition); empty: none.
	StartCondition []string
	// State is the host state; its MemberDataDir is etcd's data directory.
	State hoststate.State
	// Members answers whether the member runs in the cluster it was told
	// to join: a promote is done only then.
	Members Membership
	// Timeout bounds a wait for a mirror pod after the manifest was
	// written; past it the step fails (and is retried with backoff) with
	// the pod's state. Recheck is how soon a waiting step looks again.
	Timeout, Recheck time.Duration
	Clock            clock.PassiveClock
}

// StaticPodActuator switches a kubeadm host between a stacked etcd member
// with its kube-apiserver (static pods the kubelet runs) and a worker. The
// kubelet is the process manager: a step is done when the mirror pod the
// kubelet publishes says so. The host guards are hoststate's, as for the
// systemd actuator: the etcd manifest is written only when
// hoststate.State.ServerAllowed says so.
type StaticPodActuator struct {
	cfg  StaticPodConfig
	pods MirrorPods
}

// NewStaticPod returns a static pod actuator.
func NewStaticPod(pods MirrorPods, cfg StaticPodConfig) *StaticPodActuator {
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&cfg.ManifestsDir, DefaultManifestsDir)
	def(&cfg.PKIDir, DefaultPKIDir)
	def(&cfg.APIServerTemplate, DefaultAPIServerTemplate)
	def(&cfg.KubeletKubeconfig, DefaultKubeletKubeconfig)
	if cfg.ClientPort == 0 {
		cfg.ClientPort = 2379
	}
	if cfg.MetricsPort == 0 {
		cfg.MetricsPort = 2381
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultStaticPodTimeout
	}
	if cfg.Recheck == 0 {
		cfg.Recheck = DefaultStaticPodRecheck
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &StaticPodActuator{cfg: cfg, pods: pods}
}

func (a *StaticPodActuator) manifest(name string) string {
	return filepath.Join(a.cfg.ManifestsDir, name)
}

// Provisioned says whether the host can run a member: the kubelet's
// manifests directory, the etcd CA with its key, the kube-apiserver
// template, and a kubelet that reaches another kube-apiserver than this
// node's (a step-down removes that one).
func (a *StaticPodActuator) Provisioned(context.Context) (bool, error) {
	_, why, err := a.provisioned()
	return why == "", err
}

// NotProvisioned says what the host lacks, "" when it is provisioned.
func (a *StaticPodActuator) NotProvisioned() (string, error) {
	_, why, err := a.provisioned()
	return why, err
}

func (a *StaticPodActuator) provisioned() (bool, string, error) {
	if a.cfg.EtcdImage == "" {
		// No VoterPolicy yet: the chart's node.actuator runs this actuator,
		// which guards and reports but has nothing to promote with.
		return false, fmt.Sprintf("no etcd image: VoterPolicy %s spec.host.staticPod.etcdImage is not set (create the policy with spec.host.actuator StaticPod)", holdfastv1.VoterPolicyName), nil
	}
	for _, p := range []string{a.cfg.ManifestsDir, filepath.Join(a.cfg.PKIDir, EtcdCACert), filepath.Join(a.cfg.PKIDir, EtcdCAKey), a.cfg.APIServerTemplate} {
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Sprintf("host not provisioned for static pod members: %s does not exist", p), nil
		} else if err != nil {
			return false, "", err
		}
	}
	if why, err := a.kubeletNotProvisioned(); err != nil {
		return false, "", err
	} else if why != "" {
		return false, "host not provisioned for static pod members: " + why, nil
	}
	return true, "", nil
}

// Promote makes the host a member joining the cluster in join: join target
// and role file, the member's certificates from the etcd CA, the etcd
// manifest (guarded), and, once the kubelet runs it (its mirror pod
// Running and Ready) and the member has joined (joined), the
// kube-apiserver manifest. It returns the time the etcd manifest was first
// written by this promote, or a WaitingError until then. The apiserver is
// not waited for: it serves only once the controller has promoted the
// learner, which it does after this step is done.
func (a *StaticPodActuator) Promote(ctx context.Context, join string) (time.Time, error) {
	self, err := selfInJoin(join, a.cfg.NodeName, a.cfg.ClientPort)
	if err != nil {
		return time.Time{}, err
	}
	if _, why, err := a.provisioned(); err != nil {
		return time.Time{}, err
	} else if why != "" {
		return time.Time{}, &RefusedError{Reason: why}
	}
	st := a.cfg.State
	removed, err := st.Removed()
	if err != nil {
		return time.Time{}, err
	}
	if removed != "" {
		return time.Time{}, &RefusedError{Reason: removed + "; the host is not finished to an agent yet"}
	}
	// The etcd CA before any host file: a host whose CA cannot issue the
	// member's certificates is refused with nothing changed.
	now := a.cfg.Clock.Now()
	ca, err := loadEtcdCA(a.cfg.PKIDir, now)
	if err != nil {
		return time.Time{}, &RefusedError{Reason: err.Error()}
	}
	// The join target first: the role file may then say server without the
	// never-bootstrap guard ever seeing a former member with nowhere to join.
	if cur, err := st.Join(); err != nil {
		return time.Time{}, err
	} else if cur != join {
		if err := st.SetJoin(join); err != nil {
			return time.Time{}, err
		}
	}
	if role, err := st.Role(); err != nil {
		return time.Time{}, err
	} else if role != holdfastv1.RoleServer {
		if err := st.SetRole(holdfastv1.RoleServer); err != nil {
			return time.Time{}, err
		}
	}
	if err := ca.ensureMember(a.cfg.PKIDir, a.cfg.NodeName, self.peer.Hostname(), now); err != nil {
		return time.Time{}, err
	}
	etcd := a.etcdPod(join, self)
	changed, err := a.writeEtcdManifest(etcd)
	if err != nil {
		return time.Time{}, err
	}
	started, err := st.ServerStartedAt()
	if err != nil {
		return time.Time{}, err
	}
	if changed || started.IsZero() {
		started = now
		if err := st.SetServerStartedAt(started); err != nil {
			return time.Time{}, err
		}
	}
	if err := a.waitRunning(ctx, etcd, started); err != nil {
		return started, err
	}
	if what := joined(ctx, a.cfg.Members, a.cfg.NodeName); what != "" {
		return started, a.waitOrFail(what, started)
	}
	api, err := a.apiServerPod()
	if err != nil {
		return started, err
	}
	if _, err := a.writeManifest(APIServerManifest, api); err != nil {
		return started, err
	}
	return started, nil
}

// writeEtcdManifest is the only writer of the etcd manifest: it refuses
// when the host files forbid a server (a tombstone, the role file agent, a
// former member with nowhere to join).
func (a *StaticPodActuator) writeEtcdManifest(pod *corev1.Pod) (bool, error) {
	ok, why, err := a.cfg.State.ServerAllowed()
	if err != nil {
		return false, err
	}
	if !ok {
		return false, &RefusedError{Reason: "not writing the etcd manifest: " + why}
	}
	return a.writeManifest(EtcdManifest, pod)
}

// writeManifest writes pod, stamped with its hash, unless the same is
// there; it says whether it wrote.
func (a *StaticPodActuator) writeManifest(name string, pod *corev1.Pod) (bool, error) {
	body, _, err := manifestBody(pod)
	if err != nil {
		return false, err
	}
	if old, err := os.ReadFile(a.manifest(name)); err == nil && bytes.Equal(old, body) {
		return false, nil
	}
	// 0600: the kubelet reads it as root, and the command line names the
	// cluster's members.
	return true, atomicfile.Write(a.cfg.ManifestsDir, name, body, 0o600)
}

// waitRunning waits for the mirror pod of pod (as written, by its hash) to
// be Running and Ready: a WaitingError until then, a failure past Timeout
// after since.
func (a *StaticPodActuator) waitRunning(ctx context.Context, pod *corev1.Pod, since time.Time) error {
	_, hash, err := manifestBody(pod)
	if err != nil {
		return err
	}
	ns, name := mirrorName(pod, a.cfg.NodeName)
	mirror, err := a.pods.MirrorPod(ctx, ns, name)
	if err != nil {
		return err
	}
	var state string
	switch {
	case mirror == nil:
		state = "not published by the kubelet yet"
	case mirror.Annotations[annotationConfigMirror] == "":
		state = "a pod that is not a mirror pod (no " + annotationConfigMirror + ")"
	case mirror.DeletionTimestamp != nil:
		state = "being deleted"
	case mirror.Annotations[AnnotationManifestHash] != hash:
		state = fmt.Sprintf("of another manifest (hash %q, want %q)", mirror.Annotations[AnnotationManifestHash], hash)
	case mirror.Status.Phase != corev1.PodRunning:
		state = fmt.Sprintf("%s, not Running", mirror.Status.Phase)
	case !podReady(mirror):
		state = "Running, not Ready"
	default:
		return nil
	}
	return a.waitOrFail(fmt.Sprintf("mirror pod %s/%s is %s", ns, name, state), since)
}

// waitGone waits for the mirror pod of pod to be gone: the kubelet deletes
// a mirror pod whose static pod was removed once the pod has terminated.
func (a *StaticPodActuator) waitGone(ctx context.Context, pod *corev1.Pod, since time.Time) error {
	ns, name := mirrorName(pod, a.cfg.NodeName)
	mirror, err := a.pods.MirrorPod(ctx, ns, name)
	if err != nil || mirror == nil || mirror.Annotations[annotationConfigMirror] == "" {
		return err
	}
	return a.waitOrFail(fmt.Sprintf("mirror pod %s/%s is still there (%s): the kubelet has not stopped it yet", ns, name, mirror.Status.Phase), since)
}

func (a *StaticPodActuator) waitOrFail(what string, since time.Time) error {
	return bound{clock: a.cfg.Clock, timeout: a.cfg.Timeout, recheck: a.cfg.Recheck, since: "the manifest changed"}.waitOrFail(what, since)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
