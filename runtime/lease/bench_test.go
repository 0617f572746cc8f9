package lease

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"k8s.io/klog/v2"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/leasetls"
	"github.com/holdfast-io/holdfast/internal/leasetls/leasetlstest"
)

// BenchmarkAcquire is the cost the guard adds to every output write.
func BenchmarkAcquire(b *testing.B) {
	k, err := NewKeeper(Config{Unit: "plant/kiln-1", Epoch: 1, Mode: holdfastv1.Autonomy, LeaseDuration: 30 * time.Second}, klog.Background().V(10))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		p, err := k.Acquire(WriteControl)
		if err != nil {
			b.Fatal(err)
		}
		p.Release()
	}
}

// BenchmarkGrantRoundTrip is one renewal POST answered over loopback, as
// the grantor sees it: over mutual TLS (HTTP/2) as the units role speaks,
// and over HTTP/1.1 and h2c as with --insecure-plaintext-lease.
func BenchmarkGrantRoundTrip(b *testing.B) {
	for _, proto := range []string{"h2-mtls", "http1", "h2c"} {
		b.Run(proto, func(b *testing.B) {
			k, err := NewKeeper(Config{Unit: "plant/kiln-1", Epoch: 1, Mode: holdfastv1.Failover, LeaseDuration: 30 * time.Second}, klog.Background().V(10))
			if err != nil {
				b.Fatal(err)
			}
			log := klog.Background().V(10)
			h, serverTLS, tr, scheme := NewHandler(k, InsecurePlaintext, log), (*tls.Config)(nil), &http.Transport{}, "http://"
			switch proto {
			case "h2c":
				tr.Protocols = new(http.Protocols)
				tr.Protocols.SetUnencryptedHTTP2(true)
			case "h2-mtls":
				ca := leasetlstest.NewCA(b, "bench-lease-ca")
				cert := ca.RuntimeCertificate(b, "plant/kiln-1", 1)
				h = NewHandler(k, MutualTLS(func() *x509.CertPool { return ca.Roots }, leaseapi.GrantorIdentity), log)
				serverTLS = leasetls.ServerConfig(func() *tls.Certificate { return cert })
				grantor := ca.GrantorCertificate(b)
				tr.TLSClientConfig = leasetls.ClientConfig(func() *tls.Certificate { return grantor }, func() *x509.CertPool { return ca.Roots },
					leaseapi.RuntimeIdentity("plant/kiln-1", 1))
				tr.ForceAttemptHTTP2, scheme = true, "https://"
			}
			srv, err := Listen("127.0.0.1:0", h, serverTLS, log)
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			c := &http.Client{Transport: tr}
			url := scheme + srv.Addr().String() + leaseapi.Path
			var seq uint64
			ack := int64(0)
			var anchor leaseapi.Anchor // each grant echoes the last reply's anchor, as the grantor does
			for b.Loop() {
				seq++
				body, _ := json.Marshal(leaseapi.Grant{Unit: "plant/kiln-1", Epoch: 1, DurationMillis: 30000, AckAgeMillis: &ack,
					Anchor: anchor, Grantor: "bench", Seq: seq})
				resp, err := c.Post(url, "application/json", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				var r leaseapi.Reply
				err = json.NewDecoder(resp.Body).Decode(&r)
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || err != nil {
					b.Fatal(resp.Status, err)
				}
				anchor = r.Anchor
			}
		})
	}
}
