package actuator

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// Static pod manifest files in the kubelet's manifests directory, kubeadm's
// names.
const (
	EtcdManifest      = "etcd.yaml"
	APIServerManifest = "kube-apiserver.yaml"
)

// AnnotationManifestHash on a static pod the actuator writes is the hash of
// the rest of the manifest: the kubelet copies it to the mirror pod, so the
// mirror pod read from the apiserver is known to run this manifest and not
// an earlier one.
const AnnotationManifestHash = "holdfast.io/manifest-hash"

// annotationConfigMirror marks a mirror pod (the kubelet's own annotation);
// an ordinary pod of the same name is not the static pod.
const annotationConfigMirror = "kubernetes.io/config.mirror"

// memberURLs are the local member's URLs, from its entry in the join.
type memberURLs struct {
	name   string
	peer   *url.URL
	ip     net.IP
	client string // advertised client URL
}

// selfInJoin finds the local member (named node) in a role-join value.
func selfInJoin(join, node string, clientPort int) (*memberURLs, error) {
	members, errs := holdfastv1.ParseRoleJoin(join)
	if len(errs) > 0 {
		return nil, &RefusedError{Reason: errs.ToAggregate().Error()}
	}
	peer, ok := members[node]
	if !ok {
		return nil, &RefusedError{Reason: fmt.Sprintf("metadata.annotations[%s]: names no member %q (this node), so its peer URL is unknown", holdfastv1.AnnotationRoleJoin, node)}
	}
	u, err := url.Parse(peer)
	if err != nil {
		return nil, &RefusedError{Reason: err.Error()}
	}
	m := &memberURLs{name: node, peer: u, ip: net.ParseIP(u.Hostname())}
	m.client = u.Scheme + "://" + net.JoinHostPort(u.Hostname(), strconv.Itoa(clientPort))
	return m, nil
}

