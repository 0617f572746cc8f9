package actuator

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// DefaultKubeletKubeconfig is kubeadm's kubelet kubeconfig, whose server the
// StaticPod actuator judges.
const DefaultKubeletKubeconfig = "/etc/kubernetes/kubelet.conf"

// KubeletKubeconfigSetting is where an operator names the kubelet's
// kubeconfig for holdfast-node: the chart's value and the flag it sets.
const KubeletKubeconfigSetting = "the chart's node.kubeletKubeconfig (holdfast-node --kubelet-kubeconfig)"

// defaultSecurePort is kube-apiserver's --secure-port when a manifest does
// not set it.
const defaultSecurePort = "6443"

// manifestAt is a kube-apiserver manifest and the file it is read from.
type manifestAt struct {
	file string
	pod  *corev1.Pod
}

// kubeletStranded judges the kubelet's kubeconfig at path (its bytes conf,
// or readErr reading them) against this node's own kube-apiserver, as the
// manifests in apiservers (the running one first, then the operator's
// template) and node's name say where it listens: "" when the kubelet
// reaches another apiserver, else why a step-down would strand the kubelet
// and what to do. A step-down removes this node's kube-apiserver; a kubelet
// that talks only to it then reaches none, cannot delete the mirror pods
// the swap waits for, and its Node goes NotReady with the member still
// voting.
//
// The server is this node's apiserver when its port is one the manifests'
// --secure-port names (6443 when unset) and its host is a loopback address,
// localhost, the node's name or a manifest's --advertise-address. Another
// port on this host is a local proxy, which outlives the apiserver; any
// other name or address is taken for the control-plane endpoint (a virtual
// IP this host holds now moves once its apiserver stops).
func kubeletStranded(path string, conf []byte, readErr error, node string, apiservers []manifestAt) string {
	if errors.Is(readErr, fs.ErrNotExist) {
		return fmt.Sprintf("the kubelet's kubeconfig %s does not exist, so holdfast cannot tell whether the kubelet reaches only this node's kube-apiserver, which a step-down removes: set %s to the kubelet's --kubeconfig file",
			path, KubeletKubeconfigSetting)
	}
	if readErr != nil {
		return fmt.Sprintf("the kubelet's kubeconfig %s cannot be read (%v), so holdfast cannot tell which kube-apiserver the kubelet reaches: let holdfast-node read it, or set %s to the kubelet's --kubeconfig file",
			path, readErr, KubeletKubeconfigSetting)
	}
	server, err := kubeconfigServer(conf)
	if err != nil {
		return fmt.Sprintf("the kubelet's kubeconfig %s: %v; set %s to the kubelet's --kubeconfig file", path, err, KubeletKubeconfigSetting)
	}
	u, err := url.Parse(server)
	if err != nil || u.Hostname() == "" {
		return fmt.Sprintf("the kubelet's kubeconfig %s: server %q is not a URL with a host; %s", path, server, strandedFix)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "443"
	}
	own := ""
	listens := map[string]bool{}
	for _, m := range apiservers {
		adv, p := apiServerListens(m.pod)
		listens[p] = true
		if own == "" && p == port && adv != "" && sameHost(host, adv) {
			own = "the --advertise-address of " + m.file
		}
	}
	if len(apiservers) == 0 {
		listens[defaultSecurePort] = true
	}
	if ip := net.ParseIP(host); own == "" && listens[port] {
		switch {
		case ip != nil && ip.IsLoopback():
			own = "a loopback address"
		case strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost"):
			own = "localhost"
		case node != "" && strings.EqualFold(host, node):
			own = "this node's name"
		}
	}
	if own == "" {
		return ""
	}
	return fmt.Sprintf("the kubelet's kubeconfig %s points at %s, this node's own kube-apiserver (%s): once %s; %s",
		path, server, own, strandedWhy, strandedFix)
}

// What kubeletStranded says of a kubelet that reaches only this node's
// kube-apiserver, and its remedy.
const (
	strandedWhy = "a step-down removes that kube-apiserver, the kubelet reaches none: it cannot delete the mirror pods the swap waits for, " +
		"and its Node goes NotReady with the member still voting"
	strandedFix = "point its server: at the control-plane endpoint (a load balancer or DNS name in front of every kube-apiserver) and restart the kubelet"
)

// kubeconfigServer is the server of a kubeconfig's current context's
// cluster.
func kubeconfigServer(conf []byte) (string, error) {
	cfg, err := clientcmd.Load(conf)
	if err != nil {
		return "", fmt.Errorf("not a kubeconfig (%v)", err)
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if cfg.CurrentContext == "" || !ok {
		return "", fmt.Errorf("current-context %q names no context", cfg.CurrentContext)
	}
	cl, ok := cfg.Clusters[ctx.Cluster]
	if !ok || cl.Server == "" {
		return "", fmt.Errorf("context %q names cluster %q, which has no server", cfg.CurrentContext, ctx.Cluster)
	}
	return cl.Server, nil
}

// apiServerListens is a kube-apiserver manifest's --advertise-address
// ("" when unset) and --secure-port (6443 when unset), from any container's
// command and args, as --flag=value or --flag value.
func apiServerListens(pod *corev1.Pod) (advertise, port string) {
	port = defaultSecurePort
	for _, c := range pod.Spec.Containers {
		argv := append(slices.Clone(c.Command), c.Args...)
		for i, a := range argv {
			for flag, v := range map[string]*string{"--advertise-address": &advertise, "--secure-port": &port} {
				if val, ok := strings.CutPrefix(a, flag+"="); ok {
					*v = val
				} else if a == flag && i+1 < len(argv) {
					*v = argv[i+1]
				}
			}
		}
	}
	return advertise, port
}

// sameHost compares a URL's host with an address: as IPs when both are
// (::1 and 0:0:0:0:0:0:0:1 are one), else as names.
func sameHost(host, addr string) bool {
	a, b := net.ParseIP(host), net.ParseIP(addr)
	if a != nil && b != nil {
		return a.Equal(b)
	}
	return strings.EqualFold(host, addr)
}

// kubeletNotProvisioned reads what kubeletStranded judges: the kubelet's
// kubeconfig and this node's kube-apiserver manifests (the one the kubelet
// runs, when there is one, and the operator's template). A manifest that
// does not parse says nothing of where the apiserver listens, so the host
// is not judged provisioned by it.
func (a *StaticPodActuator) kubeletNotProvisioned() (string, error) {
	var pods []manifestAt
	for _, p := range []string{a.manifest(APIServerManifest), a.cfg.APIServerTemplate} {
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return "", err
		}
		pod := &corev1.Pod{}
		if err := yaml.Unmarshal(b, pod); err != nil {
			return fmt.Sprintf("the kube-apiserver manifest %s is not a Pod (%v), so holdfast cannot tell where this node's kube-apiserver listens", p, err), nil
		}
		pods = append(pods, manifestAt{p, pod})
	}
	conf, err := os.ReadFile(a.cfg.KubeletKubeconfig)
	return kubeletStranded(a.cfg.KubeletKubeconfig, conf, err, a.cfg.NodeName, pods), nil
}
