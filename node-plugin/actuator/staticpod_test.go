package actuator_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/yaml"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
)

const (
	spNode = "cp-4"
	spJoin = "cp-1=https://10.0.0.1:2380,cp-2=https://10.0.0.2:2380,cp-4=https://10.0.0.4:2380"
)

// kubelet stands in for the kubelet at the apiserver boundary: it publishes
// a mirror pod for each manifest in the manifests directory (as the kubelet
// does, annotations copied and the mirror annotation added) when synced,
// and deletes those whose manifest is gone.
type kubelet struct {
	mu   sync.Mutex
	dir  string
	node string
	pods map[string]*corev1.Pod
}

func (k *kubelet) MirrorPod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if p, ok := k.pods[ns+"/"+name]; ok {
		return p.DeepCopy(), nil
	}
	return nil, nil
}

// sync publishes the manifests as mirror pods in phase (Ready when
// Running).
func (k *kubelet) sync(t *testing.T, phase corev1.PodPhase) {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	pods := map[string]*corev1.Pod{}
	entries, err := os.ReadDir(k.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(k.dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		p := &corev1.Pod{}
		if err := yaml.Unmarshal(b, p); err != nil {
			t.Fatalf("the kubelet cannot read %s: %v", e.Name(), err)
		}
		p.Name += "-" + k.node
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations["kubernetes.io/config.mirror"] = "hash"
		p.Status.Phase = phase
		ready := corev1.ConditionFalse
		if phase == corev1.PodRunning {
			ready = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}
		pods[p.Namespace+"/"+p.Name] = p
	}
	k.pods = pods
}

type spHost struct {
	t       *testing.T
	root    string
	cfg     actuator.StaticPodConfig
	act     *actuator.StaticPodActuator
	kubelet *kubelet
	etcd    *etcdAnswers
	clock   *clocktesting.FakeClock
	ca      *x509.Certificate
}

// newSPHost lays out a provisioned kubeadm host under a temporary root:
// the manifests directory, the etcd CA (an RSA key in PKCS#1, as kubeadm
// writes it) and the operator's apiserver template.
func newSPHost(t *testing.T) *spHost {
	t.Helper()
	root := t.TempDir()
	h := &spHost{t: t, root: root, clock: clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)), etcd: joinedAnswers()}
	h.cfg = actuator.StaticPodConfig{
		NodeName:          spNode,
		ManifestsDir:      filepath.Join(root, "etc/kubernetes/manifests"),
		PKIDir:            filepath.Join(root, "etc/kubernetes/pki"),
		APIServerTemplate: filepath.Join(root, "etc/kubernetes/holdfast/kube-apiserver.yaml"),
		KubeletKubeconfig: filepath.Join(root, "etc/kubernetes/kubelet.conf"),
		EtcdImage:         "registry.k8s.io/etcd:3.6.5-0",
		State:             hoststate.State{Dir: filepath.Join(root, "var/lib/holdfast"), MemberDataDir: filepath.Join(root, "var/lib/etcd")},
		Members:           h.etcd,
		Timeout:           time.Minute,
		Clock:             h.clock,
	}
	for _, d := range []string{h.cfg.ManifestsDir, filepath.Join(h.cfg.PKIDir, "etcd"), filepath.Dir(h.cfg.APIServerTemplate)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h.ca = writeCA(t, filepath.Join(h.cfg.PKIDir, "etcd"), h.clock.Now())
	tmpl := `apiVersion: v1
kind: Pod
metadata: {name: kube-apiserver, namespace: kube-system}
spec:
  hostNetwork: true
  containers:
  - name: kube-apiserver
    image: registry.k8s.io/kube-apiserver:v1.37.2
    command: [kube-apiserver, --etcd-servers=https://127.0.0.1:2379]
`
	if err := os.WriteFile(h.cfg.APIServerTemplate, []byte(tmpl), 0o644); err != nil {
		t.Fatal(err)
	}
	h.kubeletAt("https://cp.kubeadm.test:6443")
	h.kubelet = &kubelet{dir: h.cfg.ManifestsDir, node: spNode}
	h.act = actuator.NewStaticPod(h.kubelet, h.cfg)
	return h
}

