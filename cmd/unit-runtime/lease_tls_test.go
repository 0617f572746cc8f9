package main_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	"github.com/holdfast-io/holdfast/controller/leasecerts"
	"github.com/holdfast-io/holdfast/internal/leasetls"
	"github.com/holdfast-io/holdfast/internal/leasetls/leasetlstest"
	"github.com/holdfast-io/holdfast/test/devicesim"
	"github.com/holdfast-io/holdfast/test/leasetest"
)

// unauthenticated reads the runtime's count of refused grants for reason.
func (p *proc) unauthenticated(t *testing.T, reason string) int {
	t.Helper()
	v := p.metric(t, fmt.Sprintf(`holdfast_runtime_lease_grants_unauthenticated_total{reason=%q}`, reason))
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("holdfast_runtime_lease_grants_unauthenticated_total{reason=%q} = %q", reason, v)
	}
	return n
}

// L12 (docs/design.md §3): the real runtime takes a grant only from the
// authorised grantor. Each other sender runs the grantor's own renewal loop
// (controller/grantor, which follows an unacknowledged grant with one that
// would extend the lease) for several attempts: with no client certificate,
// with a certificate of another CA, with the lease CA's certificate naming
// another identity, and in plain HTTP. None extends anything, none makes a
// write reach the device, and each is counted by its reason. Then the
// authorised grantor's grant extends the lease and the runtime writes.
func TestAnUnauthenticatedGrantExtendsNothing(t *testing.T) {
	sim, err := devicesim.Start(devicesim.Config{Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	p := startRuntime(t, sim, 1)
	other := leasetlstest.NewCA(t, "another-ca")
	impostor, _ := url.Parse("holdfast://grantor-impostor")
	now := time.Now()
	for _, tc := range []struct {
		name   string
		reason string
		tls    *leasetlstest.Static
		url    string
	}{
		{name: "no client certificate", reason: leasetls.NoCertificate, tls: &leasetlstest.Static{Roots: p.CA.Roots}},
		{name: "a certificate of another CA", reason: leasetls.Untrusted,
			tls: &leasetlstest.Static{Cert: other.GrantorCertificate(t), Roots: p.CA.Roots}},
		{name: "the lease CA's certificate naming another identity", reason: leasetls.WrongIdentity,
			tls: &leasetlstest.Static{Roots: p.CA.Roots, Cert: p.CA.ClientCertificate(t, &x509.Certificate{
				Subject: pkix.Name{CommonName: "holdfast grantor"}, URIs: []*url.URL{impostor},
				NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
				KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})}},
		{name: "plain HTTP", reason: leasetls.Plaintext, url: strings.Replace(p.LeaseURL, "https://", "http://", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := p.unauthenticated(t, tc.reason)
			g := &leasetest.Grantor{URL: p.LeaseURL, Unit: unit, Epoch: 1, Duration: leaseTime, Name: "bystander"}
			if tc.tls != nil {
				g.TLS = tc.tls
			} else {
				g.URL = tc.url
			}
			ctx, stop := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); g.Run(ctx) }()
			eventually(t, 20*time.Second, "three attempts", func() bool { return g.Attempts() >= 3 })
			stop()
			<-done
			if _, err := g.Last(); err == nil || !strings.Contains(err.Error(), "Refused") || !strings.Contains(err.Error(), "refused this grantor's certificate") &&
				!strings.Contains(err.Error(), "plain HTTP") {
				t.Fatalf("the sender's last attempt: %v, want the runtime's refusal", err)
			}
			if g.Acks() != 0 {
				t.Fatalf("%d of the sender's grants were acknowledged", g.Acks())
			}
			if s, err := p.status(); err != nil || s.State != leaseapi.Ungranted || !s.Fenced || s.RemainingMillis != nil || s.LastGrantor != "" {
				t.Fatalf("after the sender's grants the runtime reports %+v (%v), want Ungranted, fenced, never granted", s, err)
			}
			if got := p.unauthenticated(t, tc.reason) - before; got < g.Attempts() {
				t.Fatalf("%d of %d refusals counted as %s", got, g.Attempts(), tc.reason)
			}
			if w := writesAt(sim, 1); len(w) != 0 {
				t.Fatalf("%d writes reached the device", len(w))
			}
		})
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go grantor(p, 1).Run(ctx)
	eventually(t, 10*time.Second, "the authorised grantor's lease to drive the device", func() bool { return len(writesAt(sim, 1)) >= 3 })
	if s, _ := p.status(); s.State != leaseapi.Held || s.LastGrantor != "test-grantor-e1" {
		t.Fatalf("after the authorised grantor's grants the runtime reports %+v", s)
	}
}

// servedCertificate is the certificate the runtime's lease endpoint serves
// now, to a new connection.
func servedCertificate(t *testing.T, p *proc) *x509.Certificate {
	t.Helper()
	conn, err := tls.Dial("tcp", strings.TrimSuffix(strings.TrimPrefix(p.LeaseURL, "https://"), leaseapi.Path),
		&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}) //nolint:gosec // only reads what is served
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

// admits reports whether the runtime takes cert as the grantor's now: a
// grant for another epoch is answered 409 by the handler only once the
// sender is authenticated, 403 before.
func admits(t *testing.T, p *proc, cert *tls.Certificate) bool {
	t.Helper()
	code, body := post(t, p, cert, `{"unit":"plant/kiln-1","epoch":99,"durationMillis":10000,"ackAgeMillis":0,"grantor":"probe","seq":1}`)
	switch code {
	case http.StatusConflict:
		return true
	case http.StatusForbidden:
		return false
	}
	t.Fatalf("probe answered %d %s", code, body)
	return false
}

// The lease channel keeps working through a rotation of the runtime's
// certificate and of the lease CA, in the order docs/operations.md gives,
// with neither end restarted: the real runtime reloads its directory (as the
// kubelet rewrites the projected volume), the controller's credentials
// reload the lease CA directory (as the kubelet rewrites the Secret) and
// make the grantor a new certificate, and the grantor's renewals go on
// being acknowledged; the runtime is Held throughout. At the end, a
// grantor certificate of the retired CA is refused.
func TestTheLeaseChannelSurvivesARotationWithoutARestart(t *testing.T) {
	sim, err := devicesim.Start(devicesim.Config{Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	ca1, ca2 := leasetlstest.NewCA(t, "lease-ca-1"), leasetlstest.NewCA(t, "lease-ca-2")
	log := ktesting.NewLogger(t, ktesting.NewConfig())
	ctlDir := t.TempDir()
	leasetlstest.WriteAtomic(t, ctlDir, ca1.DirFiles(nil))
	caFiles, err := leasetls.WatchAuthorityDir(ctlDir, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go caFiles.Run(ctx, leasetls.ReloadInterval)
	creds, err := leasecerts.NewGrantorCredentials(caFiles, clock.RealClock{}, log)
	if err != nil {
		t.Fatal(err)
	}

	p := startRuntimeWith(t, sim, 1, ca1)
	g := &leasetest.Grantor{URL: p.LeaseURL, Unit: unit, Epoch: 1, Duration: leaseTime, Name: "holdfast-controller-0", TLS: creds}
	go g.Run(ctx)
	eventually(t, 10*time.Second, "the lease held", func() bool { return g.Acks() >= 2 })

	// The runtime is Held from here to the end.
	var mu sync.Mutex
	var lapses []string
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		for ctx.Err() == nil {
			if s, err := p.status(); err == nil && s.State != leaseapi.Held {
				mu.Lock()
				lapses = append(lapses, fmt.Sprintf("%s at %s", s.State, time.Now().Format(time.StampMilli)))
				mu.Unlock()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	renewsOn := func(step string) {
		t.Helper()
		from := g.Acks()
		eventually(t, 20*time.Second, step+": three more renewals acknowledged", func() bool { return g.Acks() >= from+3 })
		if _, err := g.Last(); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	runtimeBundle := func(issuer *leasetlstest.CA, bundle []byte) *x509.Certificate {
		t.Helper()
		files := issuer.RuntimeFiles(t, unit, 1, bundle)
		leasetlstest.WriteAtomic(t, p.LeaseTLSDir, files)
		want, err := leasetls.ParseRuntime(files[leaseapi.CredentialsFile], files[leaseapi.TrustBundleFile])
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "the runtime to serve its new certificate", func() bool {
			return servedCertificate(t, p).SerialNumber.Cmp(want.Cert.Leaf.SerialNumber) == 0
		})
		return want.Cert.Leaf
	}
	grantorIssuedBy := func(ca *leasetlstest.CA) bool {
		return creds.ClientCertificate().Leaf.CheckSignatureFrom(ca.Cert) == nil
	}

	// 1. The runtime's certificate is renewed (the kubelet, at two thirds
	// of its life).
	runtimeBundle(ca1, nil)
	renewsOn("a new runtime certificate")

	// 2. The CA rotates. First the new CA joins both bundles.
	both := leasetlstest.Bundle(ca1, ca2)
	leasetlstest.WriteAtomic(t, ctlDir, ca1.DirFiles(both))
	runtimeBundle(ca1, both)
	eventually(t, 10*time.Second, "the runtime to trust the new CA", func() bool { return admits(t, p, ca2.GrantorCertificate(t)) })
	eventually(t, 10*time.Second, "the controller to trust the new CA", func() bool {
		_, err := ca2.GrantorCertificate(t).Leaf.Verify(x509.VerifyOptions{Roots: creds.RuntimeRoots(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err == nil
	})
	renewsOn("both CAs trusted")

	// Then the new CA signs: the grantor's next certificate, and the
	// runtime's at its next renewal.
	leasetlstest.WriteAtomic(t, ctlDir, ca2.DirFiles(both))
	eventually(t, 10*time.Second, "the grantor's certificate from the new CA", func() bool { return grantorIssuedBy(ca2) })
	runtimeBundle(ca2, both)
	renewsOn("the new CA signing")

	// Last, the old CA leaves both bundles.
	leasetlstest.WriteAtomic(t, ctlDir, ca2.DirFiles(nil))
	runtimeBundle(ca2, ca2.CertPEM)
	eventually(t, 10*time.Second, "the runtime to refuse the retired CA", func() bool { return !admits(t, p, ca1.GrantorCertificate(t)) })
	renewsOn("the old CA retired")
	if !admits(t, p, creds.ClientCertificate()) {
		t.Fatal("the grantor's own certificate is refused after the rotation")
	}

	stop()
	<-watching
	mu.Lock()
	defer mu.Unlock()
	if len(lapses) > 0 {
		t.Fatalf("the runtime was not Held throughout the rotation: %v", lapses)
	}
}
