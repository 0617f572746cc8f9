package app

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/grantor"
	"github.com/holdfast-io/holdfast/controller/leadership"
	"github.com/holdfast-io/holdfast/controller/leasecerts"
	"github.com/holdfast-io/holdfast/controller/units"
	"github.com/holdfast-io/holdfast/internal/audit"
	"github.com/holdfast-io/holdfast/internal/leasetls"
	"github.com/holdfast-io/holdfast/policy"
)

var setLogger sync.Once

// UnitsElectionID is the grantor's election Lease.
const UnitsElectionID = "holdfast-grantor"

// unitsOptions are the units role's flags.
type unitsOptions struct {
	timings   policy.GrantorTimings
	standDown time.Duration
	electID   string
	watchNS   string
	leaseCA   string
	plaintext bool
}

var unitsOpts = &unitsOptions{}

func init() {
	Register(&Role{
		Name:  "units",
		Short: "the control lease grantor and the unit availability controller (automatic and manual failover)",
		Flags: unitsFlags,
		Run:   runUnits,
	})
}

func unitsFlags(fs *flag.FlagSet, _ *Common) {
	o := unitsOpts
	fs.StringVar(&o.electID, "units-leader-election-id", UnitsElectionID, "")
	doc("units-leader-election-id", "Name of the grantor's election Lease in --leader-election-namespace.", "none")
	fs.StringVar(&o.watchNS, "watch-namespace", "", "")
	doc("watch-namespace", "Reconcile the Units of this namespace only; empty reconciles every namespace. Two grantors must never watch the same Units under different election Leases.", "none")
	o.timings.AddFlags(fs, func(string) string { return "" })
	doc("leader-election-lease-duration", "How long a standby waits, from the last leader record it saw change, before it takes the grantor's leadership. For this process the election is most of the grantor gap, hence 6s and not controller-runtime's 15s.",
		"lease floor = the least lease with read-idle + ping + 2 x poll + this + warm start + 5s <= lease - 2 x lease/6 (30s at the defaults), which holdfast-webhook enforces when given the same value; and this > --leader-election-renew-deadline (client-go refuses otherwise)")
	doc("leader-election-renew-deadline", "How long the leader retries a failed renewal of its election Lease before it gives up leadership and stands down. Election requests time out at half of it.",
		"--leader-election-lease-duration > this > 1.2 x --leader-election-retry-period (client-go refuses otherwise)")
	doc("leader-election-retry-period", "Between election attempts; client-go waits up to 2.2 times it (its 1.2 jitter), which is the poll in the grantor gap.",
		"lease floor: read-idle + ping + 2 x (2.2 x this) + election lease + warm start + 5s <= lease - 2 x lease/6; and 1.2 x this < --leader-election-renew-deadline")
	doc("apiserver-read-idle-timeout", "HTTP/2 health check of this process's apiserver connections: a PING after this long with no frame received (HTTP2_READ_IDLE_TIMEOUT_SECONDS, set before any transport is built). Whole seconds, at least 1s: 0 would disable the check and leave a connection to a dead apiserver up for client-go's 45s.",
		"lease floor: this + --apiserver-ping-timeout + 2 x poll + election lease + warm start + 5s <= lease - 2 x lease/6")
	doc("apiserver-ping-timeout", "How long that PING may go unanswered before the connection is closed and dialled again (HTTP2_PING_TIMEOUT_SECONDS). Whole seconds, at least 1s.",
		"lease floor: --apiserver-read-idle-timeout + this + 2 x poll + election lease + warm start + 5s <= lease - 2 x lease/6")
	fs.DurationVar(&o.standDown, "lease-stand-down", leadership.DefaultLeaseStandDown, "")
	doc("lease-stand-down", "When this process loses the grantor's leadership without being asked, it goes on renewing the runtimes it holds until this long after its last renewal of the leadership (a process stopped or frozen through its loss renews only what is left), learning nothing new and answering /healthz, then exits; a signal ends it early. A new leader reads no lease expiry as a fence until this + the unit's lease + its margin after its acquisition (FailoverRequest LeadershipHoldOff). 0 disables the stand-down and the hold-off together; at most 10m. 90s clears the 60s ceiling of a control-plane VIP move on a healthy etcd.",
		"hold-off = this + lease + rebind margin, from a new leader's acquisition; this >= the longest apiserver outage a unit should ride through")
	fs.StringVar(&o.leaseCA, "lease-ca-dir", "", "")
	doc("lease-ca-dir", leaseCADirDoc, "the CA's certificate chains to ca.crt and may sign; it should outlive the runtime certificates it signs (a day) by far")
	fs.BoolVar(&o.plaintext, "insecure-plaintext-lease", false, "")
	doc("insecure-plaintext-lease", insecurePlaintextDoc, "never with --lease-ca-dir")
}

