//go:build integration

package voters_test

import (
	"context"
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

	"github.com/holdfast-io/holdfast/controller/voters"
	"github.com/holdfast-io/holdfast/test/etcdproc"
)

// pemPair issues a certificate for template, signed by parent (itself when
// parent is nil), and returns it and its key in PEM.
func pemPair(t *testing.T, template *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, []byte, []byte) {
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

// TestEtcdClientTLSFromTheSecret: a real etcd member that requires client
// certificates answers the controller's client built from a Secret with
// tls.crt, tls.key and ca.crt (the VoterPolicy's clientCertSecretRef), and
// refuses a client without one; a Secret missing a key is refused naming it.
func TestEtcdClientTLSFromTheSecret(t *testing.T) {
	now := time.Now()
	caT := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "etcd-ca"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	ca, caKey, caPEM, _ := pemPair(t, caT, nil, nil)
	_, _, srvPEM, srvKey := pemPair(t, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "etcd"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}, ca, caKey)
	_, _, cliPEM, cliKey := pemPair(t, &x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "holdfast-controller"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}, ca, caKey)

	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ms, err := etcdproc.NewMembers("tls1")
	if err != nil {
		t.Fatal(err)
	}
	m := ms[0]
	m.ClientURL = strings.Replace(m.ClientURL, "http://", "https://", 1)
	cmd := etcdproc.Command(filepath.Join(env.BinDir, "etcd"), m, filepath.Join(dir, "db"), etcdproc.InitialCluster(m), "new")
	cmd.Args = append(cmd.Args, "--cert-file="+write("server.crt", srvPEM), "--key-file="+write("server.key", srvKey),
		"--trusted-ca-file="+write("ca.crt", caPEM), "--client-cert-auth")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNS, Name: "etcd-client"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: cliPEM, corev1.TLSPrivateKeyKey: cliKey, corev1.ServiceAccountRootCAKey: caPEM}}
	cfg, err := voters.TLSFromSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	withCert := &voters.ClientEtcd{TLS: cfg, StatusTimeout: time.Second, RequestTimeout: 2 * time.Second}
	var view voters.EtcdView
	eventually(t, 30*time.Second, "the TLS member answers the client built from the Secret", func() (bool, string) {
		view = withCert.Observe(context.Background(), []string{m.ClientURL})
		return view.Err == "" && len(view.Members) == 1 && view.Members[0].Answered, view.Err
	})

	// The member really requires a client certificate: the CA alone is refused.
	noCert := cfg.Clone()
	noCert.Certificates = nil
	if v := (&voters.ClientEtcd{TLS: noCert, StatusTimeout: time.Second, RequestTimeout: 2 * time.Second}).Observe(context.Background(), []string{m.ClientURL}); v.Err == "" {
		t.Fatalf("a client without a certificate read the member list: %+v", v)
	}

	bad := secret.DeepCopy()
	delete(bad.Data, corev1.ServiceAccountRootCAKey)
	if _, err := voters.TLSFromSecret(bad); err == nil || !strings.Contains(err.Error(), "Secret holdfast-system/etcd-client: data[ca.crt]: must be set") {
		t.Errorf("a Secret without ca.crt: %v", err)
	}
}
