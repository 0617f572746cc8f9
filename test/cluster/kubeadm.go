package cluster

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/holdfast-io/holdfast/internal/leasetls/leasetlstest"
	"github.com/holdfast-io/holdfast/node-plugin/actuator"
)

// Images of a kubeadm host's control-plane static pods, built from make
// k8s-bin's binaries (Image.K8sBinary), as registry.k8s.io's etcd and
// kube-apiserver images hold them.
const (
	EtcdImage      = "holdfast.test/etcd:e2e"
	APIServerImage = "holdfast.test/kube-apiserver:e2e"
	// NodeAPIServerPort is a kubeadm host's own kube-apiserver's port on
	// the node's address.
	NodeAPIServerPort = 6443
)

// KubeadmImages are the images a kubeadm host's static pods run.
func KubeadmImages() []Image {
	return []Image{{Ref: EtcdImage, K8sBinary: "etcd"}, {Ref: APIServerImage, K8sBinary: "kube-apiserver"}}
}

// Kubeadm is a kubeadm host's layout inside the node (the paths VoterPolicy
// spec.host.staticPod names, the same on every node) and as this process
// reaches it.
type Kubeadm struct {
	// ManifestsDir, PKIDir, APIServerTemplate and KubeletKubeconfig (the
	// kubelet's kubeconfig, kubeadm's kubelet.conf) are paths inside the
	// node (under NodeKubernetesDir).
	ManifestsDir, PKIDir, APIServerTemplate, KubeletKubeconfig string
	// Dir is NodeKubernetesDir as this process reaches it.
	Dir string
}

// NodeKubeletKubeconfig is a kubeadm host's kubelet kubeconfig inside the
// node (kubeadm's /etc/kubernetes/kubelet.conf).
var NodeKubeletKubeconfig = filepath.Join(NodeKubernetesDir, "kubelet.conf")

// KubeadmLayout is the kubeadm layout of a node with NodeSpec.StaticPods.
func (n *Node) KubeadmLayout() Kubeadm {
	return Kubeadm{ManifestsDir: filepath.Join(NodeKubernetesDir, "manifests"), PKIDir: filepath.Join(NodeKubernetesDir, "pki"),
		APIServerTemplate: filepath.Join(NodeKubernetesDir, "holdfast", "kube-apiserver.yaml"),
		KubeletKubeconfig: NodeKubeletKubeconfig, Dir: n.KubernetesDir()}
}

// Local is a path of the layout (inside the node) as this process reaches
// it.
func (k Kubeadm) Local(p string) string {
	rel, err := filepath.Rel(NodeKubernetesDir, p)
	if err != nil {
		return p
	}
	return filepath.Join(k.Dir, rel)
}

// ProvisionKubeadm lays out kubeadm's files in the node's KubernetesDir, as
// an operator provisions a control-plane-capable host: the cluster's etcd
// CA with its key (pki/etcd, one CA for every node), the files a joining
// control-plane node's kube-apiserver shares with the others (the cluster
// CA, the service account key pair) and its own serving certificate, and
// the kube-apiserver template. Repeating it changes nothing but the
// node's serving certificate.
func (c *Cluster) ProvisionKubeadm(n *Node) (Kubeadm, error) {
	k := n.KubeadmLayout()
	pki := k.Local(k.PKIDir)
	cert, key, err := c.etcdCA()
	if err != nil {
		return k, err
	}
	files := map[string][]byte{filepath.Join(pki, actuator.EtcdCACert): cert, filepath.Join(pki, actuator.EtcdCAKey): key}
	saPub, saKey, err := c.pki.serviceAccountKeys()
	if err != nil {
		return k, err
	}
	crt, crtKey, err := c.ServingCert("kube-apiserver-"+n.Name, n.IP)
	if err != nil {
		return k, err
	}
	for from, to := range map[string]string{c.CAFile(): "ca.crt", saPub: "sa.pub", saKey: "sa.key", crt: "apiserver.crt", crtKey: "apiserver.key"} {
		b, err := os.ReadFile(from)
		if err != nil {
			return k, err
		}
		files[filepath.Join(pki, to)] = b
	}
	tmpl, err := yaml.Marshal(apiServerTemplate(n, k.PKIDir))
	if err != nil {
		return k, err
	}
	files[k.Local(k.APIServerTemplate)] = tmpl
	for p, b := range files {
		if err := writeFile(p, b); err != nil {
			return k, err
		}
	}
	return k, os.MkdirAll(k.Local(k.ManifestsDir), 0o755)
}

func writeFile(p string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o600)
}

// etcdCA is the cluster's etcd CA (certificate and key PEM), made once:
// every kubeadm host of one cluster has the same. It is valid past the
// member certificates' renewal window, as a kubeadm CA is.
func (c *Cluster) etcdCA() (cert, key []byte, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.etcdCACert != nil {
		return c.etcdCACert, c.etcdCAKey, nil
	}
	_, caKey, caDER, err := leasetlstest.SelfSignedCA("etcd-ca", 90*24*time.Hour)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(caKey)
	if err != nil {
		return nil, nil, err
	}
	c.etcdCACert = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	c.etcdCAKey = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	return c.etcdCACert, c.etcdCAKey, nil
}

