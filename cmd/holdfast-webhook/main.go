// Command holdfast-webhook serves holdfast's validating admission webhook
// (webhook/). Serving certificates come from the chart, mounted at --cert-dir;
// they are reloaded when the files change (webhook.ServingCertificate).
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"os"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/holdfast-io/holdfast/internal/version"
	"github.com/holdfast-io/holdfast/webhook"
)

func main() {
	if err := run(); err != nil {
		klog.ErrorS(err, "holdfast-webhook stopped")
		os.Exit(1)
	}
}

func run() error {
	opts := webhook.DefaultOptions()
	fs := flag.NewFlagSet("holdfast-webhook", flag.ExitOnError)
	opts.AddFlags(fs)
	host := fs.String("host", "", "address the webhook serves HTTPS on (all addresses when empty)")
	port := fs.Int("port", 9443, "port the webhook serves HTTPS on")
	certDir := fs.String("cert-dir", "/tmp/k8s-webhook-server/serving-certs", "directory holding tls.crt and tls.key")
	probeAddr := fs.String("health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	metricsAddr := fs.String("metrics-bind-address", ":8080", "address of /metrics (0 disables)")
	logCfg := textlogger.NewConfig()
	logCfg.AddFlags(fs)
	showVersion := version.Flag(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if *showVersion {
		version.Print(os.Stdout, "holdfast-webhook")
		return nil
	}
	version.Register(metrics.Registry)
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("flags: %w", err)
	}
	ctrl.SetLogger(textlogger.NewLogger(logCfg))

	scheme, err := webhook.NewScheme()
	if err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("reaching the apiserver: %w", err)
	}
	if err := webhook.RegisterAdmissionMetrics(metrics.Registry); err != nil {
		return err
	}
	certs, err := webhook.ServingCertificate(*certDir, metrics.Registry)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		WebhookServer: crwebhook.NewServer(crwebhook.Options{Host: *host, Port: *port,
			TLSOpts: []func(*tls.Config){webhook.ServeCertificate(certs)}}),
		HealthProbeBindAddress: *probeAddr,
		Metrics:                metricsserver.Options{BindAddress: *metricsAddr},
	})
	if err != nil {
		return err
	}
	if err := mgr.Add(certs); err != nil {
		return err
	}
	// GetWebhookServer also adds the server to the manager's runnables.
	srv := mgr.GetWebhookServer()
	webhook.Register(srv, scheme, mgr.GetAPIReader(), &opts)
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("webhook", srv.StartedChecker()); err != nil {
		return err
	}
	klog.InfoS("Starting holdfast-webhook", "port", *port, "controller", opts.Controller, "voters", opts.VotersUser(), "nodePlugin", opts.NodePlugin, "scheduler", opts.Scheduler)
	return mgr.Start(ctrl.SetupSignalHandler())
}
