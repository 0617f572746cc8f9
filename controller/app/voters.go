package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/holdfast-io/holdfast/controller/leadership"
	"github.com/holdfast-io/holdfast/controller/voters"
	"github.com/holdfast-io/holdfast/internal/audit"
	"github.com/holdfast-io/holdfast/policy"
)

// VotersElectionID is the voter controller's election Lease, apart from the
// grantor's: the two roles fail over independently.
const VotersElectionID = voters.ElectionID

// The voter controller's election has no handover budget to meet (a swap
// resumes from its status whenever a leader comes), so it keeps
// controller-runtime's gentler defaults.
const (
	DefaultVotersLeaseDuration = 15 * time.Second
	DefaultVotersRenewDeadline = 10 * time.Second
	DefaultVotersRetryPeriod   = 2 * time.Second
)

// VotersConfig is everything the voters role runs from.
type VotersConfig struct {
	Namespace, ElectionID, Identity           string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	HealthAddr, MetricsAddr                   string
	AuditPath                                 string
	// Settings: the swap Lease's duration and the default peer URL.
	Settings voters.Settings
	// SnapshotDir keeps the verified snapshots, the newest KeepSnapshots.
	SnapshotDir   string
	KeepSnapshots int
	// SnapshotVolume names the volume that holds SnapshotDir.
	SnapshotVolume string
	CandidateImage string
	// RunningEvery and IdleEvery are the pass intervals with and without a
	// swap in progress.
	RunningEvery, IdleEvery time.Duration
	// Clock drives the decisions; nil is the real clock.
	Clock clock.Clock
	// Started, when set, is told the bound health and metrics addresses.
	Started func(health, metrics string)
}

// Validate refuses settings that cannot work, naming the flag.
func (vc *VotersConfig) Validate() error {
	var errs []error
	if vc.LeaseDuration <= vc.RenewDeadline {
		errs = append(errs, fmt.Errorf("--voters-leader-election-lease-duration (%v) must be greater than --voters-leader-election-renew-deadline (%v)", vc.LeaseDuration, vc.RenewDeadline))
	}
	if float64(vc.RenewDeadline) <= 1.2*float64(vc.RetryPeriod) {
		errs = append(errs, fmt.Errorf("--voters-leader-election-renew-deadline (%v) must be greater than 1.2 x --voters-leader-election-retry-period (%v)", vc.RenewDeadline, vc.RetryPeriod))
	}
	if vc.RunningEvery <= 0 || vc.IdleEvery <= 0 {
		errs = append(errs, errors.New("--voter-swap-pass-interval and --voter-idle-pass-interval must be positive"))
	}
	// The webhook refuses swaps on a VoterPolicy status older than
	// rules.MaxStatusAge; idle passes are what keep it fresh.
	if vc.IdleEvery > policy.StatusHeartbeat {
		errs = append(errs, fmt.Errorf("--voter-idle-pass-interval (%v) must be at most %v: the VoterPolicy status must be stamped that often or swaps are refused as stale", vc.IdleEvery, policy.StatusHeartbeat))
	}
	// The swap Lease is renewed on every pass: at least three passes fit
	// in it, so one slow pass never lets it lapse mid-swap.
	if vc.Settings.LeaseDuration < 3*vc.RunningEvery {
		errs = append(errs, fmt.Errorf("--voter-swap-lease-duration (%v) must be at least 3 x --voter-swap-pass-interval (%v)", vc.Settings.LeaseDuration, vc.RunningEvery))
	}
	if vc.Settings.PeerPort < 1 || vc.Settings.PeerPort > 65535 {
		errs = append(errs, fmt.Errorf("--etcd-peer-port (%d) must be between 1 and 65535", vc.Settings.PeerPort))
	}
	if vc.Settings.PeerScheme != "http" && vc.Settings.PeerScheme != "https" {
		errs = append(errs, fmt.Errorf("--etcd-peer-scheme (%q) must be http or https", vc.Settings.PeerScheme))
	}
	if vc.SnapshotDir == "" {
		errs = append(errs, errors.New("--snapshot-dir must not be empty: every swap starts from a verified snapshot"))
	}
	if vc.KeepSnapshots < 1 {
		errs = append(errs, fmt.Errorf("--keep-snapshots (%d) must be at least 1", vc.KeepSnapshots))
	}
	return errors.Join(errs...)
}