// leaseCADirDoc and insecurePlaintextDoc are the lease channel's flags'
// help (docs/design.md §3 L12).
const (
	leaseCADirDoc = "Directory of the lease CA, as a kubernetes.io/tls Secret mounts it: tls.crt and tls.key (the CA that signs the grantor's client certificate and every runtime pod's serving certificate) and ca.crt (the CA bundle both ends trust, published to runtime pods in the ClusterTrustBundle " +
		"holdfast.io:lease:ca). Read again every 2s: a rotated CA takes effect without a restart. The grantor speaks only mutual TLS (HTTP/2) to runtimes and signs the PodCertificateRequests of the holdfast.io/lease signer. Required unless --insecure-plaintext-lease."
	insecurePlaintextDoc = "UNSAFE: speak plain HTTP to the runtimes, build runtime pods that take grants from anyone who reaches their lease port, and sign nothing. Any process on the plant network can then keep a runtime writing after its lease expired here, so two runtimes write to one device. Only for a lab without a lease CA."
)

func runUnits(ctx context.Context, c *Common) int {
	o := unitsOpts
	if err := o.timings.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "holdfast-controller: %v\n", err)
		return 2
	}
	if o.standDown < 0 || o.standDown > leadership.MaxLeaseStandDown {
		fmt.Fprintf(os.Stderr, "holdfast-controller: --lease-stand-down (%v) must be between 0 and %v: a new leader holds automatic failover off for it + the lease + the margin after its acquisition\n",
			o.standDown, leadership.MaxLeaseStandDown)
		return 2
	}
	switch {
	case o.leaseCA == "" && !o.plaintext:
		fmt.Fprintf(os.Stderr, "holdfast-controller: --lease-ca-dir is required: the lease channel is mutual TLS (--insecure-plaintext-lease turns it off and lets anyone grant; unsafe)\n")
		return 2
	case o.leaseCA != "" && o.plaintext:
		fmt.Fprintf(os.Stderr, "holdfast-controller: --insecure-plaintext-lease must not be given with --lease-ca-dir\n")
		return 2
	}
	if floor, _ := o.timings.LeaseFloor(); floor > policy.ReferenceLease {
		klog.InfoS("The lease floor of these timings is above the Unit default: the webhook refuses Failover units with a shorter lease, and units admitted before report LeaseBelowFloor",
			"floor", floor, "gap", o.timings.Gap(), "spare", policy.RequiredSpare)
	}
	// client-go reads these when it builds a transport, and from nowhere
	// else: set them before the first one.
	if err := leadership.SetAPIServerHealthCheck(o.timings.ReadIdleTimeout, o.timings.PingTimeout); err != nil {
		klog.ErrorS(err, "Setting the apiserver health check")
		return 1
	}

	cfg, err := restConfig(c.Kubeconfig)
	if err != nil {
		klog.ErrorS(err, "Loading the apiserver configuration")
		return 1
	}
	ending, err := RunUnits(ctx, cfg, UnitsConfig{
		Namespace: c.Namespace, ElectionID: o.electID, Identity: c.Identity,
		Timings: o.timings, StandDown: o.standDown,
		HealthAddr: c.HealthAddr, MetricsAddr: c.MetricsAddr, AuditPath: c.AuditPath,
		WatchNamespace: o.watchNS, LeaseCADir: o.leaseCA, InsecurePlaintextLease: o.plaintext,
	})
	return exitCode("units", ending, err)
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}

// UnitsConfig is everything the units role runs from.
type UnitsConfig struct {
	Namespace, ElectionID, Identity string
	Timings                         policy.GrantorTimings
	StandDown                       time.Duration
	HealthAddr, MetricsAddr         string
	AuditPath                       string
	// WatchNamespace limits the Units (and their pods) this process
	// reconciles to one namespace; empty is every namespace.
	WatchNamespace string
	// LeaseCADir holds the lease CA (leasetls CACertFile, CAKeyFile,
	// CABundleFile); required unless InsecurePlaintextLease.
	LeaseCADir string
	// InsecurePlaintextLease turns the lease channel's authentication off:
	// unsafe (leaseCADirDoc, insecurePlaintextDoc).
	InsecurePlaintextLease bool
	// Clock drives the grantor and the decisions; nil is the real clock.
	Clock clock.WithTicker
	// Started, when set, is told the bound health and metrics addresses.
	Started func(health, metrics string)
}

// Scheme holds the kinds the units role reads and writes.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = holdfastv1.AddToScheme(s)
	return s
}

func cacheOptions(ns string, hasUnit *labels.Requirement) cache.Options {
	o := cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Label: labels.NewSelector().Add(*hasUnit)},
		// Only the requests addressed to the lease signer.
		&certificatesv1.PodCertificateRequest{}: {Field: fields.OneTermEqualSelector("spec.signerName", leaseapi.SignerName)},
	}}
	if ns != "" {
		o.DefaultNamespaces = map[string]cache.Config{ns: {}}
	}
	return o
}

