package lease

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

func serve(t *testing.T, k *Keeper, tlsConfig *tls.Config) string {
	t.Helper()
	log := ktesting.NewLogger(t, ktesting.NewConfig())
	srv, err := Listen("127.0.0.1:0", NewHandler(k, log), tlsConfig, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv.Addr().String()
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
	url := "http://" + serve(t, k, nil) + leaseapi.Path
	c := &http.Client{Timeout: 5 * time.Second}

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

func TestLeaseEndpointIsHTTP2WhenTLSIsConfigured(t *testing.T) {
	k, _ := newKeeper(t, holdfastv1.Failover)
	cert, pool := selfSigned(t)
	addr := serve(t, k, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}, ForceAttemptHTTP2: true}}
	resp, err := c.Get("https://" + addr + leaseapi.Path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("lease endpoint over TLS answered %s, want HTTP/2", resp.Proto)
	}
}

func TestLeaseEndpointServesH2CAndHTTP1WithoutTLS(t *testing.T) {
	k, _ := newKeeper(t, holdfastv1.Failover)
	url := "http://" + serve(t, k, nil) + leaseapi.Path
	h2c := &http.Transport{Protocols: new(http.Protocols)}
	h2c.Protocols.SetUnencryptedHTTP2(true)
	for name, tc := range map[string]struct {
		rt    http.RoundTripper
		major int
	}{"h2c": {h2c, 2}, "http/1.1": {&http.Transport{}, 1}} {
		resp, err := (&http.Client{Transport: tc.rt, Timeout: 5 * time.Second}).Get(url)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		resp.Body.Close()
		if resp.ProtoMajor != tc.major || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: answered %s %d", name, resp.Proto, resp.StatusCode)
		}
	}
}

func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}
