// Package leasecerts is the controller's side of the lease channel's
// certificates (docs/design.md §3 L12). The units role holds the lease CA
// (its --lease-ca-dir, the chart's Secret); from it, it makes its own client
// certificate as the grantor (GrantorCredentials), signs each runtime pod's
// serving certificate when the pod's kubelet asks through a
// PodCertificateRequest (Signer), and publishes the CA bundle in a
// ClusterTrustBundle the runtime pods mount (TrustBundle).
//
// Holding the CA's key is no weaker than holding the grantor's own
// certificate: what the key can make that matters, a certificate naming the
// grantor, is exactly what the grantor's certificate already is, and the
// same people (whoever can read the units role's Secret or its pod) could
// take either. The runtime certificates it signs can never grant: they are
// for server authentication only and name a runtime, and a runtime refuses
// both as a grantor. They are issued only to the pod of a Unit's current
// binding, on the node the pod runs on; the kubelet makes the key there and
// it never leaves the node.
package leasecerts

import (
	"crypto/tls"
	"crypto/x509"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/holdfast-io/holdfast/internal/leasetls"
)

// CA is the lease CA as read from --lease-ca-dir, reloaded on change.
type CA = leasetls.Files[*leasetls.Authority]

// GrantorLifetime is how long a grantor certificate is valid after it is
// made; it is made again at half of it, and at once when the CA changes.
const GrantorLifetime = 24 * time.Hour

var (
	caExpiry = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "holdfast_grantor_lease_ca_expiry_timestamp_seconds",
		Help: "When the lease CA this process signs with expires (Unix seconds). Past it the grantor can renew no runtime and every Failover unit fences: rotate it well before (docs/operations.md).",
	})
	grantorExpiry = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "holdfast_grantor_certificate_expiry_timestamp_seconds",
		Help: "When the grantor's own client certificate expires (Unix seconds); it is made again from the lease CA at half its life.",
	})
	issued = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_grantor_runtime_certificates_total",
		Help: "Runtime pods' PodCertificateRequests answered by the lease signer, by result: issued, denied (not the pod of a Unit's current binding on its node), failed (the lease CA cannot sign: expired or expiring within the hour).",
	}, []string{"result"})
)

func init() {
	metrics.Registry.MustRegister(caExpiry, grantorExpiry, issued)
}

// GrantorCredentials are the grantor's side of the channel: its client
// certificate, made from the lease CA, and the CA bundle runtimes'
// certificates must chain to. They implement grantor.Credentials.
type GrantorCredentials struct {
	ca    *CA
	clock clock.PassiveClock
	log   klog.Logger

	mu      sync.Mutex
	from    *leasetls.Authority
	cert    *tls.Certificate
	renewAt time.Time
}

// NewGrantorCredentials makes the grantor's first certificate from ca.
func NewGrantorCredentials(ca *CA, clk clock.PassiveClock, log klog.Logger) (*GrantorCredentials, error) {
	g := &GrantorCredentials{ca: ca, clock: clk, log: log}
	if err := g.renew(ca.Current()); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *GrantorCredentials) renew(a *leasetls.Authority) error {
	now := g.clock.Now()
	cert, err := a.GrantorCertificate(now, GrantorLifetime)
	if err != nil {
		return err
	}
	g.from, g.cert, g.renewAt = a, cert, now.Add(GrantorLifetime/2)
	caExpiry.Set(float64(a.Cert.NotAfter.Unix()))
	grantorExpiry.Set(float64(cert.Leaf.NotAfter.Unix()))
	return nil
}

// ClientCertificate is the grantor's certificate, made again when the CA
// changed or half its life has passed. A failure keeps the one in use.
func (g *GrantorCredentials) ClientCertificate() *tls.Certificate {
	g.mu.Lock()
	defer g.mu.Unlock()
	a := g.ca.Current()
	if a != g.from || !g.clock.Now().Before(g.renewAt) {
		if err := g.renew(a); err != nil {
			g.log.Error(err, "Making the grantor's lease certificate; the one in use stays", "notAfter", g.cert.Leaf.NotAfter)
		} else {
			g.log.Info("Made the grantor's lease certificate", "ca", a.Cert.Subject.String(), "notAfter", g.cert.Leaf.NotAfter)
		}
	}
	return g.cert
}

// RuntimeRoots is the lease CA bundle.
func (g *GrantorCredentials) RuntimeRoots() *x509.CertPool { return g.ca.Current().Roots }
