//go:build e2e

package staticpod

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/holdfast-io/holdfast/internal/leasetls/leasetlstest"
	nodeplugin "github.com/holdfast-io/holdfast/node-plugin"
	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/node-plugin/tombstone"
	"github.com/holdfast-io/holdfast/test/cluster"
)

// Images built from make k8s-bin's binaries (cluster.Image.K8sBinary), as
// registry.k8s.io's etcd and kube-apiserver images hold them.
const (
	etcdImage      = "holdfast.test/etcd:e2e"
	apiServerImage = "holdfast.test/kube-apiserver:e2e"
	apiServerPort  = 6443
)

// host is a kubeadm host as the operator provisions it for static pod
// members, and the actuator holdfast-node runs there.
type host struct {
	n   *cluster.Node
	cfg actuator.StaticPodConfig
	act *actuator.StaticPodActuator
}

// provision lays out kubeadm's files in the node's KubernetesDir, as an
// operator provisions a control-plane-capable host: the etcd CA with its
// key (pki/etcd), the files a joining control-plane node's kube-apiserver
// shares with the others (the cluster CA, the service account key pair)
// and its own serving certificate, and the kube-apiserver template. The
// actuator is configured as holdfast-node configures it (node-plugin's
// newStaticPodActuator): its host state in the node's holdfast host
// directory, kubeadm's etcd data directory, the mirror pods read from the
// apiserver past any cache, and the etcd pod's init container running
// holdfast-node's start condition from the copy of itself it keeps on the
// host.
func provision(t *testing.T, c *cluster.Cluster, n *cluster.Node) *host {
	t.Helper()
	k := n.KubernetesDir()
	cfg := actuator.StaticPodConfig{
		NodeName:          n.Name,
		ManifestsDir:      filepath.Join(k, "manifests"),
		PKIDir:            filepath.Join(k, "pki"),
		APIServerTemplate: filepath.Join(k, "holdfast", "kube-apiserver.yaml"),
		EtcdImage:         etcdImage,
		State:             hoststate.State{Dir: filepath.Join(n.HostDir(), "holdfast"), MemberDataDir: filepath.Join(n.Dir, "var", "lib", "etcd")},
		Recheck:           250 * time.Millisecond,
		Timeout:           4 * time.Minute,
	}
	// Done only once the member answers in the voter's cluster, asked as
	// holdfast-node asks: its own client URL, then the cluster's.
	local := fmt.Sprintf("http://%s:%d", n.IP, cluster.EtcdClientPort)
	cfg.Members = &tombstone.ClientEtcd{LocalEndpoint: local, DialOptions: c.EtcdDialOptions(),
		Cluster: func(context.Context) ([]string, error) { return c.EtcdEndpoints(), nil }}
	cfg.StartCondition = nodeplugin.StartConditionArgs(&nodeplugin.Options{HostDir: cfg.State.Dir, MemberDataDir: cfg.State.MemberDataDir,
		EtcdLocal: cluster.LocalEtcdURL})
	bin, err := c.Binary("cmd/holdfast-node")
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, bin, filepath.Join(cfg.State.Dir, nodeplugin.HostBinary), 0o755)

	// Valid past the member certificates' renewal window, as a kubeadm CA is.
	_, caKey, caDER, err := leasetlstest.SelfSignedCA("etcd-ca", 90*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(caKey)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(cfg.PKIDir, actuator.EtcdCACert), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644)
	writeFile(t, filepath.Join(cfg.PKIDir, actuator.EtcdCAKey), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)

	saPub, saKey := c.ServiceAccountKeyFiles()
	crt, key, err := c.ServingCert("kube-apiserver-"+n.Name, n.IP)
	if err != nil {
		t.Fatal(err)
	}
	for from, to := range map[string]string{c.CAFile(): "ca.crt", saPub: "sa.pub", saKey: "sa.key", crt: "apiserver.crt", key: "apiserver.key"} {
		copyFile(t, from, filepath.Join(cfg.PKIDir, to), 0o600)
	}
	tmpl, err := yaml.Marshal(apiServerTemplate(n, cfg.PKIDir))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, cfg.APIServerTemplate, tmpl, 0o600)

	h := &host{n: n, cfg: cfg, act: actuator.NewStaticPod(actuator.APIMirrorPods{Reader: c.Client}, cfg)}
	if why, err := h.act.NotProvisioned(); err != nil || why != "" {
		t.Fatalf("the host is not provisioned: %q %v", why, err)
	}
	return h
}

