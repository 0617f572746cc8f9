// Package leasetlstest makes lease CAs and credentials for tests, in the
// files and layouts the chart, the lease signer and the kubelet make them.
package leasetlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	"github.com/holdfast-io/holdfast/internal/leasetls"
)

// CA is a lease CA.
type CA struct {
	*leasetls.Authority
	// CertPEM and KeyPEM are its tls.crt and tls.key; its bundle is
	// CertPEM unless the test says otherwise.
	CertPEM, KeyPEM []byte
}

// NewCA makes a self-signed CA named name, valid from an hour ago for a
// year, as the chart's genCA does (a P-256 key here: faster to make).
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	c, err := MakeCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var (
	sharedOnce sync.Once
	shared     *CA
	sharedErr  error
)

// Shared is one lease CA for the whole test process: the runtimes and
// grantors of a package's tests share it, as those of one installation do.
func Shared(t testing.TB) *CA {
	t.Helper()
	sharedOnce.Do(func() { shared, sharedErr = MakeCA("holdfast-test-lease-ca") })
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return shared
}

// MakeCA is NewCA outside a test (a TestMain, a harness).
func MakeCA(name string) (*CA, error) {
	_, key, der, err := SelfSignedCA(name, 365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	c := &CA{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})}
	if c.Authority, err = leasetls.ParseAuthority(c.CertPEM, c.KeyPEM, c.CertPEM); err != nil {
		return nil, err
	}
	return c, nil
}

// SelfSignedCA makes a self-signed P-256 CA certificate named name, valid
// from an hour ago for validity: its certificate, key and certificate DER.
func SelfSignedCA(name string, validity time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(validity),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	return cert, key, der, nil
}

// Intermediate makes a CA signed by c (as cert-manager's CA Issuer signs a
// CA Certificate): its tls.crt holds it, its bundle is c's certificate.
func (c *CA) Intermediate(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	chainPEM, _, err := c.Issue(&x509.Certificate{
		Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(90 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, &key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	in := &CA{CertPEM: chainPEM, KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})}
	if in.Authority, err = leasetls.ParseAuthority(in.CertPEM, in.KeyPEM, c.CertPEM); err != nil {
		t.Fatal(err)
	}
	return in
}

// Bundle concatenates CAs' certificates: a trust bundle.
func Bundle(cas ...*CA) []byte {
	var b []byte
	for _, c := range cas {
		b = append(b, c.CertPEM...)
	}
	return b
}

// DirFiles are the lease CA directory's files (the controller's
// --lease-ca-dir) with bundle as ca.crt (the CA's own certificate if nil).
func (c *CA) DirFiles(bundle []byte) map[string][]byte {
	if bundle == nil {
		bundle = c.CertPEM
	}
	return map[string][]byte{leasetls.CACertFile: c.CertPEM, leasetls.CAKeyFile: c.KeyPEM, leasetls.CABundleFile: bundle}
}

// Dir writes the lease CA directory in a new temporary directory.
func (c *CA) Dir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	WriteAtomic(t, dir, c.DirFiles(nil))
	return dir
}

// RuntimeCredentials issues the runtime of unit at epoch its credential
// bundle (a new P-256 key, then the chain), as the lease signer does
// through a PodCertificateRequest and the kubelet writes it.
func (c *CA) RuntimeCredentials(t testing.TB, unit string, epoch int64) []byte {
	t.Helper()
	now := time.Now()
	return c.Credentials(t, leasetls.RuntimeTemplate(unit, epoch, now.Add(-time.Minute), now.Add(24*time.Hour)))
}

// Credentials issues a credential bundle for any template.
func (c *CA) Credentials(t testing.TB, tmpl *x509.Certificate) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	chain, _, err := c.Issue(tmpl, &key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return append(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), chain...)
}

// RuntimeFiles are a runtime's lease TLS directory's files: its
// credentials for unit at epoch and bundle (the CA's own certificate if nil).
func (c *CA) RuntimeFiles(t testing.TB, unit string, epoch int64, bundle []byte) map[string][]byte {
	t.Helper()
	if bundle == nil {
		bundle = c.CertPEM
	}
	return map[string][]byte{leaseapi.CredentialsFile: c.RuntimeCredentials(t, unit, epoch), leaseapi.TrustBundleFile: bundle}
}

// RuntimeDir writes a runtime's lease TLS directory in a new temporary
// directory.
func (c *CA) RuntimeDir(t testing.TB, unit string, epoch int64) string {
	t.Helper()
	dir := t.TempDir()
	WriteAtomic(t, dir, c.RuntimeFiles(t, unit, epoch, nil))
	return dir
}

