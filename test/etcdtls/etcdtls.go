// Package etcdtls gives test etcd members on loopback the TLS a production
// control plane's etcd has: a CA, a server certificate for 127.0.0.1, and a
// client certificate the members require, handed to holdfast as the Secret
// a VoterPolicy's clientCertSecretRef names (tls.crt, tls.key, ca.crt).
//
//	p := etcdtls.New(t)
//	cmd := etcdproc.Command(bin, etcdtls.HTTPS(m), ...)
//	cmd.Args = append(cmd.Args, p.ServerArgs(t, dir)...)
//	secret := p.Secret("kube-system", "etcd-client")
package etcdtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/holdfast-io/holdfast/test/etcdproc"
)

// PKI is the CA, the members' server certificate and the client
// certificate, in PEM.
type PKI struct {
	CA []byte
	// CAKey is the CA's key: a host that issues its own member certificates
	// (the static pod actuator) holds it.
	CAKey                 []byte
	ServerCert, ServerKey []byte
	ClientCert, ClientKey []byte
}

// New issues a CA (valid for an hour either side of now), a server
// certificate for 127.0.0.1 and a client certificate for
// holdfast-controller.
func New(t testing.TB) *PKI {
	t.Helper()
	now := time.Now()
	valid := func(c *x509.Certificate) *x509.Certificate {
		c.NotBefore, c.NotAfter = now.Add(-time.Hour), now.Add(time.Hour)
		c.KeyUsage |= x509.KeyUsageDigitalSignature
		return c
	}
	ca, caKey, caPEM, caKeyPEM := issue(t, valid(&x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-etcd-ca"},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}), nil, nil)
	_, _, srv, srvKey := issue(t, valid(&x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "test-etcd"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}), ca, caKey)
	_, _, cli, cliKey := issue(t, valid(&x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "holdfast-controller"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}), ca, caKey)
	return &PKI{CA: caPEM, CAKey: caKeyPEM, ServerCert: srv, ServerKey: srvKey, ClientCert: cli, ClientKey: cliKey}
}

// issue signs template by parent (itself when parent is nil) and returns
// the certificate, its key, and both in PEM.
func issue(t testing.TB, template, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, []byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if parent == nil {
		parent, parentKey = template, key
	}
	der, err := x509.CreateCertificate(rand.Reader, template, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

// ServerArgs writes the server certificate, its key and the CA under dir
// and returns the etcd flags that serve clients over TLS with them and
// require a client certificate signed by the CA.
func (p *PKI) ServerArgs(t testing.TB, dir string) []string {
	t.Helper()
	write := func(name string, b []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	return []string{"--cert-file=" + write("server.crt", p.ServerCert), "--key-file=" + write("server.key", p.ServerKey),
		"--trusted-ca-file=" + write("ca.crt", p.CA), "--client-cert-auth"}
}

// Secret is the client certificate as a VoterPolicy's clientCertSecretRef
// names it: tls.crt, tls.key and ca.crt.
func (p *PKI) Secret(namespace, name string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: p.ClientCert, corev1.TLSPrivateKeyKey: p.ClientKey, corev1.ServiceAccountRootCAKey: p.CA}}
}

// HTTPS is m serving its clients over TLS (its client URL with https).
func HTTPS(m etcdproc.Member) etcdproc.Member {
	m.ClientURL = strings.Replace(m.ClientURL, "http://", "https://", 1)
	return m
}
