package actuator

import (
	"fmt"
	"io/fs"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// kubeletConf is a kubelet's kubeconfig as kubeadm join writes it, its
// server at server.
func kubeletConf(server string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubernetes
  cluster:
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
    server: %s
contexts:
- name: system:node:cp-4@kubernetes
  context: {cluster: kubernetes, user: system:node:cp-4}
current-context: system:node:cp-4@kubernetes
users:
- name: system:node:cp-4
  user:
    client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem
    client-key: /var/lib/kubelet/pki/kubelet-client-current.pem
`, server)
}

// apiServerManifest is a kube-apiserver manifest as kubeadm writes it for
// a node at advertise, with extra flags appended.
func apiServerManifest(t *testing.T, advertise string, extra ...string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{}
	if err := yaml.Unmarshal([]byte(`apiVersion: v1
kind: Pod
metadata: {name: kube-apiserver, namespace: kube-system}
spec:
  containers:
  - name: kube-apiserver
    command: [kube-apiserver, --advertise-address=`+advertise+`, --allow-privileged=true, --secure-port=6443]
`), pod); err != nil {
		t.Fatal(err)
	}
	pod.Spec.Containers[0].Command = append(pod.Spec.Containers[0].Command, extra...)
	return pod
}

// TestTheKubeletMustReachAnotherAPIServerThanTheOneAStepDownRemoves judges
// a kubeadm host whose kubelet reaches the control-plane endpoint
// (provisioned), and that host changed one thing at a time.
func TestTheKubeletMustReachAnotherAPIServerThanTheOneAStepDownRemoves(t *testing.T) {
	const (
		path     = "/etc/kubernetes/kubelet.conf"
		template = "/etc/kubernetes/holdfast/kube-apiserver.yaml"
		running  = "/etc/kubernetes/manifests/kube-apiserver.yaml"
	)
	type host struct {
		conf    string
		readErr error
		// running and template are the manifests; nil: none.
		running, template *corev1.Pod
	}
	stranded := func(server, own string) []string {
		return []string{"the kubelet's kubeconfig " + path + " points at " + server + ", this node's own kube-apiserver (" + own + ")",
			"a step-down removes that kube-apiserver, the kubelet reaches none", "cannot delete the mirror pods the swap waits for",
			"point its server: at the control-plane endpoint", "restart the kubelet"}
	}
	for _, tc := range []struct {
		name   string
		mutate func(t *testing.T, h *host)
		// want are phrases of the reason; none: provisioned.
		want []string
	}{
		{"the control-plane endpoint", func(*testing.T, *host) {}, nil},
		{"this node's advertise address (kubeadm's own since 1.31)", func(_ *testing.T, h *host) { h.conf = kubeletConf("https://10.0.0.4:6443") },
			stranded("https://10.0.0.4:6443", "the --advertise-address of "+template)},
		{"the running manifest's advertise address", func(t *testing.T, h *host) {
			h.running = apiServerManifest(t, "192.168.7.4")
			h.conf = kubeletConf("https://192.168.7.4:6443")
		}, stranded("https://192.168.7.4:6443", "the --advertise-address of "+running)},
		{"the running manifest and the template at one address: the running one named", func(t *testing.T, h *host) {
			h.running = apiServerManifest(t, "10.0.0.4")
			h.conf = kubeletConf("https://10.0.0.4:6443")
		}, stranded("https://10.0.0.4:6443", "the --advertise-address of "+running)},
		{"the advertise address as two arguments, in args", func(t *testing.T, h *host) {
			p := apiServerManifest(t, "10.9.9.9")
			p.Spec.Containers[0].Args = []string{"--advertise-address", "10.0.0.40"}
			h.template = p
			h.conf = kubeletConf("https://10.0.0.40:6443")
		}, stranded("https://10.0.0.40:6443", "the --advertise-address of "+template)},
		{"an IPv6 advertise address written another way", func(t *testing.T, h *host) {
			h.template = apiServerManifest(t, "fd00:0:0:0:0:0:0:4")
			h.conf = kubeletConf("https://[fd00::4]:6443")
		}, stranded("https://[fd00::4]:6443", "the --advertise-address of "+template)},
		{"the loopback address", func(_ *testing.T, h *host) { h.conf = kubeletConf("https://127.0.0.1:6443") },
			stranded("https://127.0.0.1:6443", "a loopback address")},
		{"the IPv6 loopback address", func(_ *testing.T, h *host) { h.conf = kubeletConf("https://[::1]:6443") },
			stranded("https://[::1]:6443", "a loopback address")},
		{"localhost", func(_ *testing.T, h *host) { h.conf = kubeletConf("https://LocalHost:6443") },
			stranded("https://LocalHost:6443", "localhost")},
		{"this node's name", func(_ *testing.T, h *host) { h.conf = kubeletConf("https://cp-4:6443") },
			stranded("https://cp-4:6443", "this node's name")},
		{"the loopback address with no manifest at all: kube-apiserver's default port", func(_ *testing.T, h *host) {
			h.template = nil
			h.conf = kubeletConf("https://127.0.0.1:6443")
		}, stranded("https://127.0.0.1:6443", "a loopback address")},
		{"the advertise address at the apiserver's own secure port", func(t *testing.T, h *host) {
			h.template = apiServerManifest(t, "10.0.0.4", "--secure-port=8443")
			h.conf = kubeletConf("https://10.0.0.4:8443")
		}, stranded("https://10.0.0.4:8443", "the --advertise-address of "+template)},
		{"no port: https's", func(t *testing.T, h *host) {
			h.template = apiServerManifest(t, "10.0.0.4", "--secure-port=443")
			h.conf = kubeletConf("https://10.0.0.4")
		}, stranded("https://10.0.0.4", "the --advertise-address of "+template)},
		// A proxy on this host at another port outlives the apiserver.
		{"a local proxy on the loopback address", func(_ *testing.T, h *host) { h.conf = kubeletConf("https://127.0.0.1:8443") }, nil},
		{"a local proxy on the advertise address", func(_ *testing.T, h *host) { h.conf = kubeletConf("https://10.0.0.4:16443") }, nil},
		{"another node's address", func(_ *testing.T, h *host) { h.conf = kubeletConf("https://10.0.0.1:6443") }, nil},
		{"a virtual IP", func(_ *testing.T, h *host) { h.conf = kubeletConf("https://10.0.0.100:6443") }, nil},
		{"no kubeconfig at the path", func(_ *testing.T, h *host) { h.conf, h.readErr = "", fs.ErrNotExist }, []string{
			"the kubelet's kubeconfig " + path + " does not exist", "which a step-down removes",
			"set the chart's node.kubeletKubeconfig (holdfast-node --kubelet-kubeconfig) to the kubelet's --kubeconfig file"}},
		{"a kubeconfig holdfast-node may not read", func(_ *testing.T, h *host) { h.conf, h.readErr = "", fs.ErrPermission }, []string{
			"the kubelet's kubeconfig " + path + " cannot be read (permission denied)", "node.kubeletKubeconfig"}},
		{"not a kubeconfig", func(_ *testing.T, h *host) { h.conf = "clusters: [" }, []string{
			"the kubelet's kubeconfig " + path + ": not a kubeconfig", "node.kubeletKubeconfig"}},
		{"no current context", func(_ *testing.T, h *host) {
			h.conf = strings.Replace(h.conf, "current-context: system:node:cp-4@kubernetes", "current-context: other", 1)
		}, []string{`current-context "other" names no context`}},
		{"a cluster without a server", func(_ *testing.T, h *host) { h.conf = kubeletConf("") },
			[]string{`context "system:node:cp-4@kubernetes" names cluster "kubernetes", which has no server`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &host{conf: kubeletConf("https://cp.kubeadm.test:6443"), template: apiServerManifest(t, "10.0.0.4")}
			tc.mutate(t, h)
			var conf []byte
			if h.readErr == nil {
				conf = []byte(h.conf)
			}
			var pods []manifestAt
			for _, m := range []manifestAt{{running, h.running}, {template, h.template}} {
				if m.pod != nil {
					pods = append(pods, m)
				}
			}
			got := kubeletStranded(path, conf, h.readErr, "cp-4", pods)
			if len(tc.want) == 0 {
				if got != "" {
					t.Fatalf("judged not provisioned: %s", got)
				}
				return
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("the reason %q does not say %q", got, w)
				}
			}
		})
	}
}