// apiServerTemplate is the operator's kube-apiserver manifest for the
// node, kubeadm's shape: host network, the node's address, its local etcd
// member, the PKI directory mounted read-only, and ready once /readyz says
// so (its etcd included). The cluster's members serve plain HTTP
// (test/cluster), so its etcd is http://127.0.0.1:2379 where kubeadm's is
// HTTPS with apiserver-etcd-client.crt. It reconciles no endpoints: the
// kubernetes Service stays the hub's apiserver, which the pods reach.
func apiServerTemplate(n *cluster.Node, pki string) *corev1.Pod {
	f := func(name string) string { return filepath.Join(pki, name) }
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver", Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{"component": "kube-apiserver", "tier": "control-plane"}},
		Spec: corev1.PodSpec{
			HostNetwork:       true,
			PriorityClassName: "system-node-critical",
			Containers: []corev1.Container{{
				Name: "kube-apiserver", Image: apiServerImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"kube-apiserver",
					"--etcd-servers=" + cluster.LocalEtcdURL,
					"--bind-address=" + n.IP, "--advertise-address=" + n.IP, fmt.Sprintf("--secure-port=%d", apiServerPort),
					"--tls-cert-file=" + f("apiserver.crt"), "--tls-private-key-file=" + f("apiserver.key"),
					"--client-ca-file=" + f("ca.crt"),
					"--service-account-issuer=https://kubernetes.default.svc",
					"--service-account-key-file=" + f("sa.pub"), "--service-account-signing-key-file=" + f("sa.key"),
					"--service-cluster-ip-range=" + cluster.ServiceCIDR,
					"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
					"--endpoint-reconciler-type=none", "--profiling=false", "--v=1"},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: n.IP, Port: intstr.FromInt32(apiServerPort),
						Path: "/readyz", Scheme: corev1.URISchemeHTTPS}},
					PeriodSeconds: 1, TimeoutSeconds: 5, FailureThreshold: 3,
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "k8s-certs", MountPath: pki, ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "k8s-certs", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: pki, Type: new(corev1.HostPathDirectory)}}}},
		},
	}
}

// drive carries out one actuator step as holdfast-node's role reconciler
// does: again after the RetryAfter it names while it waits for the
// kubelet, until it is done or fails. whileWaiting checks, at every wait,
// what must hold until the step is done.
func drive(t *testing.T, what string, within time.Duration, step func() error, whileWaiting func(wait error)) {
	t.Helper()
	start := time.Now()
	last := ""
	for {
		err := step()
		retry, waiting := actuator.IsWaiting(err)
		if !waiting {
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			t.Logf("%s done in %v", what, time.Since(start).Round(time.Millisecond))
			return
		}
		if err.Error() != last {
			last = err.Error()
			t.Logf("%s: %s", what, last)
		}
		if whileWaiting != nil {
			whileWaiting(err)
		}
		if time.Since(start) > within {
			t.Fatalf("%s: still waiting after %v: %v", what, within, err)
		}
		time.Sleep(retry)
	}
}

// mirror is the kubelet's mirror pod of the node's static pod name (nil
// when there is none), read past any cache.
func (h *host) mirror(t *testing.T, c *cluster.Cluster, name string) *corev1.Pod {
	t.Helper()
	p, err := actuator.APIMirrorPods{Reader: c.Client}.MirrorPod(context.Background(), metav1.NamespaceSystem, name+"-"+h.n.Name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runningReady says whether p is a mirror pod Running and Ready that runs
// the manifest now in the manifests directory (its hash), and if not,
// what it is.
func (h *host) runningReady(t *testing.T, p *corev1.Pod, manifest string) (bool, string) {
	t.Helper()
	if p == nil {
		return false, "no mirror pod"
	}
	b, err := os.ReadFile(filepath.Join(h.cfg.ManifestsDir, manifest))
	if err != nil {
		return false, err.Error()
	}
	written := &corev1.Pod{}
	if err := yaml.Unmarshal(b, written); err != nil {
		t.Fatalf("%s: %v", manifest, err)
	}
	ready := false
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	state := fmt.Sprintf("%s, ready %v, hash %q (the manifest's %q), mirror %q", p.Status.Phase, ready,
		p.Annotations[actuator.AnnotationManifestHash], written.Annotations[actuator.AnnotationManifestHash], p.Annotations["kubernetes.io/config.mirror"])
	return p.Status.Phase == corev1.PodRunning && ready && p.Annotations["kubernetes.io/config.mirror"] != "" &&
		p.Annotations[actuator.AnnotationManifestHash] == written.Annotations[actuator.AnnotationManifestHash], state
}

// running counts the node's running containers of its static pod name,
// as its CRI reports them.
func (h *host) running(t *testing.T, name, container string) int {
	t.Helper()
	n, err := h.n.RunningContainers(context.Background(), metav1.NamespaceSystem, name+"-"+h.n.Name, container)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (h *host) manifestExists(t *testing.T, name string) bool {
	t.Helper()
	return exists(t, filepath.Join(h.cfg.ManifestsDir, name))
}

func exists(t *testing.T, p string) bool {
	t.Helper()
	_, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

func writeFile(t *testing.T, p string, b []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, mode); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, to, b, mode)
}
