package kindconfig

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/dump"
	"k8s.io/client-go/tools/clientcmd"
	kubeadmapi "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm"
	kubeadmapiv1 "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm/v1beta4"
	kubeadmconstants "k8s.io/kubernetes/cmd/kubeadm/app/constants"
	certsphase "k8s.io/kubernetes/cmd/kubeadm/app/phases/certs"
	"k8s.io/kubernetes/cmd/kubeadm/app/phases/controlplane"
	kubeconfigphase "k8s.io/kubernetes/cmd/kubeadm/app/phases/kubeconfig"
	configutil "k8s.io/kubernetes/cmd/kubeadm/app/util/config"
	staticpodutil "k8s.io/kubernetes/cmd/kubeadm/app/util/staticpod"
	"sigs.k8s.io/yaml"

	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/test/chart"
)

// kindCluster is the ClusterConfiguration kind's kubeadm config template
// (sigs.k8s.io/kind pkg/cluster/internal/kubeadm, ConfigTemplateBetaV4)
// gives the demo's cluster: its name, control-plane endpoint (the load
// balancer's container), certificate SANs, the apiserver's runtime-config
// and kind's default subnets.
func kindCluster() *kubeadmapiv1.ClusterConfiguration {
	return &kubeadmapiv1.ClusterConfiguration{KubernetesVersion: chart.KubeVersion, ClusterName: "holdfast", ControlPlaneEndpoint: cpEndpoint,
		APIServer: kubeadmapiv1.APIServer{CertSANs: []string{"localhost", "127.0.0.1"},
			ControlPlaneComponent: kubeadmapiv1.ControlPlaneComponent{ExtraArgs: []kubeadmapiv1.Arg{{Name: "runtime-config", Value: ""}}}},
		Networking: kubeadmapiv1.Networking{PodSubnet: "10.244.0.0/16", ServiceSubnet: "10.96.0.0/16"}}
}

// kubeadmConfig is kubeadm's configuration of control-plane node name at ip.
func kubeadmConfig(t *testing.T, name, ip string) *kubeadmapi.InitConfiguration {
	t.Helper()
	cfg, err := configutil.DefaultedInitConfiguration(&kubeadmapiv1.InitConfiguration{
		LocalAPIEndpoint: kubeadmapiv1.APIEndpoint{AdvertiseAddress: ip, BindPort: 6443},
		NodeRegistration: kubeadmapiv1.NodeRegistrationOptions{Name: name, CRISocket: "unix:///run/containerd/containerd.sock"},
	}, kindCluster(), configutil.LoadOrDefaultConfigurationOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// kubeadmAPIServer is the kube-apiserver manifest kubeadm writes on
// control-plane node name at ip, as the file's bytes and as the Pod.
func kubeadmAPIServer(t *testing.T, name, ip string) ([]byte, corev1.Pod) {
	t.Helper()
	cfg := kubeadmConfig(t, name, ip)
	pod := controlplane.GetStaticPodSpecs(&cfg.ClusterConfiguration, &cfg.LocalAPIEndpoint, nil)["kube-apiserver"]
	dir := t.TempDir()
	if err := staticpodutil.WriteStaticPodToDisk("kube-apiserver", dir, pod); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "kube-apiserver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return b, pod
}

// The template demo.sh derives from cp-1's kube-apiserver.yaml is the
// manifest kubeadm would write on standby-1 itself: every node-specific
// address is standby-1's, nothing of cp-1's is left.
func TestTheAPIServerTemplateIsKubeadmsManifestAtTheStandby(t *testing.T) {
	cpManifest, _ := kubeadmAPIServer(t, cpName, cpIP)
	_, want := kubeadmAPIServer(t, standbyName, standbyIP)
	out, err := lib(t, cpManifest, "apiserver_template", cpIP, standbyIP)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), cpIP) {
		t.Errorf("the template still names %s:\n%s", cpIP, out)
	}
	var got corev1.Pod
	if err := yaml.UnmarshalStrict(out, &got); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("the template is not kubeadm's manifest at %s:\n%s\nwant:\n%s", standbyIP, dump.Pretty(got), dump.Pretty(want))
	}

	// A manifest of another node, or another address, is refused.
	for _, tc := range []struct{ from, to, why string }{
		{"172.18.0.9", standbyIP, "no --advertise-address=172.18.0.9"},
		{"172.18.0", standbyIP, "IPv4 node addresses"},
		{cpIP, "fc00:f853::7", "IPv4 node addresses"},
	} {
		if out, err := lib(t, cpManifest, "apiserver_template", tc.from, tc.to); err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("apiserver_template %s %s: %v, want a refusal saying %q\n%s", tc.from, tc.to, err, tc.why, out)
		}
	}
	// An address that is a prefix of another stays as it is.
	near := strings.ReplaceAll(string(cpManifest), "--secure-port=6443", "--secure-port=6443\n    - --bind-address="+cpIP+"0")
	out, err = lib(t, []byte(near), "apiserver_template", cpIP, standbyIP)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "--bind-address="+cpIP+"0") {
		t.Errorf("apiserver_template changed %s0:\n%s", cpIP, out)
	}
}

