// Package nodeplugin wires holdfast-node: the role actuator (package role,
// actuator), the tombstone watcher (tombstone), the fence agent (fence),
// image pre-staging (prestage) and the reporter (report), on one
// controller-runtime manager whose Node cache holds only this node. With
// voter swaps off (Options.VoterSwaps false) only the fence agent,
// pre-staging and the reporter run, and nothing dials systemd.
package nodeplugin

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/version"
	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/node-plugin/fence"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/node-plugin/prestage"
	"github.com/holdfast-io/holdfast/node-plugin/report"
	"github.com/holdfast-io/holdfast/node-plugin/role"
	"github.com/holdfast-io/holdfast/node-plugin/tombstone"
)

// Options are holdfast-node's flags.
type Options struct {
	// Version: print the build's version and exit.
	Version bool
	// VoterSwaps runs the voter-swap parts: the role actuator over systemd,
	// the role reconciler, the tombstone watcher and the fitness probe.
	VoterSwaps bool
	// Actuator is the role actuator while no VoterPolicy exists (the
	// chart's node.actuator): the policy's spec.host.actuator wins.
	Actuator      string
	NodeName      string
	HostDir       string
	SystemdDir    string
	MemberDataDir string
	// ServerTombstone is the server's own tombstone file (empty: under the
	// member data directory, as k3s writes it).
	ServerTombstone string
	ServerUnit      string
	AgentUnit       string
	// EtcdLocal is the local member's client URL; EtcdCA, EtcdCert and
	// EtcdKey are host files for TLS to the members (all empty: plain).
	EtcdLocal                 string
	EtcdCA, EtcdCert, EtcdKey string
	CRIEndpoint               string
	// KubeletKubeconfig is the kubelet's kubeconfig, which the StaticPod
	// actuator judges (actuator.StaticPodConfig.KubeletKubeconfig).
	KubeletKubeconfig string
	// SystemdBus is a D-Bus address for systemd; empty is the system bus.
	SystemdBus             string
	MetricsAddr, ProbeAddr string
	// SkipNameValidation lets a test run several managers with the same
	// controller names in one process.
	SkipNameValidation bool
	// PolicyEvery is how often the VoterPolicy's host settings are checked
	// against those the plugin runs with (0: 10s).
	PolicyEvery time.Duration
	// ReportEvery is the reporter's pass interval; FitnessEvery bounds how
	// often it probes fitness.
	ReportEvery, FitnessEvery time.Duration
}

