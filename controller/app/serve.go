package app

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

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
