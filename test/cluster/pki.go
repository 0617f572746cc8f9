package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/holdfast-io/holdfast/internal/leasetls/leasetlstest"
)

// pki is the cluster's one certificate authority: it signs the apiserver's
// and the kubelets' serving certificates and every client certificate
// (a client's user name is its certificate's CN, its groups its O).
type pki struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// CAFile is the CA certificate, PEM.
	CAFile string
	// saPub and saKey are the service-account key pair's files, once
	// serviceAccountKeys wrote them.
	saPub, saKey string
}

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	cert, key, der, err := leasetlstest.SelfSignedCA("holdfast-e2e-ca", 10*24*time.Hour)
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, cert: cert, key: key, CAFile: filepath.Join(dir, "ca.crt")}
	return p, writePEM(p.CAFile, "CERTIFICATE", der)
}

// pair is a certificate and key written as PEM files.
type pair struct{ Cert, Key string }

var serial int64 = 1

// issue writes name.crt and name.key: a client certificate for user and
// groups, serving too when hosts are given.
func (p *pki) issue(name, user string, groups []string, hosts ...string) (pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pair{}, err
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: user, Organization: groups},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(10 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(hosts) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		return pair{}, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return pair{}, err
	}
	out := pair{Cert: filepath.Join(p.dir, name+".crt"), Key: filepath.Join(p.dir, name+".key")}
	if err := writePEM(out.Cert, "CERTIFICATE", der); err != nil {
		return pair{}, err
	}
	return out, writePEM(out.Key, "EC PRIVATE KEY", kder)
}

// serviceAccountKeys writes the RSA key pair the apiserver signs and checks
// service account tokens with, once: a kubeadm host provisioned before the
// apiserver starts has the same pair.
func (p *pki) serviceAccountKeys() (pub, priv string, err error) {
	if p.saPub != "" {
		return p.saPub, p.saKey, nil
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", "", err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", "", err
	}
	pub, priv = filepath.Join(p.dir, "sa.pub"), filepath.Join(p.dir, "sa.key")
	if err := writePEM(pub, "PUBLIC KEY", pubDER); err != nil {
		return "", "", err
	}
	if err := writePEM(priv, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key)); err != nil {
		return "", "", err
	}
	p.saPub, p.saKey = pub, priv
	return pub, priv, nil
}

// serviceAccountKeyFiles are the files serviceAccountKeys wrote.
func (p *pki) serviceAccountKeyFiles() (pub, priv string) { return p.saPub, p.saKey }

// ServiceAccountKeyFiles are the key pair the apiserver signs and checks
// service account tokens with: another apiserver of this cluster (a
// control-plane node's static pod) is given the same, as kubeadm copies
// sa.pub and sa.key to a joining control-plane node.
func (c *Cluster) ServiceAccountKeyFiles() (pub, priv string) { return c.pki.serviceAccountKeyFiles() }

// writeKey writes the CA's private key (kube-controller-manager signs
// certificate requests with it) and returns its file.
func (p *pki) writeKey() (string, error) {
	der, err := x509.MarshalECPrivateKey(p.key)
	if err != nil {
		return "", err
	}
	path := filepath.Join(p.dir, "ca.key")
	return path, writePEM(path, "EC PRIVATE KEY", der)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// writeKubeconfig writes a kubeconfig for server with a client certificate.
func writeKubeconfig(path, server, caFile string, client pair) error {
	s := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: holdfast-e2e
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: user
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: holdfast-e2e
  context: {cluster: holdfast-e2e, user: user}
current-context: holdfast-e2e
`, server, caFile, client.Cert, client.Key)
	return os.WriteFile(path, []byte(s), 0o600)
}

// insecureTLS is for a component's own self-signed health endpoint on the
// hub's loopback, which carries nothing but "ok".
func insecureTLS() *tls.Config { return &tls.Config{InsecureSkipVerify: true} } //nolint:gosec // health probe only
