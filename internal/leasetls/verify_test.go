package leasetls_test

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"strings"
	"testing"
	"time"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	"github.com/holdfast-io/holdfast/internal/leasetls"
	"github.com/holdfast-io/holdfast/internal/leasetls/leasetlstest"
)

func chain(t *testing.T, certs [][]byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for _, der := range certs {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

func clientTemplate(uri string, notBefore, notAfter time.Time, usage x509.ExtKeyUsage) *x509.Certificate {
	u, _ := url.Parse(uri)
	return &x509.Certificate{Subject: pkix.Name{CommonName: "client"}, URIs: []*url.URL{u}, NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
}

// A grantor's certificate is taken only when it chains to the trusted lease
// CA, is for client authentication and names the grantor; each refusal
// names its reason.
func TestVerifyPeerRefusesEveryOtherCertificate(t *testing.T) {
	ca := leasetlstest.NewCA(t, "lease-ca")
	other := leasetlstest.NewCA(t, "other-ca")
	now := time.Now()
	for _, tc := range []struct {
		name   string
		chain  func() []*x509.Certificate
		roots  *x509.CertPool
		reason string
		msg    string
	}{
		{name: "the grantor's own certificate", chain: func() []*x509.Certificate { return chain(t, ca.GrantorCertificate(t).Certificate) }, roots: ca.Roots},
		{name: "no certificate", chain: func() []*x509.Certificate { return nil }, roots: ca.Roots, reason: leasetls.NoCertificate, msg: "no certificate"},
		{name: "another CA", chain: func() []*x509.Certificate { return chain(t, other.GrantorCertificate(t).Certificate) }, roots: ca.Roots,
			reason: leasetls.Untrusted, msg: "unknown authority"},
		{name: "nothing trusted", chain: func() []*x509.Certificate { return chain(t, ca.GrantorCertificate(t).Certificate) },
			reason: leasetls.Untrusted, msg: "no lease CA is trusted"},
		{name: "another identity", chain: func() []*x509.Certificate {
			return chain(t, ca.ClientCertificate(t, clientTemplate("holdfast://grantor-impostor", now.Add(-time.Minute), now.Add(time.Hour), x509.ExtKeyUsageClientAuth)).Certificate)
		}, roots: ca.Roots, reason: leasetls.WrongIdentity, msg: "does not name holdfast://grantor"},
		{name: "a runtime's serving certificate", chain: func() []*x509.Certificate {
			return chain(t, ca.ClientCertificate(t, leasetls.RuntimeTemplate("plant/kiln-1", 3, now.Add(-time.Minute), now.Add(time.Hour))).Certificate)
		}, roots: ca.Roots, reason: leasetls.Untrusted, msg: "incompatible key usage"},
		{name: "expired", chain: func() []*x509.Certificate {
			return chain(t, ca.ClientCertificate(t, clientTemplate(leaseapi.GrantorIdentity, now.Add(-2*time.Hour), now.Add(-time.Hour), x509.ExtKeyUsageClientAuth)).Certificate)
		}, roots: ca.Roots, reason: leasetls.Untrusted, msg: "expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := leasetls.VerifyPeer(tc.chain(), tc.roots, x509.ExtKeyUsageClientAuth, leaseapi.GrantorIdentity)
			if tc.reason == "" {
				if r != nil {
					t.Fatalf("refused: %v", r)
				}
				return
			}
			if r == nil || r.Reason != tc.reason || !strings.Contains(r.Error(), tc.msg) {
				t.Fatalf("VerifyPeer = %v, want %s naming %q", r, tc.reason, tc.msg)
			}
		})
	}
}

// A runtime's certificate names its binding; the grantor takes it for that
// binding only.
func TestARuntimeCertificateNamesItsBinding(t *testing.T) {
	ca := leasetlstest.NewCA(t, "lease-ca")
	now := time.Now()
	c := chain(t, ca.ClientCertificate(t, leasetls.RuntimeTemplate("plant/kiln-1", 3, now.Add(-time.Minute), now.Add(time.Hour))).Certificate)
	if r := leasetls.VerifyPeer(c, ca.Roots, x509.ExtKeyUsageServerAuth, leaseapi.RuntimeIdentity("plant/kiln-1", 3)); r != nil {
		t.Fatalf("its own binding refused: %v", r)
	}
	for _, other := range []string{leaseapi.RuntimeIdentity("plant/kiln-1", 4), leaseapi.RuntimeIdentity("plant/kiln-2", 3)} {
		if r := leasetls.VerifyPeer(c, ca.Roots, x509.ExtKeyUsageServerAuth, other); r == nil || r.Reason != leasetls.WrongIdentity {
			t.Fatalf("taken for %s: %v", other, r)
		}
	}
}
