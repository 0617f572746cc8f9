package chart

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The node plugin's DaemonSet mounts only what its enabled features use:
// with voter swaps off (controller.voters.enabled false) the host paths are
// exactly the fence agent's CRI socket and the fence audit's own directory
// (node.hostDir/fence: the audit of runtimes stopped while the apiserver was
// away must outlive the pod, docs/operations.md), not node.hostDir itself
// (the role file and tombstone the host's units read), no systemd
// directory, D-Bus socket, k3s server directory or etcd TLS, and the plugin
// is told --voter-swaps=false; with them on, every voter-swap mount of the
// node.actuator's layout is there and --voter-swaps=true: for Systemd the
// systemd directory (--systemd-dir), the D-Bus socket (and its address in
// the environment), the member data's parent and the etcd TLS directory
// read-only; for StaticPod (kubeadm) exactly the directories the static pod
// actuator touches, at the VoterPolicy's paths node.staticPod repeats: the
// kubelet's manifests and the PKI directory read-write, the apiserver
// template's directory read-only, the member data directory's parent
// read-write, the directory of the kubelet's kubeconfig read-only (the
// file itself passed as --kubelet-kubeconfig), and nothing of systemd or
// D-Bus.
func TestTheNodePluginMountsOnlyWhatItsFeaturesUse(t *testing.T) {
	ch, err := Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	cri, hostDir := "/run/containerd/containerd.sock", "/var/lib/holdfast"
	tlsDir := map[string]any{"etcd": map[string]any{"hostTLSDir": "/etc/etcd-tls"}}
	for _, tc := range []struct {
		name   string
		voters bool
		node   map[string]any
		// rw and ro are the host paths mounted read-write and read-only.
		rw, ro  []string
		systemd bool // --systemd-dir and the D-Bus address are passed
		// actuator is the --actuator passed, the one holdfast-node runs
		// while no VoterPolicy exists: the chart's, whose paths it mounts.
		actuator string
		// kubeconfig is the --kubelet-kubeconfig passed ("": none).
		kubeconfig string
	}{
		{name: "voter swaps off", node: tlsDir, rw: []string{cri}},
		{name: "voter swaps on, Systemd", voters: true, node: tlsDir, systemd: true, actuator: "Systemd",
			rw: []string{cri, hostDir, "/etc/systemd/system", "/run/dbus/system_bus_socket", "/var/lib/rancher/k3s/server"}, ro: []string{"/etc/etcd-tls"}},
		{name: "voter swaps on, StaticPod at kubeadm's paths", voters: true, node: map[string]any{"actuator": "StaticPod"}, actuator: "StaticPod",
			kubeconfig: "/etc/kubernetes/kubelet.conf",
			rw:         []string{cri, hostDir, "/etc/kubernetes/manifests", "/etc/kubernetes/pki", "/var/lib"}, ro: []string{"/etc/kubernetes/holdfast", "/etc/kubernetes"}},
		{name: "voter swaps on, StaticPod at the policy's own paths", voters: true, actuator: "StaticPod", node: map[string]any{"actuator": "StaticPod",
			"staticPod": map[string]any{"manifestsDir": "/srv/kubelet/manifests/", "pkiDir": "/srv/pki", "apiServerTemplate": "/srv/templates/apiserver.yaml",
				"memberDataDir": "/data/etcd/member/"},
			"kubeletKubeconfig": "/srv/kubelet/kubeconfig",
			"etcd":              map[string]any{"caFile": "/srv/pki/etcd/ca.crt", "certFile": "/srv/pki/etcd/client.crt", "keyFile": "/srv/pki/etcd/client.key"}},
			kubeconfig: "/srv/kubelet/kubeconfig",
			rw:         []string{cri, hostDir, "/srv/kubelet/manifests", "/srv/pki", "/data/etcd"}, ro: []string{"/srv/templates", "/srv/kubelet"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms, _, err := Render(ch, map[string]any{"node": tc.node,
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
			var rw, ro []string
			c := pod.Containers[0]
			for _, m := range c.VolumeMounts {
				if p, ok := vols[m.Name]; ok {
					if m.ReadOnly {
						ro = append(ro, p)
					} else {
						rw = append(rw, p)
					}
					if m.MountPath != p {
						t.Errorf("host path %s mounted at %s; the plugin's flags name host paths", p, m.MountPath)
					}
				}
			}
			sorted := func(s []string) []string { return slices.Sorted(slices.Values(s)) }
			if want := sorted(append(slices.Clone(tc.rw), tc.ro...)); !slices.Equal(sorted(paths), want) {
				t.Errorf("hostPath volumes %v; want %v", sorted(paths), want)
			}
			if !slices.Equal(sorted(rw), sorted(tc.rw)) || !slices.Equal(sorted(ro), sorted(tc.ro)) {
				t.Errorf("host paths mounted read-write %v, read-only %v; want %v, %v", sorted(rw), sorted(ro), sorted(tc.rw), sorted(tc.ro))
			}
			flag := "--voter-swaps=false"
			if tc.voters {
				flag = "--voter-swaps=true"
			}
			if !slices.Contains(c.Args, flag) {
				t.Errorf("args %v lack %s", c.Args, flag)
			}
			if !slices.Contains(c.Args, "--host-dir=/var/lib/holdfast") {
				t.Errorf("args %v lack --host-dir=/var/lib/holdfast (the fence audit is under it)", c.Args)
			}
			var actuator []string
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(a, "--actuator="); ok {
					actuator = append(actuator, v)
				}
			}
			if want := []string{tc.actuator}; tc.actuator == "" && len(actuator) > 0 || tc.actuator != "" && !slices.Equal(actuator, want) {
				t.Errorf("--actuator passed %q; want %q (none with voter swaps off)", actuator, tc.actuator)
			}
			var kubeconfig []string
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(a, "--kubelet-kubeconfig="); ok {
					kubeconfig = append(kubeconfig, v)
				}
			}
			if want := []string{tc.kubeconfig}; tc.kubeconfig == "" && len(kubeconfig) > 0 || tc.kubeconfig != "" && !slices.Equal(kubeconfig, want) {
				t.Errorf("--kubelet-kubeconfig passed %q; want %q (only with StaticPod)", kubeconfig, tc.kubeconfig)
			}
			systemdDir := slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--systemd-dir=") })
			dbusEnv := slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "DBUS_SYSTEM_BUS_ADDRESS" })
			if systemdDir != tc.systemd || dbusEnv != tc.systemd {
				t.Errorf("--systemd-dir passed: %v, DBUS_SYSTEM_BUS_ADDRESS set: %v; want %v", systemdDir, dbusEnv, tc.systemd)
			}
			// The fence audit (and its queue of Events not yet posted) has a
			// writable directory in either mode: the host's with voter swaps,
			// the pod's own emptyDir without.
			if !tc.voters {
				audit := ""
				for _, m := range c.VolumeMounts {
					if m.MountPath == "/var/lib/holdfast/fence" && !m.ReadOnly {
						audit = m.Name
					}
				}
				if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == audit && v.EmptyDir != nil }) {
					t.Errorf("no emptyDir mounted writable at /var/lib/holdfast/fence for the fence audit: mounts %+v", c.VolumeMounts)
				}
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

// Each privilege holdfast-node has, per mode, is the set docs/operations.md
// and values.yaml name with their reasons, and no more: uid 0 on the host
// network in both modes, never privileged, no host PID or IPC, no privilege
// escalation; no capabilities with voter swaps off (uid 0 owns the CRI
// socket and its own emptyDir), CHOWN, DAC_OVERRIDE and FOWNER
// with them; and RBAC to watch and patch Nodes, watch Units and create
// Events only with voter swaps off, plus a Node read past the cache,
// VoterPolicies, VoterSwaps and the swap Lease with them, and with the
// StaticPod actuator the kube-system pods by name (the kubelet's mirror
// pods of etcd and kube-apiserver).
func TestTheNodePluginsPrivilegesFollowItsFeatures(t *testing.T) {
	ch, err := Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	common := []string{
		"watch nodes (ClusterRole/holdfast-node)", "patch nodes (ClusterRole/holdfast-node)",
		"watch units.holdfast.io (ClusterRole/holdfast-node)", "create events (ClusterRole/holdfast-node)",
		// The fence agent's cache of the warm standby pods on its node.
		"watch pods (ClusterRole/holdfast-node)",
	}
	voters := append(slices.Clone(common),
		"get nodes (ClusterRole/holdfast-node-voters)",
		"get voterpolicies.holdfast.io (ClusterRole/holdfast-node-voters)",
		"list voterswaps.holdfast.io (ClusterRole/holdfast-node-voters)",
		"watch voterswaps.holdfast.io (ClusterRole/holdfast-node-voters)",
		"get leases.coordination.k8s.io/holdfast-voter-swap in kube-system (Role/kube-system/holdfast-node-swap-lease)")
	swapCaps := []corev1.Capability{"CHOWN", "DAC_OVERRIDE", "FOWNER"}
	for _, tc := range []struct {
		name     string
		voters   bool
		actuator string
		caps     []corev1.Capability
		grants   []string
	}{
		{"voter swaps off", false, "Systemd", nil, common},
		{"voter swaps on, Systemd", true, "Systemd", swapCaps, voters},
		{"voter swaps on, StaticPod", true, "StaticPod", swapCaps, append(slices.Clone(voters),
			"get pods in kube-system (Role/kube-system/holdfast-node-mirror-pods)")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms, _, err := Render(ch, map[string]any{"controller": map[string]any{"voters": map[string]any{"enabled": tc.voters}},
				"node": map[string]any{"actuator": tc.actuator}})
			if err != nil {
				t.Fatal(err)
			}
			pod := nodePodSpec(t, ms)
			if !pod.HostNetwork || pod.HostPID || pod.HostIPC {
				t.Errorf("hostNetwork %v, hostPID %v, hostIPC %v; want the host network only", pod.HostNetwork, pod.HostPID, pod.HostIPC)
			}
			if len(pod.InitContainers) > 0 || len(pod.Containers) != 1 {
				t.Fatalf("%d init containers, %d containers; want the one node container", len(pod.InitContainers), len(pod.Containers))
			}
			if psc := pod.SecurityContext; psc == nil || psc.RunAsUser == nil || *psc.RunAsUser != 0 {
				t.Errorf("pod securityContext %+v; want runAsUser 0 (the CRI socket is root's)", psc)
			}
			sc := pod.Containers[0].SecurityContext
			if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil {
				t.Fatalf("container securityContext %+v; want not privileged, no escalation, read-only root, capabilities listed", sc)
			}
			if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("capabilities dropped %v; want ALL", sc.Capabilities.Drop)
			}
			if got := slices.Sorted(slices.Values(sc.Capabilities.Add)); !slices.Equal(got, tc.caps) {
				t.Errorf("capabilities added %v; want %v", got, tc.caps)
			}
			b, err := Grants(ms, Namespace, "holdfast-node")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, g := range b.Grants {
				got = append(got, g.String())
			}
			slices.Sort(got)
			if want := slices.Sorted(slices.Values(tc.grants)); !slices.Equal(got, want) {
				t.Errorf("holdfast-node may:\n  %s\nwant exactly:\n  %s", Describe(b.Grants), want)
			}
			if len(b.Foreign) > 0 || len(b.Wildcards) > 0 {
				t.Errorf("holdfast-node bound to roles the chart does not define %v, or wildcards %v", b.Foreign, b.Wildcards)
			}
		})
	}
}