var votersOpts = &VotersConfig{}

func init() {
	Register(&Role{
		Name:  "voters",
		Short: "the etcd voter swap controller (one swap at a time under the kube-system/holdfast-voter-swap Lease)",
		Flags: votersFlags,
		Run:   runVoters,
	})
}

func votersFlags(fs *flag.FlagSet, _ *Common) {
	o := votersOpts
	d := voters.DefaultSettings()
	fs.StringVar(&o.ElectionID, "voters-leader-election-id", VotersElectionID, "")
	doc("voters-leader-election-id", "Name of the voter controller's election Lease in --leader-election-namespace (apart from the grantor's).", "none")
	fs.DurationVar(&o.LeaseDuration, "voters-leader-election-lease-duration", DefaultVotersLeaseDuration, "")
	doc("voters-leader-election-lease-duration", "How long a standby voter controller waits before it takes the leadership.",
		"this > --voters-leader-election-renew-deadline")
	fs.DurationVar(&o.RenewDeadline, "voters-leader-election-renew-deadline", DefaultVotersRenewDeadline, "")
	doc("voters-leader-election-renew-deadline", "How long the leader retries a failed renewal before it gives up the leadership and exits (a swap resumes from its status under the next leader).",
		"--voters-leader-election-lease-duration > this > 1.2 x --voters-leader-election-retry-period")
	fs.DurationVar(&o.RetryPeriod, "voters-leader-election-retry-period", DefaultVotersRetryPeriod, "")
	doc("voters-leader-election-retry-period", "Between election attempts of the voter controller.", "1.2 x this < --voters-leader-election-renew-deadline")
	fs.DurationVar(&o.Settings.LeaseDuration, "voter-swap-lease-duration", d.LeaseDuration, "")
	doc("voter-swap-lease-duration", "Duration of the kube-system/holdfast-voter-swap Lease, renewed on every pass while a swap runs. Node recovery leaves the nodes it names alone while it is unexpired.",
		"this >= 3 x --voter-swap-pass-interval")
	fs.DurationVar(&o.RunningEvery, "voter-swap-pass-interval", 2*time.Second, "")
	doc("voter-swap-pass-interval", "Between passes while a swap is pending or running (each pass renews the swap Lease and takes at most one action).", "3 x this <= --voter-swap-lease-duration")
	fs.DurationVar(&o.IdleEvery, "voter-idle-pass-interval", 15*time.Second, "")
	doc("voter-idle-pass-interval", "Between passes with no swap (the VoterPolicy status and the automatic decisions are refreshed).", "this <= 15s (the status heartbeat the webhook's swap gates require)")
	fs.IntVar(&o.Settings.PeerPort, "etcd-peer-port", d.PeerPort, "")
	doc("etcd-peer-port", "Peer port of a candidate's etcd member when its Node has no holdfast.io/etcd-peer-url annotation (the URL is built from its InternalIP).", "none")
	fs.StringVar(&o.Settings.PeerScheme, "etcd-peer-scheme", d.PeerScheme, "")
	doc("etcd-peer-scheme", "Scheme of that peer URL: http or https.", "none")
	fs.StringVar(&o.SnapshotDir, "snapshot-dir", "/var/lib/holdfast/snapshots", "")
	doc("snapshot-dir", "Where the verified etcd snapshot taken before every swap is kept (a volume of the controller pod).", "none")
	fs.StringVar(&o.SnapshotVolume, "snapshot-volume", "", "")
	doc("snapshot-volume", "The volume that holds --snapshot-dir (persistentVolumeClaim/NAME, or emptyDir: gone with the pod), recorded with the pod and its node (POD_NAME, POD_NAMESPACE, NODE_NAME) as each VoterSwap's status.snapshot.location.", "none")
	fs.IntVar(&o.KeepSnapshots, "keep-snapshots", 3, "")
	doc("keep-snapshots", "How many of the newest snapshots are kept in --snapshot-dir.", "none")
	fs.StringVar(&o.CandidateImage, "voter-candidate-image", voters.DefaultCandidateImage, "")
	doc("voter-candidate-image", "Image of the voter-candidate pod placed by holdfast-scheduler when a swap names no incoming node (it never runs a workload).", "none")
}

