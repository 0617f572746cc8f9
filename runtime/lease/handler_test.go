package lease

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/leasetls"
	"github.com/holdfast-io/holdfast/internal/leasetls/leasetlstest"
)

// serve runs k's lease endpoint as a runtime does (mutual TLS with a
// certificate of ca naming the binding, grants only from ca's grantor), and
// returns its address and the reasons of the grants it refused.
func serve(t *testing.T, k *Keeper, ca *leasetlstest.CA) (string, *refusals) {
	t.Helper()
	log := ktesting.NewLogger(t, ktesting.NewConfig())
	cert := ca.RuntimeCertificate(t, k.cfg.Unit, k.cfg.Epoch)
	h := NewHandler(k, MutualTLS(func() *x509.CertPool { return ca.Roots }, leaseapi.GrantorIdentity), log)
	refused := &refusals{}
	h.OnRefused = refused.add
	srv, err := Listen("127.0.0.1:0", h, leasetls.ServerConfig(func() *tls.Certificate { return cert }), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv.Addr().String(), refused
}

// servePlain runs it as a runtime started with --insecure-plaintext-lease.
func servePlain(t *testing.T, k *Keeper) string {
	t.Helper()
	log := ktesting.NewLogger(t, ktesting.NewConfig())
	srv, err := Listen("127.0.0.1:0", NewHandler(k, InsecurePlaintext, log), nil, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv.Addr().String()
}

type refusals struct {
	mu      sync.Mutex
	reasons []string
}

func (r *refusals) add(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reasons = append(r.reasons, reason)
}

func (r *refusals) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.reasons...)
}

// client speaks to a lease endpoint as a grantor holding cert would, over
// HTTP/2; it trusts any server (the tests here judge the runtime's side).
func client(cert *tls.Certificate) *http.Client {
	cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13} //nolint:gosec // the server is the test's own
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}}
}

func post(t *testing.T, c *http.Client, url string, body any) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := c.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.Bytes()
}

func TestLeaseEndpoint(t *testing.T) {
	k, _ := newKeeper(t, holdfastv1.Failover)
	ca := leasetlstest.NewCA(t, "lease-ca")
	addr, _ := serve(t, k, ca)
	url := "https://" + addr + leaseapi.Path
	c := client(ca.GrantorCertificate(t))

	t.Run("a grant is answered with the reply", func(t *testing.T) {
		code, body := post(t, c, url, grant(k, 3, 1, 30*time.Second, age(time.Second)))
		var r leaseapi.Reply
		if code != http.StatusOK || json.Unmarshal(body, &r) != nil || r.State != leaseapi.Held || r.Epoch != 3 || r.Fenced ||
			r.Incarnation.PodUID != "uid-1" {
			t.Fatalf("POST = %d %s, want 200 Held at epoch 3 with the incarnation", code, body)
		}
	})
	t.Run("GET reports the status for the watchdog", func(t *testing.T) {
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var s leaseapi.Status
		if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
			t.Fatal(err)
		}
		if s.State != leaseapi.Held || s.Epoch != 3 || s.Unit != "plant/kiln-1" || s.Mode != holdfastv1.Failover ||
			s.RemainingMillis == nil || *s.RemainingMillis != 29000 || s.Deadline == nil || s.HoldBoundMillis != 15000 ||
			s.Incarnation.RestartCount != 2 || s.LastGrantor != "holdfast-controller-0" || s.LastSeq != 1 {
			t.Fatalf("GET = %+v", s)
		}
	})
	t.Run("a grant for another epoch is a 409 naming both", func(t *testing.T) {
		for _, epoch := range []int64{2, 4} {
			code, body := post(t, c, url, grant(k, epoch, 9, 30*time.Second, age(0)))
			var cf leaseapi.Conflict
			if code != http.StatusConflict || json.Unmarshal(body, &cf) != nil || cf.RuntimeEpoch != 3 || cf.GrantEpoch != epoch ||
				!strings.Contains(cf.Message, "epoch 3") {
				t.Fatalf("grant for epoch %d = %d %s, want 409 naming epochs 3 and %d", epoch, code, body, epoch)
			}
		}
		if rem, _ := k.Remaining(); rem != 29*time.Second {
			t.Fatalf("a refused grant changed the lease: remaining %v", rem)
		}
	})
	t.Run("a grant for another unit is a 409", func(t *testing.T) {
		g := grant(k, 3, 10, 30*time.Second, age(0))
		g.Unit = "plant/kiln-2"
		if code, body := post(t, c, url, g); code != http.StatusConflict || !strings.Contains(string(body), "plant/kiln-2") {
			t.Fatalf("grant for another unit = %d %s, want 409", code, body)
		}
	})
	t.Run("a malformed grant is a 400 with every field path", func(t *testing.T) {
		code, body := post(t, c, url, map[string]any{"epoch": 0, "durationMillis": 5})
		for _, want := range []string{"unit: Required value", "epoch: Invalid value", "durationMillis: Invalid value", "grantor: Required value"} {
			if code != http.StatusBadRequest || !strings.Contains(string(body), want) {
				t.Fatalf("malformed grant = %d %s, want 400 with %q", code, body, want)
			}
		}
		resp, err := c.Post(url, "application/json", strings.NewReader("{not json"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("unparseable grant = %d, want 400", resp.StatusCode)
		}
	})
	t.Run("other methods are refused", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodDelete, url, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("DELETE = %d, want 405", resp.StatusCode)
		}
	})
}