// kubeletAt writes the kubelet's kubeconfig with its server at server
// (the control-plane endpoint on a provisioned host).
func (h *spHost) kubeletAt(server string) {
	h.t.Helper()
	mustWrite(h.t, h.cfg.KubeletKubeconfig, []byte(`apiVersion: v1
kind: Config
clusters:
- name: kubernetes
  cluster: {server: "`+server+`"}
contexts:
- name: kubelet
  context: {cluster: kubernetes, user: kubelet}
current-context: kubelet
users:
- name: kubelet
  user: {client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem}
`))
}

// caTemplate is an etcd CA as kubeadm makes it: valid from an hour before
// now for ten years, a CA that may sign certificates.
func caTemplate(now time.Time) *x509.Certificate {
	return &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "etcd-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
}

func writeCA(t *testing.T, dir string, now time.Time) *x509.Certificate {
	t.Helper()
	return writeCAFrom(t, dir, caTemplate(now))
}

// writeCAFrom writes tmpl, self-signed with a new RSA key, as dir's ca.crt
// and ca.key.
func writeCAFrom(t *testing.T, dir string, tmpl *x509.Certificate) *x509.Certificate {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, "ca.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	mustWrite(t, filepath.Join(dir, "ca.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// replaceCA writes, as the host's etcd CA, the host's CA template as
// change leaves it.
func (h *spHost) replaceCA(change func(*x509.Certificate)) {
	h.t.Helper()
	tmpl := caTemplate(h.clock.Now())
	change(tmpl)
	h.ca = writeCAFrom(h.t, filepath.Join(h.cfg.PKIDir, "etcd"), tmpl)
}

func mustWrite(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func (h *spHost) manifest(name string) string { return filepath.Join(h.cfg.ManifestsDir, name) }

func exists(t *testing.T, p string) bool {
	t.Helper()
	_, err := os.Stat(p)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return err == nil
}

// etcdArgs reads the etcd manifest's command line.
func (h *spHost) etcdArgs() []string {
	h.t.Helper()
	b, err := os.ReadFile(h.manifest(actuator.EtcdManifest))
	if err != nil {
		h.t.Fatal(err)
	}
	p := &corev1.Pod{}
	if err := yaml.UnmarshalStrict(b, p); err != nil {
		h.t.Fatalf("the etcd manifest is not a Pod: %v", err)
	}
	return p.Spec.Containers[0].Command
}

func wantWaiting(t *testing.T, err error, what string) {
	t.Helper()
	if _, ok := actuator.IsWaiting(err); !ok || !strings.Contains(err.Error(), what) {
		t.Fatalf("want a wait for %q, got %v", what, err)
	}
}

// promoteToDone runs Promote, lets the kubelet run etcd, and runs it again.
func (h *spHost) promoteToDone() time.Time {
	h.t.Helper()
	_, err := h.act.Promote(context.Background(), spJoin)
	wantWaiting(h.t, err, "mirror pod kube-system/etcd-cp-4")
	h.kubelet.sync(h.t, corev1.PodRunning)
	started, err := h.act.Promote(context.Background(), spJoin)
	if err != nil {
		h.t.Fatalf("promote once etcd runs: %v", err)
	}
	return started
}

func TestStaticPodPromoteJoinsTheExistingClusterAsItselfThenWritesTheAPIServer(t *testing.T) {
	h := newSPHost(t)
	ctx := context.Background()
	started, err := h.act.Promote(ctx, spJoin)
	wantWaiting(t, err, "not published by the kubelet yet")
	if started.IsZero() {
		t.Fatal("a waiting promote reports the start of its etcd pod")
	}
	args := h.etcdArgs()
	for _, want := range []string{"--name=cp-4", "--initial-cluster=" + spJoin, "--initial-cluster-state=existing",
		"--initial-advertise-peer-urls=https://10.0.0.4:2380", "--listen-peer-urls=https://10.0.0.4:2380",
		"--advertise-client-urls=https://10.0.0.4:2379", "--listen-client-urls=https://127.0.0.1:2379,https://10.0.0.4:2379",
		"--data-dir=" + h.cfg.State.MemberDataDir, "--peer-client-cert-auth=true", "--client-cert-auth=true"} {
		if !slices.Contains(args, want) {
			t.Errorf("the etcd manifest's command lacks %s: %q", want, args)
		}
	}
	for _, a := range args {
		if strings.Contains(a, "=new") {
			t.Errorf("the etcd manifest may never bootstrap a cluster: %s", a)
		}
	}
	if exists(t, h.manifest(actuator.APIServerManifest)) {
		t.Fatal("the apiserver manifest was written before the kubelet ran etcd")
	}
	// The kubelet starts it but it is not Ready yet: still waiting.
	h.kubelet.sync(t, corev1.PodPending)
	_, err = h.act.Promote(ctx, spJoin)
	wantWaiting(t, err, "Pending, not Running")

	h.clock.Step(10 * time.Second)
	h.kubelet.sync(t, corev1.PodRunning)
	again, err := h.act.Promote(ctx, spJoin)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Equal(started) {
		t.Fatalf("a repeated promote reports the first start %v, got %v", started, again)
	}
	if !exists(t, h.manifest(actuator.APIServerManifest)) {
		t.Fatal("the apiserver manifest is not written once etcd runs")
	}
	if role, _ := h.cfg.State.Role(); role != holdfastv1.RoleServer {
		t.Fatalf("role file = %q, want server", role)
	}
	if j, _ := h.cfg.State.Join(); j != spJoin {
		t.Fatalf("join target = %q", j)
	}
	if r, err := h.act.ActiveRole(ctx); err != nil || r != holdfastv1.RoleServer {
		t.Fatalf("active role = %q, %v; want server", r, err)
	}
}

// TestStaticPodMemberCertificatesVerifyAgainstTheEtcdCA checks the issued
// certificates as etcd and its peers use them.
func TestStaticPodMemberCertificatesVerifyAgainstTheEtcdCA(t *testing.T) {
	h := newSPHost(t)
	h.promoteToDone()
	pool := x509.NewCertPool()
	pool.AddCert(h.ca)
	pki := func(f string) string { return filepath.Join(h.cfg.PKIDir, f) }
	for _, tc := range []struct {
		cert, key string
		usage     x509.ExtKeyUsage
		dns       string
		ip        string
	}{
		{actuator.EtcdServerCert, actuator.EtcdServerKey, x509.ExtKeyUsageServerAuth, spNode, "10.0.0.4"},
		{actuator.EtcdServerCert, actuator.EtcdServerKey, x509.ExtKeyUsageServerAuth, "localhost", "127.0.0.1"},
		{actuator.EtcdPeerCert, actuator.EtcdPeerKey, x509.ExtKeyUsageServerAuth, spNode, "10.0.0.4"},
		{actuator.EtcdPeerCert, actuator.EtcdPeerKey, x509.ExtKeyUsageClientAuth, "", ""},
		{actuator.APIServerEtcdClientCert, actuator.APIServerEtcdClientKey, x509.ExtKeyUsageClientAuth, "", ""},
	} {
		pair, err := tls.LoadX509KeyPair(pki(tc.cert), pki(tc.key))
		if err != nil {
			t.Fatalf("%s: %v", tc.cert, err)
		}
		opts := x509.VerifyOptions{Roots: pool, CurrentTime: h.clock.Now(), KeyUsages: []x509.ExtKeyUsage{tc.usage}, DNSName: tc.dns}
		if _, err := pair.Leaf.Verify(opts); err != nil {
			t.Errorf("%s does not verify against the etcd CA for %v %q: %v", tc.cert, tc.usage, tc.dns, err)
		}
		if tc.ip != "" && !slices.ContainsFunc(pair.Leaf.IPAddresses, net.ParseIP(tc.ip).Equal) {
			t.Errorf("%s does not name %s: %v", tc.cert, tc.ip, pair.Leaf.IPAddresses)
		}
		if fi, err := os.Stat(pki(tc.key)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, %v; want 0600", tc.key, fi.Mode().Perm(), err)
		}
	}
	// A promote repeated issues nothing new.
	before, _ := os.ReadFile(pki(actuator.EtcdPeerCert))
	if _, err := h.act.Promote(context.Background(), spJoin); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(pki(actuator.EtcdPeerCert)); !bytes.Equal(before, after) {
		t.Fatal("a repeated promote issued the peer certificate again")
	}
	// A certificate from another CA is replaced by one from the etcd CA.
	other := newSPHost(t)
	other.promoteToDone()
	for _, f := range []string{actuator.EtcdPeerCert, actuator.EtcdPeerKey} {
		b, err := os.ReadFile(filepath.Join(other.cfg.PKIDir, f))
		if err != nil {
			t.Fatal(err)
		}
		mustWrite(t, pki(f), b)
	}
	if _, err := h.act.Promote(context.Background(), spJoin); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(pki(actuator.EtcdPeerCert), pki(actuator.EtcdPeerKey))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: h.clock.Now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatalf("a peer certificate of another CA was kept: %v", err)
	}
}

func TestStaticPodPromoteRefusesAndWritesNoEtcdManifest(t *testing.T) {
	for _, tc := range []struct {
		name    string
		join    string
		prepare func(h *spHost)
		want    string
	}{{
		name:    "holdfast's tombstone",
		join:    spJoin,
		prepare: func(h *spHost) { _ = h.cfg.State.SetTombstone(holdfastv1.Tombstone{MemberID: "a1", ClusterID: "c1"}) },
		want:    "member a1 was removed from cluster c1",
	}, {
		name: "etcd's own tombstone under the member data",
		join: spJoin,
		prepare: func(h *spHost) {
			mustWrite(t, filepath.Join(h.cfg.State.MemberDataDir, hoststate.DefaultServerTombstone), []byte("removed"))
		},
		want: "the server recorded its member's removal",
	}, {
		name:    "no etcd CA key on the host",
		join:    spJoin,
		prepare: func(h *spHost) { _ = os.Remove(filepath.Join(h.cfg.PKIDir, actuator.EtcdCAKey)) },
		want:    "etcd/ca.key does not exist",
	}, {
		name:    "no apiserver template",
		join:    spJoin,
		prepare: func(h *spHost) { _ = os.Remove(h.cfg.APIServerTemplate) },
		want:    "kube-apiserver.yaml does not exist",
	}, {
		// A leaf certificate and its key where the CA belongs: what it
		// signed would chain to nothing the other members trust.
		name: "an etcd CA that is a leaf certificate",
		join: spJoin,
		prepare: func(h *spHost) {
			h.replaceCA(func(c *x509.Certificate) { c.IsCA, c.KeyUsage = false, x509.KeyUsageDigitalSignature })
		},
		want: `etc/kubernetes/pki/etcd/ca.crt: "CN=etcd-ca" is not a CA that may sign certificates`,
	}, {
		name:    "an etcd CA without the certSign key usage",
		join:    spJoin,
		prepare: func(h *spHost) { h.replaceCA(func(c *x509.Certificate) { c.KeyUsage = x509.KeyUsageDigitalSignature }) },
		want:    `etc/kubernetes/pki/etcd/ca.crt: "CN=etcd-ca" is not a CA that may sign certificates`,
	}, {
		name: "an expired etcd CA",
		join: spJoin,
		prepare: func(h *spHost) {
			h.replaceCA(func(c *x509.Certificate) { c.NotBefore, c.NotAfter = c.NotBefore.AddDate(-2, 0, 0), c.NotBefore })
		},
		want: "etc/kubernetes/pki/etcd/ca.crt expired at 2026-03-01T11:00:00Z: renew the cluster's etcd CA",
	}, {
		name: "an etcd CA that expires within the renewal window",
		join: spJoin,
		prepare: func(h *spHost) {
			h.replaceCA(func(c *x509.Certificate) { c.NotAfter = h.clock.Now().Add(10 * 24 * time.Hour) })
		},
		want: "etc/kubernetes/pki/etcd/ca.crt expires at 2026-03-11T12:00:00Z, less than 30 days from now",
	}, {
		name:    "an etcd CA not valid yet",
		join:    spJoin,
		prepare: func(h *spHost) { h.replaceCA(func(c *x509.Certificate) { c.NotBefore = h.clock.Now().Add(time.Hour) }) },
		want:    "etc/kubernetes/pki/etcd/ca.crt is not valid before 2026-03-01T13:00:00Z",
	}, {
		name:    "a kubelet that reaches only this node's kube-apiserver",
		join:    spJoin,
		prepare: func(h *spHost) { h.kubeletAt("https://127.0.0.1:6443") },
		want:    "etc/kubernetes/kubelet.conf points at https://127.0.0.1:6443, this node's own kube-apiserver (a loopback address)",
	}, {
		name:    "no kubelet kubeconfig",
		join:    spJoin,
		prepare: func(h *spHost) { _ = os.Remove(h.cfg.KubeletKubeconfig) },
		want:    "etc/kubernetes/kubelet.conf does not exist",
	}, {
		name: "a join that does not name this node",
		join: "cp-1=https://10.0.0.1:2380,cp-2=https://10.0.0.2:2380",
		want: `names no member "cp-4" (this node)`,
	}, {
		name: "a join that is not name=peerURL",
		join: "cp-4",
		want: "metadata.annotations[holdfast.io/role-join]",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newSPHost(t)
			if tc.prepare != nil {
				tc.prepare(h)
			}
			_, err := h.act.Promote(context.Background(), tc.join)
			if !actuator.IsRefused(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want a refusal saying %q, got %v", tc.want, err)
			}
			written := []string{h.manifest(actuator.EtcdManifest), h.manifest(actuator.APIServerManifest),
				filepath.Join(h.cfg.State.Dir, hoststate.RoleFile), filepath.Join(h.cfg.State.Dir, hoststate.JoinFile)}
			for _, f := range []string{actuator.EtcdServerCert, actuator.EtcdServerKey, actuator.EtcdPeerCert, actuator.EtcdPeerKey,
				actuator.APIServerEtcdClientCert, actuator.APIServerEtcdClientKey} {
				written = append(written, filepath.Join(h.cfg.PKIDir, f))
			}
			for _, p := range written {
				if exists(t, p) {
					t.Errorf("a refused promote wrote %s", p)
				}
			}
		})
	}
}