// apiServerTemplate is the operator's kube-apiserver manifest for the
// node, kubeadm's shape: host network, the node's address, its local etcd
// member, the PKI directory mounted read-only, and ready once /readyz says
// so (its etcd included). The cluster's members serve plain HTTP
// (etcd_nodes.go), so its etcd is http://127.0.0.1:2379 where kubeadm's is
// HTTPS with apiserver-etcd-client.crt. It reconciles no endpoints: the
// kubernetes Service stays the hub's apiserver, which the pods reach.
func apiServerTemplate(n *Node, pki string) *corev1.Pod {
	f := func(name string) string { return filepath.Join(pki, name) }
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver", Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{"component": "kube-apiserver", "tier": "control-plane"}},
		Spec: corev1.PodSpec{
			HostNetwork:       true,
			PriorityClassName: "system-node-critical",
			Containers: []corev1.Container{{
				Name: "kube-apiserver", Image: APIServerImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"kube-apiserver",
					"--etcd-servers=" + LocalEtcdURL,
					"--bind-address=" + n.IP, "--advertise-address=" + n.IP, fmt.Sprintf("--secure-port=%d", NodeAPIServerPort),
					"--tls-cert-file=" + f("apiserver.crt"), "--tls-private-key-file=" + f("apiserver.key"),
					"--client-ca-file=" + f("ca.crt"),
					"--service-account-issuer=https://kubernetes.default.svc",
					"--service-account-key-file=" + f("sa.pub"), "--service-account-signing-key-file=" + f("sa.key"),
					"--service-cluster-ip-range=" + ServiceCIDR,
					"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
					"--endpoint-reconciler-type=none", "--profiling=false", "--v=1"},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: n.IP, Port: intstr.FromInt32(NodeAPIServerPort),
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

// bootstrapEtcdManifest writes a first voter's etcd static pod, as kubeadm
// init and join write it before the kubelet starts: a member of the
// cluster initial names, bootstrapping it (initial-cluster-state new), its
// data in the host's member data directory, listening on the node's
// address and its loopback; the health endpoint on the metrics port is
// its startup probe, as the StaticPod actuator's manifest has it. The
// members serve plain HTTP (etcd_nodes.go): its TLS files are not used.
func (h *Host) bootstrapEtcdManifest(k Kubeadm) error {
	data := filepath.Join(NodeHostDir, "db", "db")
	dir := func(name, path string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path,
			Type: new(corev1.HostPathDirectoryOrCreate)}}}
	}
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{"component": "etcd", "tier": "control-plane"}},
		Spec: corev1.PodSpec{
			HostNetwork:       true,
			PriorityClassName: "system-node-critical",
			Containers: []corev1.Container{{
				Name: "etcd", Image: EtcdImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"etcd", "--name=" + h.Node, "--data-dir=" + data,
					"--initial-cluster=" + h.initial, "--initial-cluster-state=new", "--initial-cluster-token=hfe-" + h.n.c.ID,
					"--initial-advertise-peer-urls=" + h.PeerURL, "--listen-peer-urls=" + h.PeerURL,
					"--advertise-client-urls=" + h.ClientURL, "--listen-client-urls=" + LocalEtcdURL + "," + h.ClientURL,
					"--listen-metrics-urls=http://127.0.0.1:2381"},
				StartupProbe: &corev1.Probe{
					ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "127.0.0.1", Port: intstr.FromInt32(2381),
						Path: "/health?serializable=true", Scheme: corev1.URISchemeHTTP}},
					PeriodSeconds: 2, TimeoutSeconds: 5, FailureThreshold: 60,
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "etcd-data", MountPath: data}},
			}},
			Volumes: []corev1.Volume{dir("etcd-data", data)},
		},
	}
	b, err := yaml.Marshal(pod)
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(k.Local(k.ManifestsDir), actuator.EtcdManifest), b)
}

// staticPodMemberPID is the process ID of the node's etcd static pod's
// container (0 when none runs).
func (h *Host) staticPodMemberPID() int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pid, err := h.n.ContainerPID(ctx, metav1.NamespaceSystem, "etcd-"+h.Node, "etcd")
	if err != nil {
		return 0
	}
	return pid
}

// ServerState is the member's service as the host's process manager says:
// the server unit's ActiveState, or on a kubeadm host "active" while the
// etcd manifest is in the kubelet's manifests directory and its container
// runs, else "inactive".
func (h *Host) ServerState() string {
	if h.Kubeadm == nil {
		return h.Systemd.ActiveState(ServerUnit)
	}
	if _, err := os.Stat(filepath.Join(h.Kubeadm.Local(h.Kubeadm.ManifestsDir), actuator.EtcdManifest)); err != nil || h.MemberPID() == 0 {
		return "inactive"
	}
	return "active"
}

// AgentState is the worker's service: the agent unit's ActiveState, or on
// a kubeadm host the kubelet's ("active" while it runs: the kubelet is
// the worker).
func (h *Host) AgentState() string {
	if h.Kubeadm == nil {
		return h.Systemd.ActiveState(AgentUnit)
	}
	if h.n.kubelet == nil || h.n.kubelet.Exited() {
		return "inactive"
	}
	return "active"
}