// ParseFlags reads holdfast-node's flags; NODE_NAME comes from the
// downward API.
func ParseFlags(args []string) (Options, error) {
	o := Options{}
	fs := flag.NewFlagSet("holdfast-node", flag.ContinueOnError)
	fs.BoolVar(&o.VoterSwaps, "voter-swaps", true, "run the voter-swap parts: the role actuator (systemd over D-Bus, the server unit's drop-ins), the role reconciler, the tombstone watcher (etcd) and the fitness probe; "+
		"false runs only the fence agent, image pre-staging and the reporter (the server unit reported not provisioned), and needs no systemd, D-Bus, member data or etcd access")
	fs.StringVar(&o.Actuator, "actuator", holdfastv1.ActuatorSystemd, "the role actuator while no VoterPolicy exists (the chart's node.actuator): "+
		holdfastv1.ActuatorSystemd+" or "+holdfastv1.ActuatorStaticPod+"; VoterPolicy default's spec.host.actuator wins once it exists")
	fs.StringVar(&o.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	fs.StringVar(&o.HostDir, "host-dir", hoststate.DefaultDir, "the host directory for the role file, join target, member record and tombstone (voter swaps), and the fence audit in its "+
		hoststate.FenceAuditDir+"/ subdirectory (always)")
	fs.StringVar(&o.SystemdDir, "systemd-dir", actuator.DefaultSystemdDir, "where the server unit's drop-ins are written")
	fs.StringVar(&o.MemberDataDir, "member-data-dir", "", "the etcd member's data directory (default: the VoterPolicy's spec.host.memberDataDir)")
	fs.StringVar(&o.ServerTombstone, "server-tombstone", "", "the file the server writes when its member is removed (default: the VoterPolicy's spec.host.serverTombstone, else "+
		hoststate.DefaultServerTombstone+" under the member data directory, k3s's)")
	fs.StringVar(&o.ServerUnit, "server-unit", "", "the server unit (default: the VoterPolicy's spec.host.serverUnit)")
	fs.StringVar(&o.AgentUnit, "agent-unit", "", "the agent unit (default: the VoterPolicy's spec.host.agentUnit)")
	fs.StringVar(&o.EtcdLocal, "etcd-local-endpoint", "https://127.0.0.1:2379", "the local etcd member's client URL")
	fs.StringVar(&o.EtcdCA, "etcd-ca", "", "CA file for the etcd members' client URLs")
	fs.StringVar(&o.EtcdCert, "etcd-cert", "", "client certificate file for etcd")
	fs.StringVar(&o.EtcdKey, "etcd-key", "", "client key file for etcd")
	fs.StringVar(&o.SystemdBus, "systemd-bus-address", "", "D-Bus address to reach systemd at (default: the system bus, then /run/systemd/private)")
	fs.StringVar(&o.KubeletKubeconfig, "kubelet-kubeconfig", actuator.DefaultKubeletKubeconfig, "with the StaticPod actuator, the kubelet's kubeconfig (its --kubeconfig): "+
		"the host is not provisioned while its server is this node's own kube-apiserver, which a step-down removes (the chart's node.kubeletKubeconfig)")
	fs.StringVar(&o.CRIEndpoint, "cri-endpoint", "unix:///run/containerd/containerd.sock", "the container runtime's CRI socket")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8095", "metrics address (0 disables)")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8096", "health probe address")
	fs.DurationVar(&o.ReportEvery, "report-interval", 30*time.Second, "how often the Node's reports (provisioned, role, tombstone, fitness) are checked and published when changed")
	fs.DurationVar(&o.FitnessEvery, "fitness-interval", 5*time.Minute, "how often the fitness probes run (fsync latency in the member data directory, round trip to each voter's peer port); "+
		"at most as often as --report-interval, and more often than the VoterPolicy's spec.fitness.windowSeconds for a voter to be judged over a window")
	v := version.Flag(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.Version = *v; o.Version {
		return o, nil
	}
	if o.NodeName == "" {
		return o, errors.New("--node-name or NODE_NAME: must name this node")
	}
	if o.Actuator != holdfastv1.ActuatorSystemd && o.Actuator != holdfastv1.ActuatorStaticPod {
		return o, fmt.Errorf("--actuator %q: must be %s or %s (the chart's node.actuator)", o.Actuator, holdfastv1.ActuatorSystemd, holdfastv1.ActuatorStaticPod)
	}
	if o.ReportEvery <= 0 || o.FitnessEvery <= 0 {
		return o, fmt.Errorf("--report-interval %v, --fitness-interval %v: both must be positive durations", o.ReportEvery, o.FitnessEvery)
	}
	return o, nil
}

// Scheme holds the kinds holdfast-node reads.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = holdfastv1.AddToScheme(s)
	return s
}

// NewManager returns a manager whose Node cache holds only this node. The
// runtime containers are read from CRI itself (package fence), so no Pod
// cache is needed.
func NewManager(cfg *rest.Config, o Options) (ctrl.Manager, error) {
	return ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 Scheme(),
		Metrics:                metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress: o.ProbeAddr,
		Controller:             config.Controller{SkipNameValidation: &o.SkipNameValidation},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Node{}: {Field: fields.OneTermEqualSelector("metadata.name", o.NodeName)},
			// The fence agent reads the epoch label a promoted warm standby
			// pod on this node is given after its sandbox was made.
			&corev1.Pod{}: {Field: fields.OneTermEqualSelector("spec.nodeName", o.NodeName), Label: warmStandbyPods},
		}},
	})
}

