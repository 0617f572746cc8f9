package app

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/holdfast-io/holdfast/controller/leadership"
)

// serving is a role's health and metrics endpoints, as bound.
type serving struct {
	health, metrics string
	stop            func()
}

// serve serves /healthz and /readyz on healthAddr and controller-runtime's
// metrics registry on metricsAddr ("0" or "" serves nothing there), apart
// from the manager: they outlive it, so a role standing down still answers
// its probes. They run until stop is called, whatever ctx does. started,
// when set, is told the bound addresses.
func serve(ctx context.Context, healthAddr, metricsAddr string, started func(health, metrics string)) (*serving, error) {
	serveCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	health, err := leadership.ServeHealth(serveCtx, healthAddr, nil)
	if err != nil {
		stop()
		return nil, err
	}
	metricsBound, err := leadership.ServeHealth(serveCtx, metricsAddr, map[string]http.Handler{
		"/metrics": promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}),
	})
	if err != nil {
		stop()
		return nil, fmt.Errorf("--metrics-bind-address: %w", err)
	}
	if started != nil {
		started(health, metricsBound)
	}
	return &serving{health: health, metrics: metricsBound, stop: stop}, nil
}

// exitCode is a role's exit code for how it ended: 0 only for a deliberate
// stop that released its leadership cleanly.
func exitCode(role string, ending leadership.Ending, err error) int {
	if err != nil {
		klog.ErrorS(err, "The "+role+" role stopped", "ending", ending)
	}
	if ending == leadership.Released && err == nil {
		return 0
	}
	return 1
}

// election is a role's leader election: its gated Lease lock and timings.
type election struct {
	gate                resourcelock.Interface
	lease, renew, retry time.Duration
}

// electedManager is a role's manager: it runs its controllers only while it
// leads, on the role's own election. On a deliberate stop the leadership is
// handed over at once; the gate keeps it from being handed over on any
// other stop. Probes and metrics are served apart from it (serve).
func electedManager(cfg *rest.Config, scheme *runtime.Scheme, e election, cacheOpts cache.Options) (ctrl.Manager, error) {
	return ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                              scheme,
		LeaderElection:                      true,
		LeaderElectionResourceLockInterface: e.gate,
		LeaderElectionReleaseOnCancel:       true,
		LeaseDuration:                       &e.lease,
		RenewDeadline:                       &e.renew,
		RetryPeriod:                         &e.retry,
		HealthProbeBindAddress:              "0",
		Metrics:                             metricsserver.Options{BindAddress: "0"},
		Cache:                               cacheOpts,
	})
}
