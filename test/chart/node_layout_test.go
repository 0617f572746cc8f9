package chart

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

var updateLayouts = flag.Bool("update-node-layouts", false, "rewrite testdata/node-daemonset from the chart as it renders now")

// TestTheStaticPodLayoutRefusesValuesThatCannotWork: values with which the
// static pod actuator, or the etcd pod's start condition, would miss a
// file, or holdfast-node would mount one directory over another, fail the
// render naming the value and the way out, before anything reaches a node.
func TestTheStaticPodLayoutRefusesValuesThatCannotWork(t *testing.T) {
	ch, err := Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, values string
		want         []string
	}{
		{"voter swaps off", "{controller: {voters: {enabled: false}}, node: {actuator: StaticPod}}", []string{"node.actuator: StaticPod", "controller.voters.enabled is false", "set controller.voters.enabled=true, or leave node.actuator Systemd"}},
		{"the Systemd layout's etcd TLS mount", "node: {actuator: StaticPod, etcd: {hostTLSDir: /etc/kubernetes/pki/etcd}}",
			[]string{"node.etcd.hostTLSDir: /etc/kubernetes/pki/etcd is for node.actuator Systemd", "leave it empty"}},
		{"an etcd client file the start condition cannot read", "node: {actuator: StaticPod, etcd: {certFile: /etc/etcd/client.crt}}",
			[]string{"node.etcd.certFile: /etc/etcd/client.crt is in none of the host directories the etcd pod's start condition mounts",
				"/etc/kubernetes/pki/etcd/, /var/lib/holdfast/, /var/lib/", "use kubeadm's files (/etc/kubernetes/pki/etcd/ca.crt"}},
		{"a sibling of the PKI directory's etcd directory", "node: {actuator: StaticPod, etcd: {keyFile: /etc/kubernetes/pki/etcd-client.key}}",
			[]string{"node.etcd.keyFile: /etc/kubernetes/pki/etcd-client.key is in none"}},
		{"the apiserver template among the kubelet's manifests", "node: {actuator: StaticPod, staticPod: {apiServerTemplate: /etc/kubernetes/manifests/holdfast-apiserver.yaml}}",
			[]string{"node.staticPod.apiServerTemplate: /etc/kubernetes/manifests/holdfast-apiserver.yaml is in node.staticPod.manifestsDir",
				"the kubelet would run the template itself", "keep it in a directory of its own"}},
		{"member data directly under /", "node: {actuator: StaticPod, staticPod: {memberDataDir: /etcd}}",
			[]string{"node.staticPod.memberDataDir: /etcd is directly under /", "one level below a directory of its own"}},
		{"the PKI directory as the host state directory", "node: {actuator: StaticPod, staticPod: {pkiDir: /var/lib/holdfast/}}",
			[]string{"node.hostDir and node.staticPod.pkiDir are both the host directory /var/lib/holdfast", "give each its own directory"}},
		{"the template beside the PKI", "node: {actuator: StaticPod, staticPod: {apiServerTemplate: /etc/kubernetes/pki/apiserver.yaml}}",
			[]string{"node.staticPod.pkiDir and the directory of node.staticPod.apiServerTemplate are both the host directory /etc/kubernetes/pki"}},
		{"the kubelet's kubeconfig among the kubelet's manifests", "node: {actuator: StaticPod, kubeletKubeconfig: /etc/kubernetes/manifests/kubelet.conf}",
			[]string{"node.staticPod.manifestsDir and the directory of node.kubeletKubeconfig are both the host directory /etc/kubernetes/manifests", "give each its own directory"}},
		// values.schema.json, before any template.
		{"an actuator the policy does not know", "node: {actuator: Kubeadm}", []string{"/node/actuator", "must be one of 'Systemd', 'StaticPod'"}},
		{"a relative PKI directory", "node: {actuator: StaticPod, staticPod: {pkiDir: etc/kubernetes/pki}}", []string{"/node/staticPod/pkiDir", "^/"}},
		{"a relative member data directory", "node: {staticPod: {memberDataDir: var/lib/etcd}}", []string{"/node/staticPod/memberDataDir"}},
		{"a relative kubelet kubeconfig", "node: {actuator: StaticPod, kubeletKubeconfig: etc/kubernetes/kubelet.conf}", []string{"/node/kubeletKubeconfig"}},
		{"a directory as the kubelet kubeconfig", "node: {actuator: StaticPod, kubeletKubeconfig: /etc/kubernetes/}", []string{"/node/kubeletKubeconfig"}},
		{"a directory as the apiserver template", "node: {staticPod: {apiServerTemplate: /etc/kubernetes/holdfast/}}", []string{"/node/staticPod/apiServerTemplate"}},
		{"a key the policy does not have", "node: {staticPod: {etcdDataDir: /var/lib/etcd}}", []string{"/node/staticPod", "etcdDataDir"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v map[string]any
			if err := yaml.Unmarshal([]byte(tc.values), &v); err != nil {
				t.Fatal(err)
			}
			if _, ok := v["controller"]; !ok {
				v["controller"] = map[string]any{"voters": map[string]any{"enabled": true}}
			}
			_, _, err := Render(ch, v)
			if err == nil {
				t.Fatalf("values %q rendered; want a refusal", tc.values)
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("values %q: the refusal does not say %q:\n%v", tc.values, w, err)
				}
			}
		})
	}
}