func TestLeaseEndpointIsHTTP2OverTLS(t *testing.T) {
	k, _ := newKeeper(t, holdfastv1.Failover)
	ca := leasetlstest.NewCA(t, "lease-ca")
	addr, _ := serve(t, k, ca)
	resp, err := client(ca.GrantorCertificate(t)).Get("https://" + addr + leaseapi.Path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("lease endpoint over TLS answered %s, want HTTP/2", resp.Proto)
	}
}

// The status (GET) grants nothing: it is served to any reader, over TLS
// without a certificate and in plain HTTP/1.1 or h2c on the same port, as
// the node plugin's watchdog reads it. Without TLS (--insecure-plaintext-
// lease) everything is plain.
func TestLeaseEndpointServesItsStatusToAnyReader(t *testing.T) {
	k, _ := newKeeper(t, holdfastv1.Failover)
	addr, _ := serve(t, k, leasetlstest.NewCA(t, "lease-ca"))
	h2c := &http.Transport{Protocols: new(http.Protocols)}
	h2c.Protocols.SetUnencryptedHTTP2(true)
	for name, tc := range map[string]struct {
		c     *http.Client
		url   string
		major int
	}{
		"tls without a certificate": {client(nil), "https://" + addr, 2},
		"h2c":                       {&http.Client{Transport: h2c, Timeout: 5 * time.Second}, "http://" + addr, 2},
		"http/1.1":                  {&http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}, "http://" + addr, 1},
		"plaintext runtime, h2c":    {&http.Client{Transport: h2c, Timeout: 5 * time.Second}, "http://" + servePlain(t, k), 2},
	} {
		resp, err := tc.c.Get(tc.url + leaseapi.Path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var st leaseapi.Status
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if resp.ProtoMajor != tc.major || resp.StatusCode != http.StatusOK || err != nil || st.Unit != "plant/kiln-1" {
			t.Fatalf("%s: answered %s %d %+v %v", name, resp.Proto, resp.StatusCode, st, err)
		}
	}
}

// L12 at the endpoint: a grant from anyone but the authorised grantor is
// answered 403 naming why, before it is read (even one for another epoch
// learns nothing), extends nothing, and is counted by reason.
func TestTheLeaseEndpointRefusesEverySenderButTheGrantor(t *testing.T) {
	ca := leasetlstest.NewCA(t, "lease-ca")
	other := leasetlstest.NewCA(t, "another-ca")
	now := time.Now()
	impostor, _ := url.Parse("holdfast://grantor-impostor")
	for _, tc := range []struct {
		name   string
		client func(addr string) (*http.Client, string)
		reason string
		msg    string
	}{
		{name: "no client certificate", reason: leasetls.NoCertificate, msg: "no certificate was presented",
			client: func(addr string) (*http.Client, string) { return client(nil), "https://" + addr }},
		{name: "a certificate of another CA", reason: leasetls.Untrusted, msg: "unknown authority",
			client: func(addr string) (*http.Client, string) {
				return client(other.GrantorCertificate(t)), "https://" + addr
			}},
		{name: "the lease CA's, naming another identity", reason: leasetls.WrongIdentity, msg: "does not name holdfast://grantor",
			client: func(addr string) (*http.Client, string) {
				return client(ca.ClientCertificate(t, &x509.Certificate{Subject: pkix.Name{CommonName: "impostor"}, URIs: []*url.URL{impostor},
					NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
					ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})), "https://" + addr
			}},
		{name: "a runtime's serving certificate", reason: leasetls.Untrusted, msg: "incompatible key usage",
			client: func(addr string) (*http.Client, string) {
				return client(ca.RuntimeCertificate(t, "plant/kiln-1", 3)), "https://" + addr
			}},
		{name: "plain HTTP", reason: leasetls.Plaintext, msg: "over plain HTTP",
			client: func(addr string) (*http.Client, string) {
				return &http.Client{Timeout: 5 * time.Second}, "http://" + addr
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, _ := newKeeper(t, holdfastv1.Failover)
			addr, refused := serve(t, k, ca)
			c, base := tc.client(addr)
			for _, g := range []*leaseapi.Grant{grant(k, 3, 1, 30*time.Second, age(0)), grant(k, 4, 2, 30*time.Second, age(0))} {
				code, body := post(t, c, base+leaseapi.Path, g)
				var e leaseapi.Error
				if code != http.StatusForbidden || json.Unmarshal(body, &e) != nil || e.Reason != leaseapi.ReasonUnauthenticated || !strings.Contains(e.Message, tc.msg) {
					t.Fatalf("grant for epoch %d = %d %s, want 403 %s naming %q", g.Epoch, code, body, leaseapi.ReasonUnauthenticated, tc.msg)
				}
			}
			if st := k.Status(); st.State != leaseapi.Ungranted || st.RemainingMillis != nil || st.LastGrantor != "" {
				t.Fatalf("a refused grant changed the lease: %+v", st)
			}
			if got := refused.get(); len(got) != 2 || got[0] != tc.reason || got[1] != tc.reason {
				t.Fatalf("refusals counted %v, want two of %s", got, tc.reason)
			}
		})
	}
	t.Run("the grantor", func(t *testing.T) {
		k, _ := newKeeper(t, holdfastv1.Failover)
		addr, refused := serve(t, k, ca)
		code, body := post(t, client(ca.GrantorCertificate(t)), "https://"+addr+leaseapi.Path, grant(k, 3, 1, 30*time.Second, age(0)))
		if code != http.StatusOK || k.Status().State != leaseapi.Held || len(refused.get()) != 0 {
			t.Fatalf("the grantor's grant = %d %s, state %s, refusals %v", code, body, k.Status().State, refused.get())
		}
	})
}