// GrantorCertificate is a grantor's client certificate from this CA.
func (c *CA) GrantorCertificate(t testing.TB) *tls.Certificate {
	t.Helper()
	cert, err := c.Authority.GrantorCertificate(time.Now(), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// ClientCertificate is a client certificate from this CA for tmpl, e.g. one
// naming another identity.
func (c *CA) ClientCertificate(t testing.TB, tmpl *x509.Certificate) *tls.Certificate {
	t.Helper()
	cert, err := tls.X509KeyPair(splitCredentials(t, c.Credentials(t, tmpl)))
	if err != nil {
		t.Fatal(err)
	}
	return &cert
}

// KeyPairFiles are the tls.crt (the chain) and tls.key of a
// kubernetes.io/tls Secret holding a certificate c issues for tmpl, such as
// a webhook's serving certificate.
func (c *CA) KeyPairFiles(t testing.TB, tmpl *x509.Certificate) map[string][]byte {
	t.Helper()
	crt, key := splitCredentials(t, c.Credentials(t, tmpl))
	return map[string][]byte{"tls.crt": crt, "tls.key": key}
}

func splitCredentials(t testing.TB, creds []byte) (certPEM, keyPEM []byte) {
	t.Helper()
	for rest := creds; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return certPEM, keyPEM
		}
		enc := pem.EncodeToMemory(b)
		if b.Type == "CERTIFICATE" {
			certPEM = append(certPEM, enc...)
		} else {
			keyPEM = enc
		}
	}
}

// WriteAtomic replaces the files of dir at once, as the kubelet updates a
// Secret or projected volume: the files are links into ..data, itself a
// link swapped by a rename to a new timestamped directory.
func WriteAtomic(t testing.TB, dir string, files map[string][]byte) {
	t.Helper()
	if err := WriteFiles(dir, files); err != nil {
		t.Fatal(err)
	}
}

// WriteFiles is WriteAtomic outside a test.
func WriteFiles(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ts, err := os.MkdirTemp(dir, "..data-")
	if err != nil {
		return err
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(ts, name), b, 0o600); err != nil {
			return err
		}
	}
	tmp := filepath.Join(dir, fmt.Sprintf("..data_tmp%d", time.Now().UnixNano()))
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return err
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		return err
	}
	for name := range files {
		link := filepath.Join(dir, name)
		if target, err := os.Readlink(link); err == nil && target == filepath.Join("..data", name) {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			return err
		}
	}
	if old != "" {
		return os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}

// RuntimeCertificate is the serving certificate of unit's runtime at epoch.
func (c *CA) RuntimeCertificate(t testing.TB, unit string, epoch int64) *tls.Certificate {
	t.Helper()
	cert, err := tls.X509KeyPair(splitCredentials(t, c.RuntimeCredentials(t, unit, epoch)))
	if err != nil {
		t.Fatal(err)
	}
	return &cert
}

// Static are fixed credentials with the methods grantor.Credentials asks
// for.
type Static struct {
	Cert  *tls.Certificate
	Roots *x509.CertPool
}

// ClientCertificate is s.Cert.
func (s *Static) ClientCertificate() *tls.Certificate { return s.Cert }

// RuntimeRoots is s.Roots.
func (s *Static) RuntimeRoots() *x509.CertPool { return s.Roots }

// Grantor is a grantor's credentials from this CA, trusting it.
func (c *CA) Grantor(t testing.TB) *Static {
	t.Helper()
	return &Static{Cert: c.GrantorCertificate(t), Roots: c.Roots}
}

// ServeRuntime serves h over TLS on loopback as the lease endpoint of
// unit's runtime at epoch: a certificate from this CA naming the binding,
// HTTP/2, client certificates asked for and left to h to judge.
func (c *CA) ServeRuntime(t testing.TB, h http.Handler, unit string, epoch int64) *httptest.Server {
	t.Helper()
	return serve(t, h, c.RuntimeCertificate(t, unit, epoch))
}

// ServeWarmRuntime serves h as ServeRuntime does, as the lease endpoint of
// unit's warm standby pod of UID podUID.
func (c *CA) ServeWarmRuntime(t testing.TB, h http.Handler, unit, podUID string) *httptest.Server {
	t.Helper()
	now := time.Now()
	cert, err := tls.X509KeyPair(splitCredentials(t, c.Credentials(t, leasetls.WarmRuntimeTemplate(unit, podUID, now.Add(-time.Minute), now.Add(24*time.Hour)))))
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, h, &cert)
}

func serve(t testing.TB, h http.Handler, cert *tls.Certificate) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = leasetls.ServerConfig(func() *tls.Certificate { return cert })
	// httptest puts its own certificate first when none is set, and with
	// no server name (an IP address) crypto/tls takes that one.
	srv.TLS.Certificates = []tls.Certificate{*cert}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}
