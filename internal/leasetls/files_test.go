package leasetls_test

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	"github.com/holdfast-io/holdfast/internal/leasetls"
	"github.com/holdfast-io/holdfast/internal/leasetls/leasetlstest"
)

// Credentials are reloaded from their files when they change, and a set
// that does not parse never replaces the one in use.
func TestCredentialsAreReloadedAndABrokenSetIsNotTaken(t *testing.T) {
	ca := leasetlstest.NewCA(t, "lease-ca")
	dir := ca.RuntimeDir(t, "plant/kiln-1", 1)
	f, err := leasetls.WatchRuntimeDir(dir, ktesting.NewLogger(t, ktesting.NewConfig()))
	if err != nil {
		t.Fatal(err)
	}
	first := f.Current()
	changes := 0
	f.OnChange(func(*leasetls.Runtime) { changes++ })
	if changed, err := f.Reload(); changed || err != nil {
		t.Fatalf("an unchanged directory reloaded: %v %v", changed, err)
	}

	// Rotated by an atomic swap: taken.
	leasetlstest.WriteAtomic(t, dir, ca.RuntimeFiles(t, "plant/kiln-1", 1, nil))
	if changed, err := f.Reload(); !changed || err != nil || changes != 1 {
		t.Fatalf("a rotated directory: changed %v err %v hooks %d", changed, err, changes)
	}
	second := f.Current()
	if second.Cert.Leaf.SerialNumber.Cmp(first.Cert.Leaf.SerialNumber) == 0 {
		t.Fatal("the new certificate was not taken")
	}

	// A key that is not the certificate's, and a bundle with no
	// certificate: refused, the working set stays.
	other := ca.RuntimeCredentials(t, "plant/kiln-1", 1)
	cur, _ := os.ReadFile(filepath.Join(dir, leaseapi.CredentialsFile))
	mixed := append(keyOf(other), certsOf(cur)...)
	for name, files := range map[string]map[string][]byte{
		"mismatched key": {leaseapi.CredentialsFile: mixed, leaseapi.TrustBundleFile: ca.CertPEM},
		"empty bundle":   {leaseapi.CredentialsFile: cur, leaseapi.TrustBundleFile: []byte("not pem")},
	} {
		leasetlstest.WriteAtomic(t, dir, files)
		if changed, err := f.Reload(); changed || err == nil {
			t.Fatalf("%s: taken (changed %v, err %v)", name, changed, err)
		}
		if f.Current() != second {
			t.Fatalf("%s replaced the working credentials", name)
		}
	}
}

func keyOf(creds []byte) []byte   { return blocks(creds, false) }
func certsOf(creds []byte) []byte { return blocks(creds, true) }

// blocks are the PEM blocks of creds that are certificates (or are not).
func blocks(creds []byte, certs bool) []byte {
	var out []byte
	for rest := creds; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return out
		}
		if (b.Type == "CERTIFICATE") == certs {
			out = append(out, pem.EncodeToMemory(b)...)
		}
	}
}

// The lease CA must be able to sign and must chain to the bundle the ends
// trust; an intermediate travels with every certificate it signs.
func TestTheLeaseCAChainsToTheBundle(t *testing.T) {
	root := leasetlstest.NewCA(t, "root")
	other := leasetlstest.NewCA(t, "other")
	if _, err := leasetls.ParseAuthority(root.CertPEM, root.KeyPEM, other.CertPEM); err == nil || !strings.Contains(err.Error(), "does not chain to ca.crt") {
		t.Fatalf("a CA outside the bundle: %v", err)
	}
	if _, err := leasetls.ParseAuthority(root.CertPEM, other.KeyPEM, root.CertPEM); err == nil {
		t.Fatal("a key that is not the CA's was taken")
	}
	leaf := root.Credentials(t, leasetls.RuntimeTemplate("plant/kiln-1", 1, time.Now().Add(-time.Minute), time.Now().Add(time.Hour)))
	if _, err := leasetls.ParseAuthority(certsOf(leaf), keyOf(leaf), root.CertPEM); err == nil || !strings.Contains(err.Error(), "is not a CA") {
		t.Fatal("a leaf was taken as a CA")
	}

	inter := root.Intermediate(t, "intermediate")
	a, err := leasetls.ParseAuthority(inter.CertPEM, inter.KeyPEM, root.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := a.GrantorCertificate(time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(cert.Certificate) != 2 {
		t.Fatalf("a certificate signed by an intermediate carries %d certificates, want it and the intermediate", len(cert.Certificate))
	}
	if r := leasetls.VerifyPeer(chain(t, cert.Certificate), root.Roots, x509.ExtKeyUsageClientAuth, leaseapi.GrantorIdentity); r != nil {
		t.Fatalf("a grantor certificate from the intermediate, checked against the root: %v", r)
	}
}