// warmStandbyPods selects the warm standby pods (holdfast.io/warm-standby).
var warmStandbyPods = func() labels.Selector {
	r, err := labels.NewRequirement(holdfastv1.LabelWarmStandby, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	return labels.NewSelector().Add(*r)
}()

// hostSettings are the host's unit names and member paths: a flag wins,
// then the VoterPolicy, then the defaults (k3s's units; the member data
// directory of the actuator, holdfastv1.DefaultMemberDataDir).
type hostSettings struct{ ServerUnit, AgentUnit, MemberDataDir, ServerTombstone string }

// resolveHost is hostSettings for the flags o and the VoterPolicy vp (nil:
// none exists).
func resolveHost(o Options, vp *holdfastv1.VoterPolicy) hostSettings {
	var h holdfastv1.HostRoleSettings
	if vp != nil {
		h = vp.Spec.Host
	}
	h.Actuator = resolveActuator(o.Actuator, vp).Actuator
	pick := func(flag, policy, def string) string {
		switch {
		case flag != "":
			return flag
		case policy != "":
			return policy
		}
		return def
	}
	return hostSettings{
		ServerUnit:      pick(o.ServerUnit, h.ServerUnit, "k3s.service"),
		AgentUnit:       pick(o.AgentUnit, h.AgentUnit, "k3s-agent.service"),
		MemberDataDir:   pick(o.MemberDataDir, h.MemberDataDirOrDefault(), ""),
		ServerTombstone: pick(o.ServerTombstone, h.ServerTombstone, ""),
	}
}

// readPolicy reads the VoterPolicy past the cache (nil: none exists).
func readPolicy(ctx context.Context, r client.Reader) (*holdfastv1.VoterPolicy, error) {
	vp := &holdfastv1.VoterPolicy{}
	err := r.Get(ctx, types.NamespacedName{Name: holdfastv1.VoterPolicyName}, vp)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading VoterPolicy %s: %w", holdfastv1.VoterPolicyName, err)
	}
	return vp, nil
}

// policyWatch ends the node plugin when the VoterPolicy changes the host
// settings it started with (the policy created after the plugin, or its
// spec.host edited): the actuator, the tombstone check and the reporter
// hold them, and a plugin that went on with the old ones would move aside,
// guard and report the wrong member directory. Its container restarts with
// the new ones; every step it may have been in is safe to repeat.
type policyWatch struct {
	reader   client.Reader
	flags    Options
	running  hostSettings
	actuator actuatorSettings
	every    time.Duration
}

func (w *policyWatch) Start(ctx context.Context) error {
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		vp, err := readPolicy(ctx, w.reader)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Checking the VoterPolicy's host settings")
			continue
		}
		if now := resolveHost(w.flags, vp); now != w.running {
			return fmt.Errorf("VoterPolicy %s changed the host settings from %+v to %+v: holdfast-node exits to start again with them", holdfastv1.VoterPolicyName, w.running, now)
		}
		if now := resolveActuator(w.flags.Actuator, vp); now != w.actuator {
			return fmt.Errorf("VoterPolicy %s changed the actuator settings from %+v to %+v: holdfast-node exits to start again with them", holdfastv1.VoterPolicyName, w.actuator, now)
		}
	}
}