// standbyPKI lays out standby-1's PKI as demo.sh leaves it: kubeadm's
// certificates issued with the configuration kubeadm_certs_config writes
// from kind's ClusterConfiguration (the etcd and cluster CAs are copied
// from cp-1 there; here kubeadm makes them).
func standbyPKI(t *testing.T) (*kubeadmapi.InitConfiguration, string) {
	t.Helper()
	cluster, err := configutil.MarshalKubeadmConfigObject(&kubeadmConfig(t, cpName, cpIP).ClusterConfiguration, kubeadmapiv1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	out, err := lib(t, cluster, "kubeadm_certs_config", standbyName, standbyIP)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "holdfast-certs.yaml")
	if err := os.WriteFile(file, out, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := configutil.LoadInitConfigurationFromFile(file, configutil.LoadOrDefaultConfigurationOptions{})
	if err != nil {
		t.Fatalf("kubeadm refuses kubeadm_certs_config's output: %v\n%s", err, out)
	}
	cfg.CertificatesDir = filepath.Join(dir, "pki")
	if err := certsphase.CreatePKIAssets(cfg); err != nil {
		t.Fatal(err)
	}
	return cfg, cfg.CertificatesDir
}

// kubeadm reads the configuration demo.sh writes on standby-1 and issues
// an apiserver serving certificate the clients of standby-1's apiserver
// accept: at its address, by its node name, behind kind's load balancer
// and at the kubernetes Service's address.
func TestStandbysAPIServerCertificateIsKubeadmsForIt(t *testing.T) {
	cfg, pki := standbyPKI(t)
	if cfg.NodeRegistration.Name != standbyName || cfg.LocalAPIEndpoint.AdvertiseAddress != standbyIP || cfg.ControlPlaneEndpoint != cpEndpoint {
		t.Fatalf("kubeadm reads node %s at %s behind %s; want %s at %s behind %s", cfg.NodeRegistration.Name,
			cfg.LocalAPIEndpoint.AdvertiseAddress, cfg.ControlPlaneEndpoint, standbyName, standbyIP, cpEndpoint)
	}
	cert := readCert(t, filepath.Join(pki, "apiserver.crt"))
	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, filepath.Join(pki, "ca.crt")))
	for _, name := range []string{standbyIP, standbyName, strings.Split(cpEndpoint, ":")[0], "10.96.0.1", "kubernetes.default.svc", "localhost", "127.0.0.1"} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Errorf("standby-1's apiserver certificate is not valid for %s: %v", name, err)
		}
	}
	if err := cert.VerifyHostname(cpIP); err == nil {
		t.Errorf("standby-1's apiserver certificate is valid for cp-1's address %s", cpIP)
	}
	// Every file the template names is in the PKI kubeadm made, and the
	// actuator issues the etcd client pair.
	tmpl, _ := kubeadmAPIServer(t, standbyName, standbyIP)
	for _, m := range regexpPKI.FindAllString(string(tmpl), -1) {
		rel := strings.TrimPrefix(m, "/etc/kubernetes/pki/")
		if rel == actuator.APIServerEtcdClientCert || rel == actuator.APIServerEtcdClientKey {
			continue
		}
		if _, err := os.Stat(filepath.Join(pki, rel)); err != nil {
			t.Errorf("the template names %s, which standby-1's PKI lacks: %v", m, err)
		}
	}
	if _, err := lib(t, []byte("kind: Cluster\n"), "kubeadm_certs_config", standbyName, standbyIP); err == nil || !strings.Contains(err.Error(), "not a kubeadm ClusterConfiguration") {
		t.Errorf("kubeadm_certs_config of no ClusterConfiguration: %v", err)
	}
}

var regexpPKI = regexp.MustCompile(`/etc/kubernetes/pki/[a-z./-]+\.(crt|key|pub)`)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// mirrorPods stands in for the kubelet at the apiserver boundary: the
// manifests in dir, published as Running and Ready mirror pods.
type mirrorPods struct{ dir, node string }

func (k mirrorPods) MirrorPod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	entries, err := os.ReadDir(k.dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(k.dir, e.Name()))
		if err != nil {
			return nil, err
		}
		p := &corev1.Pod{}
		if err := yaml.Unmarshal(b, p); err != nil {
			return nil, err
		}
		if p.Namespace != ns || p.Name+"-"+k.node != name {
			continue
		}
		p.Name = name
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[corev1.MirrorPodAnnotationKey] = "mirror"
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		return p, nil
	}
	return nil, nil
}