func runVoters(ctx context.Context, c *Common) int {
	vc := *votersOpts
	vc.Namespace, vc.Identity = c.Namespace, c.Identity
	vc.HealthAddr, vc.MetricsAddr, vc.AuditPath = c.HealthAddr, c.MetricsAddr, c.AuditPath
	if err := vc.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "holdfast-controller: %v\n", err)
		return 2
	}
	cfg, err := restConfig(c.Kubeconfig)
	if err != nil {
		klog.ErrorS(err, "Loading the apiserver configuration")
		return 1
	}
	ending, err := RunVoters(ctx, cfg, vc)
	return exitCode("voters", ending, err)
}

// noLoops: the voter controller renews nothing on behalf of others, so a
// lost leadership has nothing to stand down for (the swap Lease lapses and
// the next leader resumes from the swap's status).
type noLoops struct{}

func (noLoops) Running() []types.NamespacedName { return nil }
func (noLoops) StopAll()                        {}

// RunVoters runs the voter swap controller on its own election until ctx
// ends (leadership released at once) or the manager stops without being
// asked (leadership lost: the process exits and is restarted).
func RunVoters(ctx context.Context, cfg *rest.Config, vc VotersConfig) (leadership.Ending, error) {
	setLogger.Do(func() { ctrl.SetLogger(klog.NewKlogr()) })
	if err := vc.Validate(); err != nil {
		return leadership.Exited, err
	}
	clk := vc.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	trail, closer, err := audit.Open(vc.AuditPath, audit.ComponentVoters, clk)
	if err != nil {
		return leadership.Exited, err
	}
	defer closer.Close()
	actor := "holdfast-controller/" + vc.Identity
	if err := os.MkdirAll(vc.SnapshotDir, 0o700); err != nil {
		return leadership.Exited, fmt.Errorf("--snapshot-dir: %w", err)
	}

	gate, err := leadership.NewLock(cfg, vc.Namespace, vc.ElectionID, vc.Identity, vc.RenewDeadline)
	if err != nil {
		return leadership.Exited, err
	}
	lease, renew, retry := vc.LeaseDuration, vc.RenewDeadline, vc.RetryPeriod
	mgr, err := electedManager(cfg, voters.Scheme(), election{gate, lease, renew, retry}, voters.CacheOptions())
	if err != nil {
		return leadership.Exited, err
	}
	settings := vc.Settings
	settings.Identity = vc.Identity
	r := &voters.Reconciler{
		Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("holdfast-voters"),
		Audit: trail, Actor: actor, Clock: clk, Settings: settings,
		SnapshotDir: vc.SnapshotDir, KeepSnapshots: vc.KeepSnapshots,
		SnapshotVolume:     snapshotVolume(vc.SnapshotVolume, os.Getenv("POD_NAMESPACE"), os.Getenv("POD_NAME"), os.Getenv("NODE_NAME")),
		CandidateNamespace: vc.Namespace, CandidateImage: vc.CandidateImage,
		RunningEvery: vc.RunningEvery, IdleEvery: vc.IdleEvery,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return leadership.Exited, err
	}

	srv, err := serve(ctx, vc.HealthAddr, vc.MetricsAddr, vc.Started)
	if err != nil {
		return leadership.Exited, err
	}
	defer srv.stop()
	klog.InfoS("Starting the voters role", "identity", vc.Identity, "election", vc.Namespace+"/"+vc.ElectionID,
		"lease", lease, "renewDeadline", renew, "retryPeriod", retry, "swapLease", vc.Settings.LeaseDuration,
		"health", srv.health, "metrics", srv.metrics)
	return leadership.Run(ctx, mgr, noLoops{}, leadership.RunOptions{Clock: clk, Gate: gate, Audit: trail, Actor: actor})
}

// snapshotVolume describes what holds the snapshots: the volume, the pod
// and its node, each named when known.
func snapshotVolume(volume, ns, pod, node string) string {
	var parts []string
	if volume != "" {
		parts = append(parts, "volume "+volume)
	}
	if pod != "" {
		parts = append(parts, "pod "+ns+"/"+pod)
	}
	if node != "" {
		parts = append(parts, "node "+node)
	}
	return strings.Join(parts, ", ")
}
