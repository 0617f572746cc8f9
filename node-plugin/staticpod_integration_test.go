//go:build integration

package nodeplugin_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/node-plugin/role"
	"github.com/holdfast-io/holdfast/test/poll"
)

// memberAnswers stands in for etcd at its client API
// (actuator.Membership) where no etcd runs: the local member joined once
// it is set, not answering until then.
type memberAnswers struct {
	joined atomic.Pointer[hoststate.Member]
}

func (m *memberAnswers) Local(context.Context) (hoststate.Member, error) {
	if j := m.joined.Load(); j != nil {
		return *j, nil
	}
	return hoststate.Member{}, errors.New("connection refused")
}

func (m *memberAnswers) MemberNames(context.Context) (string, map[string]string, error) {
	if j := m.joined.Load(); j != nil {
		return j.ClusterID, map[string]string{"a1": "kubeadm-1", j.ID: j.Name}, nil
	}
	return "c1", map[string]string{"a1": "kubeadm-1"}, nil
}

// newStaticPodHost lays out a provisioned kubeadm host under a temporary
// root: the manifests directory, an etcd CA with its key, and the
// operator's kube-apiserver template.
func newStaticPodHost(t *testing.T, node string) actuator.StaticPodConfig {
	t.Helper()
	root := t.TempDir()
	cfg := actuator.StaticPodConfig{
		NodeName:          node,
		ManifestsDir:      filepath.Join(root, "manifests"),
		PKIDir:            filepath.Join(root, "pki"),
		APIServerTemplate: filepath.Join(root, "holdfast/kube-apiserver.yaml"),
		KubeletKubeconfig: filepath.Join(root, "kubelet.conf"),
		EtcdImage:         "registry.k8s.io/etcd:3.6.5-0",
		State:             hoststate.State{Dir: filepath.Join(root, "holdfast"), MemberDataDir: filepath.Join(root, "etcd")},
		Recheck:           100 * time.Millisecond,
	}
	if err := os.MkdirAll(cfg.ManifestsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	caCert, caKey := etcdCA(t)
	for p, b := range map[string][]byte{
		filepath.Join(cfg.PKIDir, actuator.EtcdCACert): caCert,
		filepath.Join(cfg.PKIDir, actuator.EtcdCAKey):  caKey,
		cfg.APIServerTemplate: []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: kube-apiserver, namespace: kube-system}\n" +
			"spec: {hostNetwork: true, containers: [{name: kube-apiserver, image: registry.k8s.io/kube-apiserver:v1.37.2}]}\n"),
		cfg.KubeletKubeconfig: kubeletKubeconfig("https://cp.kubeadm.test:6443"),
	} {
		writeHostFile(t, p, b)
	}
	return cfg
}

// kubeletKubeconfig is a kubelet's kubeconfig with its server at server:
// the control-plane endpoint on a provisioned host.
func kubeletKubeconfig(server string) []byte {
	return []byte("apiVersion: v1\nkind: Config\nclusters: [{name: kubernetes, cluster: {server: \"" + server + "\"}}]\n" +
		"contexts: [{name: kubelet, context: {cluster: kubernetes, user: kubelet}}]\ncurrent-context: kubelet\n" +
		"users: [{name: kubelet, user: {client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem}}]\n")
}

func writeHostFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// etcdCA is a new etcd CA's certificate and key, in PEM.
func etcdCA(t *testing.T) (cert, key []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "etcd-ca"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(10 * 365 * 24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, k.Public(), k)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// startStaticPodPlugin runs the node's holdfast-node role half on cfg: the
// static pod actuator reading mirror pods from the real apiserver, and the
// role reconciler.
func startStaticPodPlugin(t *testing.T, cfg actuator.StaticPodConfig) {
	t.Helper()
	node := cfg.NodeName
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  env.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Node{}: {Field: fields.OneTermEqualSelector("metadata.name", node)},
		}},
		Controller: ctrlConfig(),
	})
	if err != nil {
		t.Fatal(err)
	}
	act := actuator.NewStaticPod(actuator.APIMirrorPods{Reader: mgr.GetAPIReader()}, cfg)
	r := &role.Reconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), NodeName: node, Actuator: act, State: cfg.State, GuardEvery: time.Minute}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// publishMirrorPod does the kubelet's part for the manifest name: it
// creates its mirror pod (annotations copied, the mirror annotation added)
// and reports it Running and Ready.
func publishMirrorPod(t *testing.T, cfg actuator.StaticPodConfig, name string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	b, err := os.ReadFile(filepath.Join(cfg.ManifestsDir, name))
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	if err := yaml.Unmarshal(b, pod); err != nil {
		t.Fatal(err)
	}
	pod.Name += "-" + cfg.NodeName
	pod.Annotations["kubernetes.io/config.mirror"] = "mirror"
	pod.Spec.NodeName = cfg.NodeName
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pod) })
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

