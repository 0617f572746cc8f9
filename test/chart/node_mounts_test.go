package chart

import (
	"encoding/json"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The node plugin's DaemonSet mounts only what its enabled features use:
// with voter swaps off (controller.voters.enabled false) the host paths are
// the fence agent's CRI socket and node.hostDir (role file, fence audit), no
// systemd directory, D-Bus socket, k3s server directory or etcd TLS, and the
// plugin is told --voter-swaps=false; with them on, every voter-swap mount is
// there and --voter-swaps=true.
func TestTheNodePluginMountsOnlyWhatItsFeaturesUse(t *testing.T) {
	ch, err := Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	node := map[string]any{"etcd": map[string]any{"hostTLSDir": "/etc/etcd-tls"}}
	voterPaths := []string{"/etc/systemd/system", "/run/dbus/system_bus_socket", "/var/lib/rancher/k3s/server", "/etc/etcd-tls"}
	for _, tc := range []struct {
		name   string
		voters bool
		paths  []string
	}{
		{"voter swaps off", false, []string{"/run/containerd/containerd.sock", "/var/lib/holdfast"}},
		{"voter swaps on", true, append([]string{"/run/containerd/containerd.sock", "/var/lib/holdfast"}, voterPaths...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms, _, err := Render(ch, map[string]any{"node": node,
				"controller": map[string]any{"voters": map[string]any{"enabled": tc.voters}}})
			if err != nil {
				t.Fatal(err)
			}
			pod := nodePodSpec(t, ms)
			vols := map[string]string{}
			var paths []string
			for _, v := range pod.Volumes {
				if v.HostPath != nil {
					vols[v.Name] = v.HostPath.Path
					paths = append(paths, v.HostPath.Path)
				}
			}
			var mounted []string
			c := pod.Containers[0]
			for _, m := range c.VolumeMounts {
				if p, ok := vols[m.Name]; ok {
					mounted = append(mounted, p)
				}
			}
			slices.Sort(paths)
			slices.Sort(mounted)
			want := slices.Sorted(slices.Values(tc.paths))
			if !slices.Equal(paths, want) {
				t.Errorf("hostPath volumes %v; want %v", paths, want)
			}
			if !slices.Equal(mounted, want) {
				t.Errorf("host paths mounted %v; want %v", mounted, want)
			}
			flag := "--voter-swaps=false"
			if tc.voters {
				flag = "--voter-swaps=true"
			}
			if !slices.Contains(c.Args, flag) {
				t.Errorf("args %v lack %s", c.Args, flag)
			}
			dbusEnv := slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "DBUS_SYSTEM_BUS_ADDRESS" })
			if dbusEnv != tc.voters {
				t.Errorf("DBUS_SYSTEM_BUS_ADDRESS set: %v; want %v", dbusEnv, tc.voters)
			}
		})
	}
}

func nodePodSpec(t *testing.T, ms []Manifest) corev1.PodSpec {
	t.Helper()
	for _, m := range ms {
		if m.Kind != "DaemonSet" || m.Name != "holdfast-node" {
			continue
		}
		spec, _ := m.Object["spec"].(map[string]any)
		data, err := json.Marshal(spec["template"])
		if err != nil {
			t.Fatal(err)
		}
		var tmpl corev1.PodTemplateSpec
		if err := json.Unmarshal(data, &tmpl); err != nil {
			t.Fatal(err)
		}
		return tmpl.Spec
	}
	t.Fatal("no holdfast-node DaemonSet rendered")
	return corev1.PodSpec{}
}