// etcdPod is the etcd static pod of a member joining the existing cluster
// join names: initial-cluster-state existing always, so it never
// bootstraps a cluster of its own (the controller added it as a learner
// before the join was written). With a start condition, an init container
// runs it (the node plugin's binary on the host) before every start of
// etcd, as the systemd unit's ExecCondition does.
func (a *StaticPodActuator) etcdPod(join string, m *memberURLs) *corev1.Pod {
	c := a.cfg
	pki := func(f string) string { return filepath.Join(c.PKIDir, f) }
	// etcd listens on addresses: a peer URL by DNS name listens on all.
	listenHost := m.peer.Hostname()
	if m.ip == nil {
		listenHost = "0.0.0.0"
	}
	listenPeer := m.peer.Scheme + "://" + net.JoinHostPort(listenHost, m.peer.Port())
	clients := []string{m.peer.Scheme + "://" + net.JoinHostPort(listenHost, strconv.Itoa(c.ClientPort))}
	if local := m.peer.Scheme + "://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(c.ClientPort)); m.ip != nil && local != clients[0] {
		clients = append([]string{local}, clients...)
	}
	args := []string{
		"etcd",
		"--name=" + m.name,
		"--data-dir=" + c.State.MemberDataDir,
		"--initial-cluster=" + join,
		"--initial-cluster-state=existing",
		"--initial-advertise-peer-urls=" + m.peer.String(),
		"--listen-peer-urls=" + listenPeer,
		"--advertise-client-urls=" + m.client,
		"--listen-client-urls=" + strings.Join(clients, ","),
		"--listen-metrics-urls=http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(c.MetricsPort)),
	}
	if m.peer.Scheme == "https" {
		args = append(args,
			"--cert-file="+pki(EtcdServerCert), "--key-file="+pki(EtcdServerKey),
			"--client-cert-auth=true", "--trusted-ca-file="+pki(EtcdCACert),
			"--peer-cert-file="+pki(EtcdPeerCert), "--peer-key-file="+pki(EtcdPeerKey),
			"--peer-client-cert-auth=true", "--peer-trusted-ca-file="+pki(EtcdCACert))
	}
	hostPath := func(name, path string, t corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &t}}}
	}
	mount := func(name, path string, ro bool) corev1.VolumeMount {
		return corev1.VolumeMount{Name: name, MountPath: path, ReadOnly: ro}
	}
	probe := &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Host: "127.0.0.1", Port: intstr.FromInt32(int32(c.MetricsPort)), Path: "/health?serializable=true", Scheme: corev1.URISchemeHTTP}},
		PeriodSeconds: 2, TimeoutSeconds: 5, FailureThreshold: 60,
	}
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{"component": "etcd", "tier": "control-plane"}},
		Spec: corev1.PodSpec{
			HostNetwork:       true,
			PriorityClassName: "system-node-critical",
			Containers: []corev1.Container{{
				Name: "etcd", Image: c.EtcdImage, ImagePullPolicy: corev1.PullIfNotPresent, Command: args,
				VolumeMounts: []corev1.VolumeMount{mount("etcd-data", c.State.MemberDataDir, false), mount("etcd-certs", filepath.Join(c.PKIDir, "etcd"), true)},
				StartupProbe: probe,
			}},
			Volumes: []corev1.Volume{
				hostPath("etcd-data", c.State.MemberDataDir, corev1.HostPathDirectoryOrCreate),
				hostPath("etcd-certs", filepath.Join(c.PKIDir, "etcd"), corev1.HostPathDirectory),
			},
		},
	}
	if len(c.StartCondition) > 0 {
		// The condition reads the host state and may write a tombstone and
		// take the member lock there; it reads the member data (the
		// server's own tombstone) and the etcd client files. Moved-aside
		// data is known from the host state's record of it
		// (hoststate.MovedAsideFile), so the member data's parent, which
		// on kubeadm is /var/lib, stays out of the pod.
		pod.Spec.InitContainers = []corev1.Container{{
			Name: "holdfast-start-condition", Image: c.EtcdImage, ImagePullPolicy: corev1.PullIfNotPresent, Command: c.StartCondition,
			VolumeMounts: []corev1.VolumeMount{mount("holdfast-host", c.State.Dir, false), mount("etcd-data", c.State.MemberDataDir, true),
				mount("etcd-certs", filepath.Join(c.PKIDir, "etcd"), true)},
		}}
		pod.Spec.Volumes = append(pod.Spec.Volumes, hostPath("holdfast-host", c.State.Dir, corev1.HostPathDirectory))
	}
	return pod
}

// apiServerPod reads the operator's kube-apiserver manifest template.
func (a *StaticPodActuator) apiServerPod() (*corev1.Pod, error) {
	b, err := os.ReadFile(a.cfg.APIServerTemplate)
	if err != nil {
		return nil, err
	}
	pod := &corev1.Pod{}
	if err := yaml.UnmarshalStrict(b, pod); err != nil {
		return nil, fmt.Errorf("the kube-apiserver template %s: %w", a.cfg.APIServerTemplate, err)
	}
	if pod.Kind != "Pod" || pod.Name == "" || len(pod.Spec.Containers) == 0 {
		return nil, fmt.Errorf("the kube-apiserver template %s: must be a Pod with a name and a container", a.cfg.APIServerTemplate)
	}
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceSystem
	}
	return pod, nil
}

// manifestBody stamps pod with the hash of its content and renders it.
func manifestBody(pod *corev1.Pod) ([]byte, string, error) {
	p := pod.DeepCopy()
	delete(p.Annotations, AnnotationManifestHash)
	b, err := yaml.Marshal(p)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(b)
	hash := hex.EncodeToString(sum[:8])
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[AnnotationManifestHash] = hash
	b, err = yaml.Marshal(p)
	if err != nil {
		return nil, "", err
	}
	return append([]byte("# Written by holdfast-node; removed when the host is finished to an agent.\n"), b...), hash, nil
}

// mirrorName is the name of the mirror pod of pod on node.
func mirrorName(pod *corev1.Pod, node string) (namespace, name string) {
	return pod.Namespace, pod.Name + "-" + node
}
