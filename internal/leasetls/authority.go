package leasetls

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
)

// The files of the lease CA directory, as a kubernetes.io/tls Secret with a
// ca.crt (the chart's own, or cert-manager's) mounts them.
const (
	// CACertFile holds the signing CA's certificate, then any intermediates
	// up to the bundle.
	CACertFile = "tls.crt"
	// CAKeyFile holds the signing CA's private key.
	CAKeyFile = "tls.key"
	// CABundleFile holds the CAs every party trusts; the signing CA chains
	// to one of them. During a CA rotation it holds the old and the new.
	CABundleFile = "ca.crt"
)

// Authority is the lease CA as the controller holds it: the certificate and
// key that sign the grantor's and the runtimes' certificates, and the bundle
// both ends check against.
type Authority struct {
	// Cert is the signing CA.
	Cert *x509.Certificate
	Key  crypto.Signer
	// chain are the certificates of tls.crt a verifier may not have (all but
	// a self-signed one), sent after every leaf.
	chain [][]byte
	// Roots are the bundle's certificates.
	Roots *x509.CertPool
	// Bundle is the bundle as PEM CERTIFICATE blocks only.
	Bundle []byte
}

// WatchAuthorityDir reads the lease CA directory (CACertFile, CAKeyFile,
// CABundleFile) and reloads it when it changes.
func WatchAuthorityDir(dir string, log klog.Logger) (*Files[*Authority], error) {
	return Watch(func(d [][]byte) (*Authority, error) { return ParseAuthority(d[0], d[1], d[2]) }, log,
		filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile), filepath.Join(dir, CABundleFile))
}

// ParseAuthority reads the signing CA (certificate chain and key) and the
// bundle, and checks that the CA may sign and chains to the bundle now.
func ParseAuthority(certPEM, keyPEM, bundlePEM []byte) (*Authority, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s, %s: %w", CACertFile, CAKeyFile, err)
	}
	ca, key, err := SigningCA(pair)
	if err != nil {
		return nil, fmt.Errorf("%s, %s: %w", CACertFile, CAKeyFile, err)
	}
	roots, bundle, err := parseBundle(bundlePEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CABundleFile, err)
	}
	a := &Authority{Cert: ca, Key: key, Roots: roots, Bundle: bundle}
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", CACertFile, err)
		}
		if !bytes.Equal(c.RawIssuer, c.RawSubject) {
			a.chain = append(a.chain, der)
			inter.AddCert(c)
		}
	}
	if _, err := ca.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("%s: the signing CA %q does not chain to %s now, so no end would trust what it signs: %w",
			CACertFile, ca.Subject, CABundleFile, err)
	}
	return a, nil
}

// Issue signs a certificate for pub from tmpl (its NotAfter clamped to the
// CA's own) and returns the chain to present, leaf first, as PEM.
func (a *Authority) Issue(tmpl *x509.Certificate, pub crypto.PublicKey) ([]byte, *x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, nil, err
	}
	t := *tmpl
	t.SerialNumber = serial
	if t.NotAfter.After(a.Cert.NotAfter) {
		t.NotAfter = a.Cert.NotAfter
	}
	if !t.NotAfter.After(t.NotBefore) {
		return nil, nil, fmt.Errorf("the lease CA %q expires at %s: renew it", a.Cert.Subject, a.Cert.NotAfter.Format(time.RFC3339))
	}
	der, err := x509.CreateCertificate(rand.Reader, &t, a.Cert, pub, a.Key)
	if err != nil {
		return nil, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	var out bytes.Buffer
	for _, c := range append([][]byte{der}, a.chain...) {
		_ = pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: c})
	}
	return out.Bytes(), leaf, nil
}

// GrantorBackdate is how far before its making a grantor certificate is
// valid from: runtimes judge it on their nodes' wall clocks, which may lag
// the controller's by up to this much.
const GrantorBackdate = time.Hour

// GrantorCertificate makes the grantor's client certificate (a new P-256
// key, api/lease GrantorIdentity, client authentication only), valid from
// now - GrantorBackdate for lifetime after now.
func (a *Authority) GrantorCertificate(now time.Time, lifetime time.Duration) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	id, _ := url.Parse(leaseapi.GrantorIdentity)
	chainPEM, leaf, err := a.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "holdfast grantor"},
		URIs:        []*url.URL{id},
		NotBefore:   now.Add(-GrantorBackdate),
		NotAfter:    now.Add(lifetime),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, &key.PublicKey)
	if err != nil {
		return nil, err
	}
	cert := &tls.Certificate{PrivateKey: key, Leaf: leaf}
	for rest := chainPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		cert.Certificate = append(cert.Certificate, b.Bytes)
	}
	if len(cert.Certificate) == 0 {
		return nil, errors.New("issued no certificate")
	}
	return cert, nil
}

// RuntimeTemplate is the serving certificate of unit's runtime at epoch:
// api/lease RuntimeIdentity, server authentication only.
func RuntimeTemplate(unit string, epoch int64, notBefore, notAfter time.Time) *x509.Certificate {
	return runtimeTemplate(leaseapi.RuntimeIdentity(unit, epoch), fmt.Sprintf("holdfast runtime %s e%d", unit, epoch), notBefore, notAfter)
}

// WarmRuntimeTemplate is the serving certificate of unit's warm standby pod
// of UID podUID: api/lease WarmRuntimeIdentity, server authentication only.
func WarmRuntimeTemplate(unit, podUID string, notBefore, notAfter time.Time) *x509.Certificate {
	return runtimeTemplate(leaseapi.WarmRuntimeIdentity(unit, podUID), fmt.Sprintf("holdfast warm runtime %s %s", unit, podUID), notBefore, notAfter)
}

func runtimeTemplate(identity, commonName string, notBefore, notAfter time.Time) *x509.Certificate {
	id, _ := url.Parse(identity)
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		URIs:        []*url.URL{id},
		NotBefore:   notBefore,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
}

// SigningCA is the certificate and signer of a CA's key pair, checked to be
// a CA that may sign certificates.
func SigningCA(pair tls.Certificate) (*x509.Certificate, crypto.Signer, error) {
	key, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("its key, a %T, cannot sign", pair.PrivateKey)
	}
	ca := pair.Leaf
	if !ca.IsCA || (ca.KeyUsage != 0 && ca.KeyUsage&x509.KeyUsageCertSign == 0) {
		return nil, nil, fmt.Errorf("%q is not a CA that may sign certificates (basic constraints CA and key usage certSign)", ca.Subject)
	}
	return ca, key, nil
}
