package actuator

import (
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
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/holdfast-io/holdfast/internal/leasetls"

	"github.com/holdfast-io/holdfast/internal/atomicfile"
)

// kubeadm's etcd certificate files, relative to the PKI directory.
const (
	EtcdCACert = "etcd/ca.crt"
	EtcdCAKey  = "etcd/ca.key"
	// The member's own: its client-facing server and its peer identity.
	EtcdServerCert = "etcd/server.crt"
	EtcdServerKey  = "etcd/server.key"
	EtcdPeerCert   = "etcd/peer.crt"
	EtcdPeerKey    = "etcd/peer.key"
	// The local kube-apiserver's client certificate for its etcd.
	APIServerEtcdClientCert = "apiserver-etcd-client.crt"
	APIServerEtcdClientKey  = "apiserver-etcd-client.key"
)

// CertLifetime is how long an issued member certificate is valid (kubeadm's
// default); one within CertRenewBefore of its end is issued again by the
// next promote.
const (
	CertLifetime    = 365 * 24 * time.Hour
	CertRenewBefore = 30 * 24 * time.Hour
	// certBackdate covers clocks of the other members that lag this one.
	certBackdate = time.Hour
)

// memberCert is one certificate the actuator issues for a member.
type memberCert struct {
	cert, key string
	cn        string
	dns       []string
	ips       []net.IP
	usages    []x509.ExtKeyUsage
}