// TestStaticPodPromoteRepeatedAfterACrashEndsLikeOne crashes a promote at
// each point (its files as far as it got) and repeats it.
func TestStaticPodPromoteRepeatedAfterACrashEndsLikeOne(t *testing.T) {
	for _, tc := range []struct {
		name  string
		crash func(h *spHost)
	}{
		{"after the join target", func(h *spHost) { _ = h.cfg.State.SetJoin(spJoin) }},
		{"after the role file", func(h *spHost) { _ = h.cfg.State.SetJoin(spJoin); _ = h.cfg.State.SetRole(holdfastv1.RoleServer) }},
		{"between a key and its certificate", func(h *spHost) {
			_, _ = h.act.Promote(context.Background(), spJoin)
			_ = os.Remove(filepath.Join(h.cfg.PKIDir, actuator.EtcdServerCert))
			_ = os.Remove(h.manifest(actuator.EtcdManifest))
		}},
		{"after the etcd manifest, before its start time", func(h *spHost) {
			_, _ = h.act.Promote(context.Background(), spJoin)
			_ = os.Remove(filepath.Join(h.cfg.State.Dir, hoststate.StartedAtFile))
		}},
		{"after the apiserver manifest", func(h *spHost) { h.promoteToDone() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newSPHost(t)
			tc.crash(h)
			if _, err := h.act.Promote(context.Background(), spJoin); err != nil {
				wantWaiting(t, err, "mirror pod kube-system/etcd-cp-4")
				h.kubelet.sync(t, corev1.PodRunning)
				if _, err := h.act.Promote(context.Background(), spJoin); err != nil {
					t.Fatal(err)
				}
			}
			pool := x509.NewCertPool()
			pool.AddCert(h.ca)
			pair, err := tls.LoadX509KeyPair(filepath.Join(h.cfg.PKIDir, actuator.EtcdServerCert), filepath.Join(h.cfg.PKIDir, actuator.EtcdServerKey))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: h.clock.Now(), DNSName: spNode}); err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(h.etcdArgs(), "--initial-cluster-state=existing") || !exists(t, h.manifest(actuator.APIServerManifest)) {
				t.Fatal("the repeated promote did not end with both manifests")
			}
			if at, _ := h.cfg.State.ServerStartedAt(); at.IsZero() {
				t.Fatal("no start time recorded")
			}
		})
	}
}