// Run starts holdfast-node until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, o Options) error {
	version.Register(metrics.Registry)
	mgr, err := NewManager(cfg, o)
	if err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	// Voter swaps off: the host state is not the plugin's (not mounted),
	// so the reporter neither reads it nor publishes fitness.
	reporter := &report.Reporter{Client: mgr.GetClient(), NodeName: o.NodeName, Units: report.NoServerUnit{},
		Clock: clock.RealClock{}, Every: o.ReportEvery, FitnessEvery: o.FitnessEvery, NoHostState: true, NoFitness: true}
	if o.VoterSwaps {
		closeSystemd, err := addVoterSwaps(ctx, mgr, &o, reporter)
		if err != nil {
			return err
		}
		defer closeSystemd()
	}
	if err := mgr.Add(reporter); err != nil {
		return err
	}
	cri, err := fence.NewCRI(ctx, o.CRIEndpoint)
	if err != nil {
		return fmt.Errorf("connecting to CRI at %s: %w", o.CRIEndpoint, err)
	}
	agent := &fence.Agent{CRI: cri, Units: fence.CacheUnits{Client: mgr.GetClient()}, Pods: fence.CachePods{Client: mgr.GetClient()}, Lease: fence.HTTPLease{},
		Notifier: fence.EventNotifier{Client: mgr.GetClient(), NodeName: o.NodeName}, Clock: clock.RealClock{}, Node: o.NodeName,
		AuditDir: filepath.Join(o.HostDir, hoststate.FenceAuditDir)}
	// The warm standby pods of this node are cached from the start, so a
	// fence decision never waits for the cache to fill.
	if _, err := mgr.GetCache().GetInformer(ctx, &corev1.Pod{}); err != nil {
		return fmt.Errorf("caching the pods of node %s: %w", o.NodeName, err)
	}
	// A fence done while the apiserver was away, by a plugin that restarted
	// before it came back, still gets its Event.
	if n, err := agent.Recover(ctx); err != nil {
		return fmt.Errorf("reading the fence audit: %w", err)
	} else if n > 0 {
		klog.FromContext(ctx).Info("Posting the Events of fences done before a restart", "actions", n)
	}
	if err := (&fence.UnitReconciler{Agent: agent}).SetupWithManager(mgr); err != nil {
		return err
	}
	probe, err := fence.ReadyzProbe(cfg)
	if err != nil {
		return err
	}
	runtimes := &fence.RuntimesReporter{Agent: agent, Client: mgr.GetClient(), Units: mgr.GetClient(), NodeName: o.NodeName, Clock: clock.RealClock{}}
	if err := mgr.Add(&fence.Loop{Agent: agent, Runtimes: runtimes, Probe: probe, Every: time.Second, Clock: clock.RealClock{}}); err != nil {
		return err
	}
	images, err := prestage.NewCRI(ctx, o.CRIEndpoint)
	if err != nil {
		return fmt.Errorf("connecting to the CRI image service at %s: %w", o.CRIEndpoint, err)
	}
	if err := (&prestage.Reconciler{Client: mgr.GetClient(), NodeName: o.NodeName, Images: images}).SetupWithManager(mgr); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// addVoterSwaps adds the role actuator (over systemd, or the kubelet's static
// pods when VoterPolicy spec.host.actuator is StaticPod), the role
// reconciler and the tombstone watcher, and points the reporter at the
// actuator, the member data directory and the voters; the returned func
// closes the systemd connection.
func addVoterSwaps(ctx context.Context, mgr ctrl.Manager, o *Options, reporter *report.Reporter) (func(), error) {
	vp, err := readPolicy(ctx, mgr.GetAPIReader())
	if err != nil {
		return nil, err
	}
	flags := *o
	h := resolveHost(flags, vp)
	o.ServerUnit, o.AgentUnit, o.MemberDataDir, o.ServerTombstone = h.ServerUnit, h.AgentUnit, h.MemberDataDir, h.ServerTombstone
	every := o.PolicyEvery
	if every <= 0 {
		every = 10 * time.Second
	}
	acts := resolveActuator(flags.Actuator, vp)
	if vp != nil && flags.Actuator != "" && acts.Actuator != flags.Actuator {
		klog.FromContext(ctx).Error(nil, "The VoterPolicy's actuator is not the chart's: holdfast-node runs the policy's, with the host paths the chart mounts for the other; make node.actuator and spec.host.actuator agree",
			"policy", acts.Actuator, "chart", flags.Actuator)
	}
	if err := mgr.Add(&policyWatch{reader: mgr.GetAPIReader(), flags: flags, running: h, actuator: acts, every: every}); err != nil {
		return nil, err
	}
	state := hoststate.State{Dir: o.HostDir, MemberDataDir: o.MemberDataDir, ServerTombstone: o.ServerTombstone}
	etcd, err := newEtcd(ctx, mgr.GetAPIReader(), *o, state)
	if err != nil {
		return nil, err
	}
	if acts.Actuator == holdfastv1.ActuatorStaticPod {
		act, err := newStaticPodActuator(mgr, o, acts, state, etcd)
		if err != nil {
			return nil, err
		}
		return func() {}, addRoleParts(mgr, o, reporter, state, etcd, act)
	}
	// The server unit starts only once this binary, on the host, has judged
	// the host: at boot too, before this pod runs.
	if err := installHostBinary(o.HostDir); err != nil {
		return nil, fmt.Errorf("copying holdfast-node to the host for the server's start condition: %w", err)
	}
	act := newSystemdRole(*o, state, actuatorSource(vp), etcd)
	if err := addRoleParts(mgr, o, reporter, state, etcd, act); err != nil {
		act.Close()
		return nil, err
	}
	return act.Close, nil
}