// memberCerts are the certificates of the member named node whose peer and
// client URLs are on ip: the server certificate (client URLs, on loopback
// too for the local apiserver), the peer certificate, and the local
// apiserver's client certificate, as kubeadm lays them out.
func memberCerts(node, host string) []memberCert {
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	dns := []string{"localhost", node}
	if ip := net.ParseIP(host); ip != nil {
		ips = append([]net.IP{ip}, ips...)
	} else if host != "" && host != node {
		dns = append(dns, host)
	}
	return []memberCert{
		{cert: EtcdServerCert, key: EtcdServerKey, cn: node, dns: dns, ips: ips, usages: both},
		{cert: EtcdPeerCert, key: EtcdPeerKey, cn: node, dns: dns, ips: ips, usages: both},
		{cert: APIServerEtcdClientCert, key: APIServerEtcdClientKey, cn: "kube-apiserver-etcd-client",
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
	}
}

// etcdCA is the cluster's etcd CA as kubeadm keeps it on a control-plane
// host.
type etcdCA struct {
	cert *x509.Certificate
	key  crypto.Signer
	pool *x509.CertPool
}

// loadEtcdCA reads the etcd CA under pkiDir and checks that it can issue a
// member's certificates at now: a CA that may sign (basic constraints CA,
// key usage certSign), already valid, and valid past now + CertRenewBefore
// (an issued certificate ends no later than its CA). The other members
// would refuse what a CA failing these issues, or soon stop accepting it,
// so nothing is issued from one.
func loadEtcdCA(pkiDir string, now time.Time) (*etcdCA, error) {
	certPath, keyPath := filepath.Join(pkiDir, EtcdCACert), filepath.Join(pkiDir, EtcdCAKey)
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, fmt.Errorf("the etcd CA %s, %s: %w", certPath, keyPath, err)
	}
	ca, key, err := leasetls.SigningCA(pair)
	if err != nil {
		return nil, fmt.Errorf("the etcd CA %s: %w; put the cluster's etcd CA and its key there (kubeadm's %s, %s)", certPath, err, EtcdCACert, EtcdCAKey)
	}
	switch {
	case now.Before(ca.NotBefore):
		return nil, fmt.Errorf("the etcd CA %s is not valid before %s (the host's clock says %s): check the host's clock", certPath,
			ca.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	case !now.Before(ca.NotAfter):
		return nil, fmt.Errorf("the etcd CA %s expired at %s: renew the cluster's etcd CA before promoting a member", certPath,
			ca.NotAfter.UTC().Format(time.RFC3339))
	case !ca.NotAfter.After(now.Add(CertRenewBefore)):
		return nil, fmt.Errorf("the etcd CA %s expires at %s, less than %d days from now, and a member's certificates would end with it: renew the cluster's etcd CA before promoting a member",
			certPath, ca.NotAfter.UTC().Format(time.RFC3339), int(CertRenewBefore.Hours()/24))
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &etcdCA{cert: ca, key: key, pool: pool}, nil
}

// ensure leaves a valid certificate of c under pkiDir: one already there is
// kept when it chains to the CA, pairs with its key, names every SAN of c
// and is valid past now + CertRenewBefore; otherwise a new key and
// certificate are written (the key first, so a crash between the two
// leaves a pair that fails the check and is issued again).
func (ca *etcdCA) ensure(pkiDir string, c memberCert, now time.Time) (bool, error) {
	certPath, keyPath := filepath.Join(pkiDir, c.cert), filepath.Join(pkiDir, c.key)
	if ok, err := ca.valid(certPath, keyPath, c, now); err != nil || ok {
		return false, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return false, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return false, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: c.cn},
		DNSNames:     c.dns,
		IPAddresses:  c.ips,
		NotBefore:    now.Add(-certBackdate),
		NotAfter:     now.Add(CertLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  c.usages,
	}
	if tmpl.NotAfter.After(ca.cert.NotAfter) {
		tmpl.NotAfter = ca.cert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return false, fmt.Errorf("issuing %s: %w", certPath, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return false, err
	}
	dir := filepath.Dir(certPath)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	if err := atomicfile.Write(dir, filepath.Base(keyPath), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return false, err
	}
	if err := atomicfile.Write(dir, filepath.Base(certPath), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return false, err
	}
	return true, nil
}

func (ca *etcdCA) valid(certPath, keyPath string, c memberCert, now time.Time) (bool, error) {
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		// A torn pair (a crash between the key and the certificate) or a
		// file that is not ours: issued again.
		return false, nil
	}
	leaf := pair.Leaf
	if leaf.Subject.CommonName != c.cn || now.Add(CertRenewBefore).After(leaf.NotAfter) {
		return false, nil
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.pool, CurrentTime: now, KeyUsages: c.usages}); err != nil {
		return false, nil
	}
	for _, d := range c.dns {
		if !slices.Contains(leaf.DNSNames, d) {
			return false, nil
		}
	}
	for _, ip := range c.ips {
		if !slices.ContainsFunc(leaf.IPAddresses, ip.Equal) {
			return false, nil
		}
	}
	return true, nil
}

// EnsureMemberCertificates issues, from the etcd CA under pkiDir, the
// certificates of the member named node whose URLs are on host (an IP
// address or a DNS name) that are missing or stale:
// its server and peer certificates and the local apiserver's client
// certificate, kubeadm's layout. Promote runs it; a host bootstrapping the
// first member runs it too.
func EnsureMemberCertificates(pkiDir, node, host string, now time.Time) error {
	ca, err := loadEtcdCA(pkiDir, now)
	if err != nil {
		return err
	}
	return ca.ensureMember(pkiDir, node, host, now)
}

func (ca *etcdCA) ensureMember(pkiDir, node, host string, now time.Time) error {
	for _, c := range memberCerts(node, host) {
		if _, err := ca.ensure(pkiDir, c, now); err != nil {
			return err
		}
	}
	return nil
}

// removeMemberCerts removes the member's certificates and keys; the CA stays.
func removeMemberCerts(pkiDir string) error {
	for _, c := range memberCerts("", "") {
		for _, p := range []string{c.cert, c.key} {
			if err := removeFile(filepath.Join(pkiDir, p)); err != nil {
				return err
			}
		}
	}
	return nil
}

// removeFile removes a file, missing or not, and syncs its directory.
func removeFile(p string) error {
	err := os.Remove(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(p))
}
