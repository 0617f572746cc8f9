//go:build integration

package voters_test

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/voters"
	"github.com/holdfast-io/holdfast/internal/audit"
	"github.com/holdfast-io/holdfast/test/poll"
)

// controller is one in-process voter controller, as holdfast-controller's
// service account.
type controller struct {
	rec  *voters.Reconciler
	stop func()
	done chan struct{}
	// crashed is closed when AfterAction ended it.
	crashed chan struct{}
}

// afterPasses waits until the controller has finished n more passes
// (each observes etcd and decides): a test asserting that nothing happens
// gives the controller its chances this way, not by sleeping.
func (c *controller) afterPasses(t testing.TB, n int64) {
	t.Helper()
	want := c.rec.Passes() + n
	poll.Until(t, time.Minute, fmt.Sprintf("%d more controller passes", n), func() (bool, string) {
		got := c.rec.Passes()
		return got >= want, fmt.Sprintf("%d passes, want %d", got, want)
	})
}

type ctrlOpts struct {
	identity string
	// crashAfter, when it returns true for an action, ends the controller
	// right after carrying it out, before it is recorded.
	crashAfter func(voters.Action) bool
	// audit receives the audit trail's lines (JSON).
	audit io.Writer
	// shipped runs the passes at the shipped intervals (2s with a swap,
	// 15s without) and the shipped Lease duration, for a benchmark.
	shipped bool
	// snapshotDir is the controller's snapshot volume (empty: a new one).
	snapshotDir string
}

func startController(t testing.TB, o ctrlOpts) *controller {
	t.Helper()
	if o.identity == "" {
		o.identity = "holdfast-controller-test"
	}
	if o.snapshotDir == "" {
		o.snapshotDir = t.TempDir()
	}
	mgr, err := ctrl.NewManager(env.As(controllerUser, nil), ctrl.Options{
		Scheme: voters.Scheme(), Cache: voters.CacheOptions(), Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: new(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &controller{done: make(chan struct{}), crashed: make(chan struct{})}
	var once sync.Once
	r := &voters.Reconciler{
		Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("holdfast-voters"),
		Clock: shifted, Settings: voters.Settings{Identity: o.identity, LeaseDuration: 6 * time.Second, PeerPort: 2380, PeerScheme: "http"},
		EtcdFor: func(context.Context, *holdfastv1.VoterPolicy) (voters.Etcd, error) {
			return &voters.ClientEtcd{StatusTimeout: time.Second, RequestTimeout: 3 * time.Second}, nil
		},
		SnapshotDir: o.snapshotDir, SnapshotVolume: testSnapshotVolume, CandidateNamespace: releaseNS,
		RunningEvery: 200 * time.Millisecond, IdleEvery: time.Second,
	}
	if o.shipped {
		r.RunningEvery, r.IdleEvery, r.Settings.LeaseDuration = 0, 0, voters.DefaultSettings().LeaseDuration
	}
	if o.audit != nil {
		r.Audit = audit.New(o.audit, "voters", shifted)
	}
	if o.crashAfter != nil {
		r.AfterAction = func(a voters.Action) error {
			if o.crashAfter(a) {
				once.Do(func() { close(c.crashed); cancel() })
				return fmt.Errorf("crashed after %s", a.Kind)
			}
			return nil
		}
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	c.rec = r
	go func() {
		defer close(c.done)
		_ = mgr.Start(ctx)
	}()
	c.stop = func() { cancel(); <-c.done }
	t.Cleanup(c.stop)
	return c
}

// --- waiting ----------------------------------------------------------------
