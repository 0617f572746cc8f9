// Package kindconfig checks the kind cluster configs of the kind demo with
// kind's own config API: kind cannot run on this project's machines (no
// Docker engine), so these checks are what holds the demo's assumptions.
package kindconfig

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	kindv1alpha4 "sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

const demoNode = "holdfast.io/demo-node"

// load reads a config strictly (an unknown field fails, as kind's own
// loader does) and applies kind's defaults.
func load(t *testing.T, path string) *kindv1alpha4.Cluster {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c kindv1alpha4.Cluster
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		t.Fatalf("%s is not a kind Cluster config: %v", path, err)
	}
	if c.Kind != "Cluster" || c.APIVersion != "kind.x-k8s.io/v1alpha4" {
		t.Fatalf("%s: %s %s, want kind.x-k8s.io/v1alpha4 Cluster", path, c.APIVersion, c.Kind)
	}
	kindv1alpha4.SetDefaultsCluster(&c)
	return &c
}

func configs(t *testing.T) []string {
	t.Helper()
	var out []string
	files, _ := filepath.Glob("*.yaml")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte("\nkind: Cluster\n")) {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	if len(out) < 2 {
		t.Fatalf("want cluster.yaml and laptop.yaml, found %v", out)
	}
	return out
}

// demoUnits are the Units kind-config/units.yaml creates.
func demoUnits(t *testing.T) map[string]*holdfastv1.Unit {
	t.Helper()
	data, err := os.ReadFile("units.yaml")
	if err != nil {
		t.Fatal(err)
	}
	units := map[string]*holdfastv1.Unit{}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var probe metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &probe); err != nil {
			t.Fatal(err)
		}
		if probe.Kind != "Unit" {
			continue
		}
		var u holdfastv1.Unit
		if err := yaml.UnmarshalStrict([]byte(doc), &u); err != nil {
			t.Fatalf("units.yaml: %v", err)
		}
		units[u.Name] = &u
	}
	return units
}

// The node counts and labels every story of the demo relies on.
func TestEveryConfigHasTheNodesTheDemoUses(t *testing.T) {
	units := demoUnits(t)
	kiln, press := units["kiln-1"], units["press-2"]
	if kiln == nil || press == nil || kiln.Spec.Availability.Mode != holdfastv1.Failover || press.Spec.Availability.Mode != holdfastv1.Autonomy {
		t.Fatalf("units.yaml must hold kiln-1 (Failover) and press-2 (Autonomy): %v", units)
	}
	targets, err := metav1.LabelSelectorAsSelector(kiln.Spec.Availability.Targets.Selector)
	if err != nil {
		t.Fatal(err)
	}
	wantControlPlanes := map[string]int{"cluster.yaml": 3, "laptop.yaml": 1}

	for _, f := range configs(t) {
		c := load(t, f)
		if c.Name != "holdfast" {
			t.Errorf("%s: cluster name %q; make kind-down deletes holdfast", f, c.Name)
		}
		byDemo := map[string]kindv1alpha4.Node{}
		roles := map[kindv1alpha4.NodeRole]int{}
		for i, n := range c.Nodes {
			roles[n.Role]++
			for k, v := range n.Labels {
				if errs := validation.IsQualifiedName(k); len(errs) > 0 {
					t.Errorf("%s: nodes[%d] label %q: %v", f, i, k, errs)
				}
				if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
					t.Errorf("%s: nodes[%d] label %s=%q: %v", f, i, k, v, errs)
				}
				// The kubelet may not set these itself (NodeRestriction);
				// the demo labels them with kubectl.
				if strings.Contains(k, "node-role.kubernetes.io") || k == holdfastv1.LabelDesiredRole || k == holdfastv1.LabelRole {
					t.Errorf("%s: nodes[%d] sets %s through the kubelet: the kubelet may not, and only holdfast sets it", f, i, k)
				}
			}
			name := n.Labels[demoNode]
			if _, dup := byDemo[name]; dup || name == "" {
				t.Errorf("%s: nodes[%d]: %s %q is missing or repeated", f, i, demoNode, name)
			}
			byDemo[name] = n
		}
		if want := wantControlPlanes[f]; want != 0 && roles[kindv1alpha4.ControlPlaneRole] != want {
			t.Errorf("%s: %d control-plane nodes, want %d", f, roles[kindv1alpha4.ControlPlaneRole], want)
		}
		if cp := roles[kindv1alpha4.ControlPlaneRole]; cp%2 == 0 {
			t.Errorf("%s: %d control-plane nodes: an even etcd voter count tolerates no more failures than one fewer", f, cp)
		}
		if roles[kindv1alpha4.WorkerRole] != 3 {
			t.Errorf("%s: %d workers, want the three edge workers (two primaries, one standby)", f, roles[kindv1alpha4.WorkerRole])
		}
		for i := 1; i <= roles[kindv1alpha4.ControlPlaneRole]; i++ {
			if n, ok := byDemo["cp-"+string(rune('0'+i))]; !ok || n.Role != kindv1alpha4.ControlPlaneRole {
				t.Errorf("%s: no control-plane node cp-%d", f, i)
			}
		}
		// Each unit's primary is exactly one worker, never the standby.
		for _, tc := range []struct {
			unit *holdfastv1.Unit
			node string
		}{{kiln, "edge-1"}, {press, "edge-2"}} {
			sel := labels.SelectorFromSet(tc.unit.Spec.NodeSelector)
			var matches []string
			for name, n := range byDemo {
				if sel.Matches(labels.Set(n.Labels)) {
					matches = append(matches, name)
				}
			}
			if len(matches) != 1 || matches[0] != tc.node || byDemo[tc.node].Role != kindv1alpha4.WorkerRole {
				t.Errorf("%s: unit %s's nodeSelector %v matches %v, want the worker %s alone", f, tc.unit.Name, tc.unit.Spec.NodeSelector, matches, tc.node)
			}
		}
		// kiln-1's failover targets are the standby alone, which may also vote.
		var standbys []string
		for name, n := range byDemo {
			if targets.Matches(labels.Set(n.Labels)) {
				standbys = append(standbys, name)
			}
		}
		sb := byDemo["standby-1"]
		if len(standbys) != 1 || standbys[0] != "standby-1" || sb.Role != kindv1alpha4.WorkerRole {
			t.Errorf("%s: kiln-1's targets select %v, want the worker standby-1 alone", f, standbys)
		}
		if sb.Labels[holdfastv1.LabelVoterEligible] != "true" {
			t.Errorf("%s: standby-1 must be %s=true for the swap story", f, holdfastv1.LabelVoterEligible)
		}
	}
}

