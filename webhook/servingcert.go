package webhook

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// ServingCertReload is how often the serving certificate's files are read
// again besides on a file event: a Secret volume's update is a symlink swap,
// which a watch on the old files may miss.
const ServingCertReload = 10 * time.Second

// ServingCertificate watches certDir's tls.crt and tls.key and serves the
// pair they hold now, so a rotated Secret is served without a restart (the
// kubelet updates a mounted Secret in place). It registers
// holdfast_webhook_serving_certificate_expiry_timestamp_seconds on reg, read
// from the certificate being served. Add the watcher to the manager and set
// its GetCertificate in the webhook server's TLS options.
func ServingCertificate(certDir string, reg prometheus.Registerer) (*certwatcher.CertWatcher, error) {
	cw, err := certwatcher.New(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
	if err != nil {
		return nil, fmt.Errorf("the webhook's serving certificate in %s: %w", certDir, err)
	}
	cw = cw.WithWatchInterval(ServingCertReload)
	if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "holdfast_webhook_serving_certificate_expiry_timestamp_seconds",
		Help: "When the serving certificate holdfast-webhook presents expires (Unix seconds; 0 when none is loaded). Past it the apiserver refuses to call the webhook and every guarded change fails, runtime pod creation and binding among them: rotate it well before (docs/operations.md#webhook-certificate).",
	}, func() float64 { return float64(servedNotAfter(cw).Unix()) })); err != nil {
		return nil, err
	}
	return cw, nil
}

// servedNotAfter is the NotAfter of the certificate cw serves (the zero
// Unix time when it has none).
func servedNotAfter(cw *certwatcher.CertWatcher) time.Time {
	c, _ := cw.GetCertificate(nil)
	if c == nil || len(c.Certificate) == 0 {
		return time.Unix(0, 0)
	}
	leaf := c.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return time.Unix(0, 0)
		}
	}
	return leaf.NotAfter
}

// ServeCertificate is the webhook server's TLS option serving cw's pair.
func ServeCertificate(cw *certwatcher.CertWatcher) func(*tls.Config) {
	return func(c *tls.Config) { c.GetCertificate = cw.GetCertificate }
}