func TestStaticPodStepDownStopsTheAPIServerAndKeepsTheVotingMember(t *testing.T) {
	h := newSPHost(t)
	h.promoteToDone()
	h.kubelet.sync(t, corev1.PodRunning)
	ctx := context.Background()
	for range 2 { // a step-down repeated waits the same
		wantWaiting(t, h.act.StepDown(ctx), "mirror pod kube-system/kube-apiserver-cp-4 is still there")
	}
	if exists(t, h.manifest(actuator.APIServerManifest)) || !exists(t, h.manifest(actuator.EtcdManifest)) {
		t.Fatal("step-down removes the apiserver manifest and keeps etcd's")
	}
	if role, _ := h.cfg.State.Role(); role != holdfastv1.RoleAgent {
		t.Fatalf("role file = %q before the member is removed, want agent", role)
	}
	h.kubelet.sync(t, corev1.PodRunning)
	for range 2 {
		if err := h.act.StepDown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// No tombstone: the guard leaves the voting member running.
	if ok, _, err := h.act.Guard(ctx); ok || err != nil || !exists(t, h.manifest(actuator.EtcdManifest)) {
		t.Fatalf("guard of a stepped-down member: allowed %v, %v; the etcd manifest must stay", ok, err)
	}
	// Removed: the guard stops it.
	if err := h.cfg.State.SetTombstone(holdfastv1.Tombstone{MemberID: "a4", ClusterID: "c1"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.act.Guard(ctx); err != nil || exists(t, h.manifest(actuator.EtcdManifest)) {
		t.Fatalf("guard of a removed member leaves its etcd manifest (%v)", err)
	}
}

func TestStaticPodFinishDemoteMovesDataOnlyOnceEtcdStoppedAndKeepsOneCopy(t *testing.T) {
	h := newSPHost(t)
	ctx := context.Background()
	data := h.cfg.State.MemberDataDir
	for round := range 2 {
		// The first round finishes a demotion, the second rolls a promote
		// back: the same host work.
		finish := h.act.FinishDemote
		if round == 1 {
			finish = h.act.Rollback
		}
		h.promoteToDone()
		mustWrite(t, filepath.Join(data, "member/snap/db"), []byte{byte('a' + round)})
		if err := h.cfg.State.SetTombstone(holdfastv1.Tombstone{MemberID: "a4", ClusterID: "c1"}); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			wantWaiting(t, finish(ctx), "mirror pod kube-system/etcd-cp-4 is still there")
			if !exists(t, filepath.Join(data, "member/snap/db")) {
				t.Fatal("the member data was moved while the kubelet still runs etcd")
			}
		}
		if exists(t, h.manifest(actuator.EtcdManifest)) || exists(t, h.manifest(actuator.APIServerManifest)) {
			t.Fatal("finish-demote leaves a manifest")
		}
		h.kubelet.sync(t, corev1.PodRunning)
		for range 2 {
			if err := finish(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if exists(t, filepath.Join(h.cfg.State.Dir, hoststate.StartedAtFile)) {
			t.Fatal("the finished host keeps the record of its server's start")
		}
		if exists(t, data) {
			t.Fatal("the member data was not moved aside")
		}
		if b, err := os.ReadFile(filepath.Join(h.cfg.State.MovedAside(), "member/snap/db")); err != nil || b[0] != byte('a'+round) {
			t.Fatalf("round %d: the moved-aside copy is not the newest: %q, %v", round, b, err)
		}
		if exists(t, h.cfg.State.MovedAside()+".old") {
			t.Fatal("more than one copy kept")
		}
		for _, f := range []string{actuator.EtcdPeerCert, actuator.EtcdPeerKey, actuator.EtcdServerCert, actuator.EtcdServerKey, actuator.APIServerEtcdClientCert} {
			if exists(t, filepath.Join(h.cfg.PKIDir, f)) {
				t.Errorf("finish-demote leaves %s", f)
			}
		}
		if !exists(t, filepath.Join(h.cfg.PKIDir, actuator.EtcdCAKey)) {
			t.Fatal("finish-demote removed the cluster's etcd CA")
		}
		if role, _ := h.cfg.State.Role(); role != holdfastv1.RoleAgent {
			t.Fatalf("role file = %q, want agent", role)
		}
		if j, _ := h.cfg.State.Join(); j != "" {
			t.Fatalf("the join target stays: %q", j)
		}
		if tomb, _ := h.cfg.State.Tombstone(); tomb != nil {
			t.Fatal("the tombstone was not retired")
		}
		// A former member with no join target may not run etcd: nothing
		// but a promote (which writes the join first) writes its manifest.
		if ok, why, _ := h.act.Guard(ctx); ok || !strings.Contains(why, "says agent") {
			t.Fatalf("guard of a finished former member: %v %q", ok, why)
		}
		if err := h.cfg.State.SetRole(holdfastv1.RoleServer); err != nil { // a person's edit
			t.Fatal(err)
		}
		if ok, why, _ := h.act.Guard(ctx); ok || !strings.Contains(why, "would bootstrap a second cluster") {
			t.Fatalf("guard of a former member with no join target: %v %q", ok, why)
		}
		if r, _ := h.act.ActiveRole(ctx); r != holdfastv1.RoleAgent {
			t.Fatalf("active role = %q, want agent", r)
		}
	}
}

func TestStaticPodWaitFailsPastItsTimeoutWithThePodsState(t *testing.T) {
	h := newSPHost(t)
	ctx := context.Background()
	_, err := h.act.Promote(ctx, spJoin)
	wantWaiting(t, err, "not published")
	h.kubelet.sync(t, corev1.PodPending)
	h.clock.Step(h.cfg.Timeout)
	_, err = h.act.Promote(ctx, spJoin)
	if _, waiting := actuator.IsWaiting(err); waiting || err == nil || !strings.Contains(err.Error(), "Pending, not Running") {
		t.Fatalf("past the timeout a wait fails with the pod's state, got %v", err)
	}
}

func TestStaticPodMirrorPodOfAnotherManifestIsNotDone(t *testing.T) {
	h := newSPHost(t)
	ctx := context.Background()
	h.promoteToDone()
	// The join changes (another learner): the running pod is of the old
	// manifest until the kubelet restarts it.
	join := spJoin + ",cp-5=https://10.0.0.5:2380"
	_, err := h.act.Promote(ctx, join)
	wantWaiting(t, err, "of another manifest")
	h.kubelet.sync(t, corev1.PodRunning)
	if _, err := h.act.Promote(ctx, join); err != nil {
		t.Fatal(err)
	}
	// An ordinary pod of the mirror pod's name is not the static pod.
	h.kubelet.pods["kube-system/etcd-cp-4"].Annotations = map[string]string{actuator.AnnotationManifestHash: h.kubelet.pods["kube-system/etcd-cp-4"].Annotations[actuator.AnnotationManifestHash]}
	_, err = h.act.Promote(ctx, join)
	wantWaiting(t, err, "not a mirror pod")
}

func TestStaticPodMemberByDNSNameIsCertifiedForItAndListensOnAllAddresses(t *testing.T) {
	h := newSPHost(t)
	join := "cp-1=https://10.0.0.1:2380,cp-4=https://cp-4.plant.example:2380"
	_, err := h.act.Promote(context.Background(), join)
	wantWaiting(t, err, "not published")
	args := h.etcdArgs()
	for _, want := range []string{"--initial-advertise-peer-urls=https://cp-4.plant.example:2380", "--listen-peer-urls=https://0.0.0.0:2380",
		"--listen-client-urls=https://0.0.0.0:2379", "--advertise-client-urls=https://cp-4.plant.example:2379"} {
		if !slices.Contains(args, want) {
			t.Errorf("the etcd manifest's command lacks %s: %q", want, args)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(h.ca)
	for _, f := range [][2]string{{actuator.EtcdServerCert, actuator.EtcdServerKey}, {actuator.EtcdPeerCert, actuator.EtcdPeerKey}} {
		pair, err := tls.LoadX509KeyPair(filepath.Join(h.cfg.PKIDir, f[0]), filepath.Join(h.cfg.PKIDir, f[1]))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: h.clock.Now(), DNSName: "cp-4.plant.example"}); err != nil {
			t.Errorf("%s is not valid for the peer URL's name: %v", f[0], err)
		}
	}
}