// joined stands in for etcd's answers once standby-1's member has joined
// the cluster (actuator.Membership): etcd is not what this test checks.
type joined struct{}

func (joined) Local(context.Context) (hoststate.Member, error) {
	return hoststate.Member{ID: "a4", ClusterID: "c1"}, nil
}

func (joined) MemberNames(context.Context) (string, map[string]string, error) {
	return "c1", map[string]string{"a1": cpName, "a4": standbyName}, nil
}

// The StaticPod actuator promotes standby-1 laid out as demo.sh lays it
// out (kubeadm's PKI, the template derived from cp-1's manifest, VoterPolicy
// demo.sh's paths) and writes the template as standby-1's kube-apiserver
// manifest, unchanged but for its hash.
func TestTheActuatorPromotesTheProvisionedStandby(t *testing.T) {
	_, pki := standbyPKI(t)
	root := t.TempDir()
	cpManifest, _ := kubeadmAPIServer(t, cpName, cpIP)
	tmpl, err := lib(t, cpManifest, "apiserver_template", cpIP, standbyIP)
	if err != nil {
		t.Fatal(err)
	}
	cfg := actuator.StaticPodConfig{
		NodeName: standbyName, ManifestsDir: filepath.Join(root, "manifests"), PKIDir: pki,
		APIServerTemplate: filepath.Join(root, "holdfast", "kube-apiserver.yaml"), EtcdImage: "registry.k8s.io/etcd:3.6.5-0",
		State: hoststate.State{Dir: filepath.Join(root, "holdfast-host"), MemberDataDir: filepath.Join(root, "etcd")}, Timeout: time.Minute,
		Members: joined{}, KubeletKubeconfig: filepath.Join(root, "kubelet.conf"),
	}
	for _, d := range []string{cfg.ManifestsDir, filepath.Dir(cfg.APIServerTemplate)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(cfg.APIServerTemplate, tmpl, 0o644); err != nil {
		t.Fatal(err)
	}
	// standby-1 is a worker: kubeadm join points its kubelet at the
	// control-plane endpoint.
	if err := os.WriteFile(cfg.KubeletKubeconfig, workerKubeletConf(t), 0o600); err != nil {
		t.Fatal(err)
	}
	act := actuator.NewStaticPod(mirrorPods{dir: cfg.ManifestsDir, node: standbyName}, cfg)
	if why, err := act.NotProvisioned(); err != nil || why != "" {
		t.Fatalf("standby-1 as demo.sh provisions it is not provisioned: %q, %v", why, err)
	}
	join := cpName + "=https://" + net.JoinHostPort(cpIP, "2380") + "," + standbyName + "=https://" + net.JoinHostPort(standbyIP, "2380")
	if _, err := act.Promote(context.Background(), join); err != nil {
		t.Fatalf("promote: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(cfg.ManifestsDir, actuator.APIServerManifest))
	if err != nil {
		t.Fatal(err)
	}
	var got, want corev1.Pod
	if err := yaml.UnmarshalStrict(b, &got); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(tmpl, &want); err != nil {
		t.Fatal(err)
	}
	delete(got.Annotations, actuator.AnnotationManifestHash)
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("standby-1's kube-apiserver manifest is not the template:\n%s\nwant:\n%s", b, tmpl)
	}
	for _, f := range []string{actuator.APIServerEtcdClientCert, actuator.EtcdServerCert, actuator.EtcdPeerCert} {
		c := readCert(t, filepath.Join(pki, f))
		roots := x509.NewCertPool()
		roots.AddCert(readCert(t, filepath.Join(pki, actuator.EtcdCACert)))
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("%s is not issued by kubeadm's etcd CA: %v", f, err)
		}
	}
}

// demo.sh points each control-plane kubelet, whose kubeconfig kubeadm
// writes with its own apiserver as the server, at the control-plane
// endpoint it reads from kind's ClusterConfiguration, its credentials
// unchanged: the StaticPod actuator judges cp-1 not provisioned with
// kubeadm's kubelet.conf (a step-down would strand its kubelet) and
// provisioned with the one demo.sh writes.
func TestControlPlaneKubeletsAreMovedToTheLoadBalancer(t *testing.T) {
	cp := kubeadmConfig(t, cpName, cpIP)
	cluster, err := configutil.MarshalKubeadmConfigObject(&cp.ClusterConfiguration, kubeadmapiv1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := lib(t, cluster, "control_plane_endpoint")
	if err != nil || strings.TrimSpace(string(ep)) != cpEndpoint {
		t.Fatalf("control_plane_endpoint = %q, %v; want %s", ep, err, cpEndpoint)
	}
	single := cp.DeepCopy()
	single.ControlPlaneEndpoint = ""
	noLB, err := configutil.MarshalKubeadmConfigObject(&single.ClusterConfiguration, kubeadmapiv1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := lib(t, noLB, "control_plane_endpoint"); err == nil || !strings.Contains(err.Error(), "no load balancer") {
		t.Errorf("control_plane_endpoint without one: %q, %v", out, err)
	}

	// The kubelet's kubeconfig as kubeadm init writes it on a control-plane
	// node: its own apiserver, not the endpoint.
	_, pki := standbyPKI(t)
	single.CertificatesDir = pki
	dir := t.TempDir()
	if err := kubeconfigphase.CreateKubeConfigFile(kubeadmconstants.KubeletKubeConfigFileName, dir, single); err != nil {
		t.Fatal(err)
	}
	conf, err := os.ReadFile(filepath.Join(dir, kubeadmconstants.KubeletKubeConfigFileName))
	if err != nil {
		t.Fatal(err)
	}
	before, err := clientcmd.Load(conf)
	if err != nil {
		t.Fatal(err)
	}
	out, err := lib(t, conf, "kubelet_conf_at", cpEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	after, err := clientcmd.Load(out)
	if err != nil {
		t.Fatalf("kubelet_conf_at's output is no kubeconfig: %v\n%s", err, out)
	}
	for name, c := range after.Clusters {
		if c.Server != "https://"+cpEndpoint {
			t.Errorf("cluster %s: server %s, want https://%s", name, c.Server, cpEndpoint)
		}
		c.Server = before.Clusters[name].Server
	}
	if !equality.Semantic.DeepEqual(before, after) {
		t.Errorf("kubelet_conf_at changed more than the server:\n%s\nwas:\n%s", out, conf)
	}
	again, err := lib(t, out, "kubelet_conf_at", cpEndpoint)
	if err != nil || string(again) != string(out) {
		t.Errorf("kubelet_conf_at again changes the kubeconfig (demo.sh restarts the kubelet when it does): %v\n%s", err, again)
	}

	// cp-1 as kubeadm leaves it, its kube-apiserver running, judged by the
	// actuator before and after demo.sh moves its kubelet.
	cpManifest, _ := kubeadmAPIServer(t, cpName, cpIP)
	root := t.TempDir()
	cfg := actuator.StaticPodConfig{NodeName: cpName, ManifestsDir: filepath.Join(root, "manifests"), PKIDir: pki,
		APIServerTemplate: filepath.Join(root, "holdfast", "kube-apiserver.yaml"), KubeletKubeconfig: filepath.Join(root, "kubelet.conf"),
		EtcdImage: "registry.k8s.io/etcd:3.6.5-0", State: hoststate.State{Dir: filepath.Join(root, "holdfast-host"), MemberDataDir: filepath.Join(root, "etcd")}}
	for p, b := range map[string][]byte{filepath.Join(cfg.ManifestsDir, actuator.APIServerManifest): cpManifest, cfg.APIServerTemplate: cpManifest,
		cfg.KubeletKubeconfig: conf} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	act := actuator.NewStaticPod(mirrorPods{dir: cfg.ManifestsDir, node: cpName}, cfg)
	want := "points at https://" + cpIP + ":6443, this node's own kube-apiserver (the --advertise-address of " + filepath.Join(cfg.ManifestsDir, actuator.APIServerManifest) + ")"
	if why, err := act.NotProvisioned(); err != nil || !strings.Contains(why, want) {
		t.Errorf("cp-1 with kubeadm's kubelet.conf: not provisioned %q, %v; want it to say %q", why, err, want)
	}
	if err := os.WriteFile(cfg.KubeletKubeconfig, out, 0o600); err != nil {
		t.Fatal(err)
	}
	if why, err := act.NotProvisioned(); err != nil || why != "" {
		t.Errorf("cp-1 with the kubelet.conf demo.sh writes is not provisioned: %q, %v", why, err)
	}
}

// workerKubeletConf is a kubelet's kubeconfig as kubeadm writes it for a
// node whose kubelet reaches the cluster at kind's control-plane endpoint.
func workerKubeletConf(t *testing.T) []byte {
	t.Helper()
	cfg, pki := standbyPKI(t)
	cfg.CertificatesDir = pki
	dir := t.TempDir()
	if err := kubeconfigphase.CreateKubeConfigFile(kubeadmconstants.KubeletKubeConfigFileName, dir, cfg); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, kubeadmconstants.KubeletKubeConfigFileName))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "server: https://"+cpEndpoint) {
		t.Fatalf("kubeadm's kubelet.conf for standby-1 is not at %s:\n%s", cpEndpoint, b)
	}
	return b
}