// TestTheSystemdLayoutRendersAsBefore: the node DaemonSet of the Systemd
// layout (the default node.actuator) is byte for byte what the chart
// rendered before node.actuator existed (testdata/node-daemonset, rendered
// then by this test with -update-node-layouts), with voter swaps off, on,
// and on with every etcd setting; and naming the Systemd actuator changes
// nothing. The chart's and the image's version are replaced by VERSION and
// APP_VERSION, so a version bump alone changes no file.
func TestTheSystemdLayoutRendersAsBefore(t *testing.T) {
	etcd := map[string]any{"localEndpoint": "https://10.0.0.1:2379", "caFile": "/etc/etcd-tls/ca.crt", "certFile": "/etc/etcd-tls/client.crt",
		"keyFile": "/etc/etcd-tls/client.key", "hostTLSDir": "/etc/etcd-tls"}
	for _, tc := range []struct {
		file   string
		voters bool
		node   map[string]any
	}{
		{"voters-off.yaml", false, map[string]any{}},
		{"voters-on.yaml", true, map[string]any{}},
		{"voters-on-etcd-tls.yaml", true, map[string]any{"etcd": etcd, "memberDataParent": ""}},
	} {
		// values are the case's, with node.actuator when one is named.
		values := func(actuator string) map[string]any {
			node := map[string]any{}
			for k, v := range tc.node {
				node[k] = v
			}
			if actuator != "" {
				node["actuator"] = actuator
			}
			return map[string]any{"controller": map[string]any{"voters": map[string]any{"enabled": tc.voters}}, "node": node}
		}
		t.Run(tc.file, func(t *testing.T) {
			got := renderNodeDaemonSet(t, values(""))
			path := filepath.Join("testdata", "node-daemonset", tc.file)
			if *updateLayouts {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("the Systemd layout's node DaemonSet changed; rendered:\n%s\nwant (%s):\n%s", got, path, want)
			}
			if again := renderNodeDaemonSet(t, values("Systemd")); again != got {
				t.Errorf("node.actuator Systemd named explicitly renders another DaemonSet:\n%s", again)
			}
		})
	}
}

// renderNodeDaemonSet is the node DaemonSet's rendered text with the
// chart's version and appVersion replaced.
func renderNodeDaemonSet(t *testing.T, values map[string]any) string {
	t.Helper()
	ch, err := Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	ms, _, err := Render(ch, values)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Kind == "DaemonSet" && m.Name == "holdfast-node" {
			out := strings.ReplaceAll(m.YAML, "helm.sh/chart: holdfast-"+ch.Metadata.Version, "helm.sh/chart: holdfast-VERSION")
			return strings.ReplaceAll(out, ch.Metadata.AppVersion, "APP_VERSION") + "\n"
		}
	}
	t.Fatal("no holdfast-node DaemonSet rendered")
	return ""
}
