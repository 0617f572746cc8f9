//go:build e2e

package staticpod

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	nodeplugin "github.com/holdfast-io/holdfast/node-plugin"
	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/node-plugin/tombstone"
	"github.com/holdfast-io/holdfast/test/cluster"
)

// host is a kubeadm host as the operator provisions it for static pod
// members, and the actuator holdfast-node runs there.
type host struct {
	n   *cluster.Node
	cfg actuator.StaticPodConfig
	act *actuator.StaticPodActuator
}

// provision lays out kubeadm's files in the node's KubernetesDir, as an
// operator provisions a control-plane-capable host
// (cluster.ProvisionKubeadm). The actuator is configured as holdfast-node configures it (node-plugin's
// newStaticPodActuator): its host state in the node's holdfast host
// directory, kubeadm's etcd data directory, the mirror pods read from the
// apiserver past any cache, and the etcd pod's init container running
// holdfast-node's start condition from the copy of itself it keeps on the
// host.
func provision(t *testing.T, c *cluster.Cluster, n *cluster.Node) *host {
	t.Helper()
	k := n.KubeadmLayout()
	cfg := actuator.StaticPodConfig{
		NodeName:          n.Name,
		ManifestsDir:      k.Local(k.ManifestsDir),
		PKIDir:            k.Local(k.PKIDir),
		APIServerTemplate: k.Local(k.APIServerTemplate),
		KubeletKubeconfig: k.Local(k.KubeletKubeconfig),
		EtcdImage:         cluster.EtcdImage,
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

	if _, err := c.ProvisionKubeadm(n); err != nil {
		t.Fatal(err)
	}
	h := &host{n: n, cfg: cfg, act: actuator.NewStaticPod(actuator.APIMirrorPods{Reader: c.Client}, cfg)}
	if why, err := h.act.NotProvisioned(); err != nil || why != "" {
		t.Fatalf("the host is not provisioned: %q %v", why, err)
	}
	return h
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
