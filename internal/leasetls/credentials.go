package leasetls

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
)

// Runtime is a runtime's lease credentials: the certificate its endpoint
// serves, and the CAs a grantor's client certificate must chain to.
type Runtime struct {
	Cert  *tls.Certificate
	Roots *x509.CertPool
}

// NotAfter is when the serving certificate expires.
func (r *Runtime) NotAfter() time.Time { return r.Cert.Leaf.NotAfter }

// WatchRuntimeDir reads a runtime's lease TLS directory (api/lease
// CredentialsFile and TrustBundleFile) and reloads it when it changes.
func WatchRuntimeDir(dir string, log klog.Logger) (*Files[*Runtime], error) {
	return Watch(func(d [][]byte) (*Runtime, error) { return ParseRuntime(d[0], d[1]) }, log,
		filepath.Join(dir, leaseapi.CredentialsFile), filepath.Join(dir, leaseapi.TrustBundleFile))
}

// ParseRuntime reads a credential bundle (a private key and the certificate
// chain it was issued, leaf first, in any order of blocks) and a CA bundle.
func ParseRuntime(credentials, bundle []byte) (*Runtime, error) {
	var keyPEM, certPEM []byte
	for rest := credentials; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		enc := pem.EncodeToMemory(&pem.Block{Type: b.Type, Bytes: b.Bytes})
		if b.Type == "CERTIFICATE" {
			certPEM = append(certPEM, enc...)
		} else if keyPEM == nil {
			keyPEM = enc
		}
	}
	if keyPEM == nil || certPEM == nil {
		return nil, fmt.Errorf("%s: must hold a private key and its certificate chain (PEM)", leaseapi.CredentialsFile)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", leaseapi.CredentialsFile, err)
	}
	roots, _, err := parseBundle(bundle)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", leaseapi.TrustBundleFile, err)
	}
	return &Runtime{Cert: &cert, Roots: roots}, nil
}

// parseBundle reads PEM CA certificates and returns them as a pool and as
// plain PEM (CERTIFICATE blocks only, no headers or text between).
func parseBundle(data []byte) (*x509.CertPool, []byte, error) {
	pool := x509.NewCertPool()
	var out bytes.Buffer
	n := 0
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, nil, err
		}
		pool.AddCert(c)
		_ = pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: b.Bytes})
		n++
	}
	if n == 0 {
		return nil, nil, errors.New("holds no PEM certificate")
	}
	return pool, out.Bytes(), nil
}