// RunUnits runs the grantor and the unit availability controller until ctx
// ends (a deliberate stop: leadership released at once) or the manager
// stops without being asked (the stand-down).
func RunUnits(ctx context.Context, cfg *rest.Config, uc UnitsConfig) (leadership.Ending, error) {
	setLogger.Do(func() { ctrl.SetLogger(klog.NewKlogr()) })
	clk := uc.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	trail, closer, err := audit.Open(uc.AuditPath, audit.ComponentUnits, clk)
	if err != nil {
		return leadership.Exited, err
	}
	defer closer.Close()
	actor := "holdfast-controller/" + uc.Identity

	gate, err := leadership.NewLock(cfg, uc.Namespace, uc.ElectionID, uc.Identity, uc.Timings.ElectionRenewDeadline)
	if err != nil {
		return leadership.Exited, err
	}
	gate.Clock = clk
	hasUnit, _ := labels.NewRequirement(holdfastv1.LabelUnit, selection.Exists, nil)
	lease, renew, retry := uc.Timings.ElectionLeaseDuration, uc.Timings.ElectionRenewDeadline, uc.Timings.ElectionRetryPeriod
	mgr, err := electedManager(cfg, Scheme(), election{gate, lease, renew, retry}, cacheOptions(uc.WatchNamespace, hasUnit))
	if err != nil {
		return leadership.Exited, err
	}

	notify := make(chan event.GenericEvent, 1024)
	rec := &units.Reconciler{Notify: notify, InsecurePlaintextLease: uc.InsecurePlaintextLease}
	gopts := grantor.Options{Name: uc.Identity, Clock: clk, Notify: rec.NotifyFunc()}
	if uc.StandDown > 0 {
		// --lease-stand-down 0 disables the stand-down and the hold-off
		// together: no successor waits for this process's grants.
		gopts.GrantsUntil = func() time.Time { return gate.GrantsUntil(uc.StandDown) }
	}
	if uc.InsecurePlaintextLease {
		klog.InfoS("WARNING: the lease channel is plain HTTP (--insecure-plaintext-lease): anyone who reaches a runtime's lease port can keep it writing")
	} else {
		if uc.LeaseCADir == "" {
			return leadership.Exited, fmt.Errorf("no lease CA directory: the lease channel is mutual TLS unless InsecurePlaintextLease")
		}
		ca, err := leasetls.WatchAuthorityDir(uc.LeaseCADir, klog.Background())
		if err != nil {
			return leadership.Exited, fmt.Errorf("--lease-ca-dir=%s: %w", uc.LeaseCADir, err)
		}
		// The CA is read for as long as the process runs: the grantor goes
		// on renewing through a stand-down, after the manager stopped.
		go ca.Run(ctx, leasetls.ReloadInterval)
		// Certificates are judged on wall clocks, whatever drives the
		// lease decisions.
		creds, err := leasecerts.NewGrantorCredentials(ca, clock.RealClock{}, klog.Background())
		if err != nil {
			return leadership.Exited, fmt.Errorf("--lease-ca-dir=%s: making the grantor's certificate: %w", uc.LeaseCADir, err)
		}
		gopts.TLS = creds
		if err := (&leasecerts.Signer{Client: mgr.GetClient(), CA: ca}).SetupWithManager(mgr); err != nil {
			return leadership.Exited, err
		}
		if err := mgr.Add(&leasecerts.TrustBundle{Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(), CA: ca}); err != nil {
			return leadership.Exited, err
		}
		klog.InfoS("The lease channel is mutual TLS", "ca", ca.Current().Cert.Subject.String(), "caNotAfter", ca.Current().Cert.NotAfter,
			"signer", leaseapi.SignerName, "trustBundle", leasecerts.TrustBundleName)
	}
	g := grantor.New(gopts)
	tenure := leadership.NewTenure(clk, uc.StandDown)
	rec.Client, rec.APIReader = mgr.GetClient(), mgr.GetAPIReader()
	rec.Recorder = mgr.GetEventRecorder("holdfast-controller")
	rec.Grantor, rec.HoldOff, rec.Audit, rec.Clock, rec.Actor = g, tenure, trail, clk, actor
	rec.Epochs = &units.EpochRecord{Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(), Namespace: uc.Namespace}
	rec.Timings = uc.Timings
	if err := rec.SetupWithManager(mgr); err != nil {
		return leadership.Exited, err
	}
	if err := mgr.Add(&units.WarmStart{Reader: mgr.GetCache(), Grantor: g, Tenure: tenure}); err != nil {
		return leadership.Exited, err
	}

	srv, err := serve(ctx, uc.HealthAddr, uc.MetricsAddr, uc.Started)
	if err != nil {
		return leadership.Exited, err
	}
	defer srv.stop()
	klog.InfoS("Starting the units role", "identity", uc.Identity, "election", uc.Namespace+"/"+uc.ElectionID,
		"lease", lease, "renewDeadline", renew, "retryPeriod", retry, "standDown", uc.StandDown, "health", srv.health, "metrics", srv.metrics)
	return leadership.Run(ctx, mgr, g, leadership.RunOptions{
		StandDown: uc.StandDown, Clock: clk, Gate: gate, Audit: trail, Actor: actor,
	})
}
