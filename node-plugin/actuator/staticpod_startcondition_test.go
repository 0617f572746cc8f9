package actuator_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/holdfast-io/holdfast/node-plugin/actuator"
)

// TestTheStartConditionMountsOnlyTheHostStateAndTheMemberData: the etcd
// pod's init container (the host's holdfast-node start-condition) sees the
// host state directory (read-write: it writes the tombstone and takes the
// member lock), the member data directory and the etcd client files, both
// read-only, and nothing else of the host: not the member data's parent
// (kubeadm's /var/lib, the kubelet's and the runtime's state).
func TestTheStartConditionMountsOnlyTheHostStateAndTheMemberData(t *testing.T) {
	h := newSPHost(t)
	h.cfg.StartCondition = []string{filepath.Join(h.cfg.State.Dir, "bin/holdfast-node"), "start-condition"}
	h.act = actuator.NewStaticPod(h.kubelet, h.cfg)
	_, err := h.act.Promote(context.Background(), spJoin)
	wantWaiting(t, err, "not published")
	b, err := os.ReadFile(h.manifest(actuator.EtcdManifest))
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	if err := yaml.UnmarshalStrict(b, pod); err != nil {
		t.Fatal(err)
	}
	if len(pod.Spec.InitContainers) != 1 {
		t.Fatalf("%d init containers, want the start condition", len(pod.Spec.InitContainers))
	}
	paths := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil {
			paths[v.Name] = v.HostPath.Path
		}
	}
	type mount struct {
		path string
		ro   bool
	}
	var got []mount
	for _, m := range pod.Spec.InitContainers[0].VolumeMounts {
		if m.MountPath != paths[m.Name] {
			t.Errorf("host path %q mounted at %s: the start condition's flags name host paths", paths[m.Name], m.MountPath)
		}
		got = append(got, mount{paths[m.Name], m.ReadOnly})
	}
	want := []mount{{h.cfg.State.Dir, false}, {h.cfg.State.MemberDataDir, true}, {filepath.Join(h.cfg.PKIDir, "etcd"), true}}
	cmp := func(a, b mount) int {
		if a.path < b.path {
			return -1
		}
		if a.path > b.path {
			return 1
		}
		return 0
	}
	slices.SortFunc(got, cmp)
	slices.SortFunc(want, cmp)
	if !slices.Equal(got, want) {
		t.Fatalf("the start condition mounts %+v; want %+v", got, want)
	}
	for name, p := range paths {
		if !slices.ContainsFunc(want, func(m mount) bool { return m.path == p }) {
			t.Errorf("the etcd pod has the host path %s (%s) that neither etcd nor its start condition needs", p, name)
		}
	}
}
