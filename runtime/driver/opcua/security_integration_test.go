//go:build integration

package opcua_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-io/holdfast/runtime/driver/opcua"
	"github.com/holdfast-io/holdfast/runtime/internal/testutil"
	"github.com/holdfast-io/holdfast/test/poll"
	"github.com/holdfast-io/holdfast/test/ports"
)

// nodeServer is node-opcua's server (test/opcuaserver) on loopback,
// offering Basic256Sha256 with SignAndEncrypt only; lines are what it
// printed on stdout, one JSON object each.
type nodeServer struct {
	port  int
	mu    sync.Mutex
	lines []map[string]any
}

// startNodeServer starts it and waits until it serves. Missing packages
// fail the test with how to install them: the secured session is proven
// against a server nobody here wrote, never left unchecked.
func startNodeServer(t *testing.T) *nodeServer {
	t.Helper()
	dir, err := filepath.Abs("../../../test/opcuaserver")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "node-opcua-server")); err != nil {
		t.Fatalf("node-opcua's server is not installed in %s (%v): run make opcua-deps", dir, err)
	}
	ps, err := ports.Loopback(1)
	if err != nil {
		t.Fatal(err)
	}
	s := &nodeServer{port: ps[0]}
	cmd := exec.Command("node", filepath.Join(dir, "server.js"), strconv.Itoa(s.port), t.TempDir())
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("node: %v: run make opcua-deps", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	listening := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			s.mu.Lock()
			s.lines = append(s.lines, line)
			s.mu.Unlock()
			if _, ok := line["listening"]; ok {
				close(listening)
			}
		}
	}()
	select {
	case <-listening:
	case <-time.After(2 * time.Minute): // it makes its own RSA certificate first
		t.Fatal("node-opcua's server did not start within 2 minutes")
	}
	return s
}

// printed are the lines that have key, in order.
func (s *nodeServer) printed(key string) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range s.lines {
		if _, ok := l[key]; ok {
			out = append(out, l)
		}
	}
	return out
}

// selfSigned makes an RSA key and a self-signed application instance
// certificate naming uri (OPC UA names an application by the URI in its
// certificate).
func selfSigned(t *testing.T, name, uri string) ([]byte, *rsa.PrivateKey) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(uri)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"holdfast test"}},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageDataEncipherment |
			x509.KeyUsageContentCommitment | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		DNSNames:              []string{"localhost"},
		URIs:                  []*url.URL{u},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

// TestOPCUAConnectsWithSecurity: a session with policy Basic256Sha256 and
// mode SignAndEncrypt, this client's certificate (DER) and key (PEM) made
// by the test, to node-opcua's server, which offers nothing else: the
// driver reads, declares its epoch, then writes, and the server says the
// session was signed and encrypted. A driver configured for policy None
// finds no endpoint there and says so.
func TestOPCUAConnectsWithSecurity(t *testing.T) {
	s := startNodeServer(t)
	cert, key := selfSigned(t, "unit-runtime", "urn:holdfast:test:unit-runtime")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "client.der"), filepath.Join(dir, "client-key.pem")
	if err := os.WriteFile(certFile, cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}
	base := "opcua://127.0.0.1:" + strconv.Itoa(s.port) + "?node.101=ns=1;s=Valve&epochNode=ns=1;s=OwnerEpoch&timeout=10s"
	cfg, err := opcua.ParseURL("valve-1", base+"&policy=Basic256Sha256&cert="+certFile+"&key="+keyFile)
	if err != nil {
		t.Fatal(err)
	}
	d := opcua.New(cfg)
	ctx := context.Background()
	if err := d.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	if v, err := d.ReadRegisters(ctx, 101, 1); err != nil || v[0] != 40 {
		t.Fatalf("read = %v, %v; want [40]", v, err)
	}
	if err := d.WriteRegisters(ctx, testutil.Permit(t, 3), 101, []uint16{41}); err != nil {
		t.Fatal(err)
	}
	// The server prints each write after answering it: its output is
	// read until both writes are there.
	var got []string
	poll.Until(t, 30*time.Second, "the server printing both writes", func() (bool, string) {
		got = got[:0]
		for _, w := range s.printed("node") {
			got = append(got, w["node"].(string)+"="+w["value"].(string))
		}
		return len(got) >= 2, fmt.Sprint(got)
	})
	// node-opcua prints an Int64 as its high and low words.
	if want := []string{"OwnerEpoch=0,3", "Valve=41"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("the server saw writes %v, want %v: the epoch first", got, want)
	}
	sessions := s.printed("session")
	if len(sessions) != 1 || sessions[0]["securityMode"] != "SignAndEncrypt" ||
		!strings.HasSuffix(sessions[0]["securityPolicy"].(string), "#Basic256Sha256") {
		t.Fatalf("the server's sessions: %v, want one Basic256Sha256 SignAndEncrypt", sessions)
	}

	plain, err := opcua.ParseURL("valve-1", base)
	if err != nil {
		t.Fatal(err)
	}
	err = opcua.New(plain).Connect(ctx)
	if err == nil || !strings.Contains(err.Error(), "no endpoint with policy None") {
		t.Fatalf("a driver with policy None against a secured-only server = %v, want no endpoint", err)
	}
}