// roleActuator is what the role reconciler drives and the reporter reads.
type roleActuator interface {
	role.Actuator
	report.Units
}

// newEtcd is the node plugin's etcd client: the local member at o's local
// endpoint, the cluster at the voters' client URLs, each new list of which
// it records on the host for the server's start condition. The tombstone
// watcher asks it, and either actuator's promote, before it is done.
func newEtcd(ctx context.Context, reader client.Reader, o Options, state hoststate.State) (*tombstone.ClientEtcd, error) {
	tlsCfg, err := etcdTLS(o)
	if err != nil {
		return nil, err
	}
	return &tombstone.ClientEtcd{LocalEndpoint: o.EtcdLocal, TLS: tlsCfg, Cluster: PolicyEndpoints(reader),
		Learned: func(urls []string) {
			if err := state.SetMemberEndpoints(urls); err != nil {
				klog.FromContext(ctx).Error(err, "Recording the voters' client URLs for the server's start condition")
			}
		}}, nil
}

// addRoleParts adds the tombstone watcher and the role reconciler over act,
// and points the reporter at act, the member data directory and the voters.
func addRoleParts(mgr ctrl.Manager, o *Options, reporter *report.Reporter, state hoststate.State, etcd *tombstone.ClientEtcd, act roleActuator) error {
	reader := mgr.GetAPIReader()
	watcher := &tombstone.Watcher{State: state, Clock: clock.RealClock{}, Every: 5 * time.Second, Etcd: etcd, Written: reporter.Kick}
	if err := mgr.Add(watcher); err != nil {
		return err
	}
	if err := (&role.Reconciler{Client: mgr.GetClient(), Reader: reader, NodeName: o.NodeName,
		Actuator: act, State: state, Removal: watcher.Check, Done: reporter.Kick}).SetupWithManager(mgr); err != nil {
		return err
	}
	reporter.Units, reporter.State, reporter.Peers = act, state, etcd.VoterPeerURLs
	reporter.NoHostState, reporter.NoFitness = false, false
	return nil
}

// PolicyEndpoints reads the client URLs to reach etcd by from VoterPolicy
// default: the voters' as the voter controller last read them, then
// spec.etcd.endpoints (VoterPolicy.MemberEndpoints).
func PolicyEndpoints(r client.Reader) func(context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		vp := &holdfastv1.VoterPolicy{}
		if err := r.Get(ctx, types.NamespacedName{Name: holdfastv1.VoterPolicyName}, vp); err != nil {
			return nil, err
		}
		return vp.MemberEndpoints(), nil
	}
}

func etcdTLS(o Options) (*tls.Config, error) {
	if o.EtcdCA == "" && o.EtcdCert == "" && o.EtcdKey == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.EtcdCA != "" {
		pem, err := os.ReadFile(o.EtcdCA)
		if err != nil {
			return nil, fmt.Errorf("--etcd-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--etcd-ca: no certificate in %s", o.EtcdCA)
		}
		cfg.RootCAs = pool
	}
	if o.EtcdCert != "" || o.EtcdKey != "" {
		cert, err := tls.LoadX509KeyPair(o.EtcdCert, o.EtcdKey)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cert/--etcd-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
