package actuator

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
)

// TestNoEtcdManifestOnAHostWhoseFilesForbidAServer checks the one writer of
// the etcd manifest against each host guard, whatever its caller checked.
func TestNoEtcdManifestOnAHostWhoseFilesForbidAServer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(st hoststate.State) error
		want    string
	}{
		{"holdfast's tombstone", func(st hoststate.State) error {
			return st.SetTombstone(holdfastv1.Tombstone{MemberID: "a1", ClusterID: "c1"})
		}, "was removed from cluster c1"},
		{"the role file says agent", func(st hoststate.State) error { return st.SetRole(holdfastv1.RoleAgent) }, "says agent"},
		{"a former member with no join target", func(st hoststate.State) error {
			return os.MkdirAll(st.MovedAside(), 0o755)
		}, "would bootstrap a second cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			st := hoststate.State{Dir: filepath.Join(root, "holdfast"), MemberDataDir: filepath.Join(root, "etcd")}
			a := NewStaticPod(nil, StaticPodConfig{NodeName: "n", ManifestsDir: root, State: st})
			if err := tc.prepare(st); err != nil {
				t.Fatal(err)
			}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: "kube-system"}}
			_, err := a.writeEtcdManifest(pod)
			if !IsRefused(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want a refusal saying %q, got %v", tc.want, err)
			}
			if _, err := os.Stat(filepath.Join(root, EtcdManifest)); !os.IsNotExist(err) {
				t.Fatalf("the etcd manifest was written: %v", err)
			}
		})
	}
}