// Every node demo.sh looks up by its demo name exists in every config.
func TestDemoScriptFindsItsNodes(t *testing.T) {
	script, err := os.ReadFile("demo.sh")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, m := range regexp.MustCompile(`\$\(node ([a-z0-9-]+)\)`).FindAllStringSubmatch(string(script), -1) {
		used[m[1]] = true
	}
	if len(used) < 3 {
		t.Fatalf("demo.sh looks up %v; expected edge-1, edge-2, standby-1 and cp-1", used)
	}
	for _, f := range configs(t) {
		c := load(t, f)
		have := map[string]bool{}
		for _, n := range c.Nodes {
			have[n.Labels[demoNode]] = true
		}
		for name := range used {
			if !have[name] {
				t.Errorf("%s has no node %s=%s, which demo.sh uses", f, demoNode, name)
			}
		}
	}
	if !strings.Contains(string(script), "kind-config/units.yaml") {
		t.Error("demo.sh does not apply kind-config/units.yaml")
	}
}

// The lease channel (docs/design.md §3 L12) gives each runtime pod its
// certificate through the PodCertificateRequest API and the CA in a
// ClusterTrustBundle, both on by default from Kubernetes 1.37: every node
// of every config runs at least that.
func TestEveryNodeRunsAKubernetesWithPodCertificates(t *testing.T) {
	version := regexp.MustCompile(`^kindest/node:v1\.(\d+)\.`)
	for _, f := range configs(t) {
		for i, n := range load(t, f).Nodes {
			m := version.FindStringSubmatch(n.Image)
			if m == nil {
				t.Errorf("%s: nodes[%d] image %q is not a kindest/node:v1.N image", f, i, n.Image)
				continue
			}
			if minor, _ := strconv.Atoi(m[1]); minor < 37 {
				t.Errorf("%s: nodes[%d] image %q: Kubernetes 1.%d; the lease channel needs 1.37 (PodCertificateRequest, ClusterTrustBundle projection)", f, i, n.Image, minor)
			}
		}
	}
}