// TestStaticPodStepStaysRunningUntilItsMirrorPodSaysSo drives promote,
// step-down and finish-demote through the role reconciler against the real
// apiserver: each step is reported running while the kubelet's part is
// outstanding, done once the mirror pod read from the apiserver says so,
// and a wait is reported once per state it waits in (the recheck itself
// writes nothing, so it never wakes the reconciler through its own Node).
func TestStaticPodStepStaysRunningUntilItsMirrorPodSaysSo(t *testing.T) {
	const node, swap = "kubeadm-4", "20260301T120000Z-kubeadm-1-kubeadm-4"
	createNode(t, node)
	cfg := newStaticPodHost(t, node)
	etcdAPI := &memberAnswers{}
	cfg.Members = etcdAPI
	startStaticPodPlugin(t, cfg)
	holdLease(t, swap)
	before := stepCounts(t)

	// A host without the etcd CA key is refused, saying so.
	caKey := filepath.Join(cfg.PKIDir, actuator.EtcdCAKey)
	keyPEM, err := os.ReadFile(caKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(caKey); err != nil {
		t.Fatal(err)
	}
	setStep(t, node, holdfastv1.RoleServer, swap, holdfastv1.RoleStepPromote,
		"kubeadm-1=https://10.0.0.1:2380,kubeadm-4=https://10.0.0.4:2380")
	if rep := waitReport(t, node, holdfastv1.RoleStepPromote, holdfastv1.ActuatorRefused); !strings.Contains(rep.Message, "etcd/ca.key does not exist") {
		t.Fatalf("refusal of a host without the etcd CA key: %q", rep.Message)
	}
	if err := os.WriteFile(caKey, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	// The refused step is carried out on the next Node change.
	if err := role.PatchAnnotations(context.Background(), env.Client, node, map[string]*string{"test.holdfast.io/provisioned": new("true")}); err != nil {
		t.Fatal(err)
	}
	rep := waitReport(t, node, holdfastv1.RoleStepPromote, holdfastv1.ActuatorRunning)
	poll.Until(t, waitTimeout, "the promote waiting for the etcd mirror pod", func() (bool, string) {
		rep = waitReport(t, node, holdfastv1.RoleStepPromote, holdfastv1.ActuatorRunning)
		return strings.Contains(rep.Message, "mirror pod kube-system/etcd-kubeadm-4 is not published"), rep.Message
	})
	if rep.StartedAt == nil {
		t.Fatal("a waiting promote reports its etcd pod's start")
	}
	if _, err := os.Stat(filepath.Join(cfg.ManifestsDir, actuator.APIServerManifest)); !os.IsNotExist(err) {
		t.Fatalf("the apiserver manifest was written before etcd ran: %v", err)
	}
	etcd := publishMirrorPod(t, cfg, actuator.EtcdManifest)
	// A Ready etcd pod is not a joined member: the promote waits, saying
	// so, until the member answers in its cluster.
	poll.Until(t, waitTimeout, "the promote waiting for the member to join", func() (bool, string) {
		rep = waitReport(t, node, holdfastv1.RoleStepPromote, holdfastv1.ActuatorRunning)
		return strings.Contains(rep.Message, "the local etcd member does not answer"), rep.Message
	})
	if _, err := os.Stat(filepath.Join(cfg.ManifestsDir, actuator.APIServerManifest)); !os.IsNotExist(err) {
		t.Fatalf("the apiserver manifest was written before the member joined: %v", err)
	}
	etcdAPI.joined.Store(&hoststate.Member{ID: "a4", ClusterID: "c1", Name: node})
	waitReport(t, node, holdfastv1.RoleStepPromote, holdfastv1.ActuatorDone)
	if _, err := os.Stat(filepath.Join(cfg.ManifestsDir, actuator.APIServerManifest)); err != nil {
		t.Fatalf("the apiserver manifest is not written once etcd runs: %v", err)
	}
	// Running reports: the step's start and one per state waited in (not
	// published, perhaps Pending between the kubelet's create and status,
	// the member not joined).
	if n := rose(before, stepCounts(t))[holdfastv1.RoleStepPromote+"/"+holdfastv1.ActuatorRunning]; n < 3 || n > 4 {
		t.Fatalf("the promote was reported running %v times: a wait must be reported once per state, not once per recheck", n)
	}

	setStep(t, node, holdfastv1.RoleAgent, swap, holdfastv1.RoleStepStepDown, "")
	waitReport(t, node, holdfastv1.RoleStepStepDown, holdfastv1.ActuatorDone)
	if role, _ := cfg.State.Role(); role != holdfastv1.RoleAgent {
		t.Fatalf("role file %q after step-down", role)
	}

	if err := os.MkdirAll(filepath.Join(cfg.State.MemberDataDir, "member"), 0o755); err != nil {
		t.Fatal(err)
	}
	setStep(t, node, holdfastv1.RoleAgent, swap, holdfastv1.RoleStepFinishDemote, "")
	poll.Until(t, waitTimeout, "finish-demote waiting for the etcd pod to stop", func() (bool, string) {
		rep := waitReport(t, node, holdfastv1.RoleStepFinishDemote, holdfastv1.ActuatorRunning)
		return strings.Contains(rep.Message, "etcd-kubeadm-4 is still there"), rep.Message
	})
	if _, err := os.Stat(cfg.State.MemberDataDir); err != nil {
		t.Fatalf("the member data was moved while its etcd pod runs: %v", err)
	}
	if err := env.Client.Delete(context.Background(), etcd, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	waitReport(t, node, holdfastv1.RoleStepFinishDemote, holdfastv1.ActuatorDone)
	if _, err := os.Stat(cfg.State.MovedAside()); err != nil {
		t.Fatalf("the member data was not moved aside: %v", err)
	}
}
