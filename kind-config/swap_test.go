package kindconfig

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/cli/values"
	"helm.sh/helm/v3/pkg/getter"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"sigs.k8s.io/yaml"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/chart"
)

// The kind demo's cluster as kubeadm sees it: the node demo.sh swaps out
// (cp-1, the first control-plane node kind names), standby-1 (its third
// worker), their kind addresses, and kind's control-plane endpoint.
const (
	cpName, cpIP           = "holdfast-control-plane", "172.18.0.3"
	standbyName, standbyIP = "holdfast-worker3", "172.18.0.7"
	cpEndpoint             = "holdfast-external-load-balancer:6443"
)

// lib runs a function of swap-lib.sh, as demo.sh calls it, with stdin.
func lib(t *testing.T, stdin []byte, fn string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{"-euo", "pipefail", "-c", `source ./swap-lib.sh; "$@"`, "bash", fn}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, &libError{err: err, stderr: stderr.String()}
	}
	return out, nil
}

type libError struct {
	err    error
	stderr string
}

func (e *libError) Error() string { return e.err.Error() + ": " + e.stderr }

// libList is a variable (or array) of swap-lib.sh, one value a line.
func libList(t *testing.T, name string) []string {
	t.Helper()
	out, err := lib(t, nil, "eval", `printf '%s\n' "${`+name+`[@]}"`)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))
}

// swapValues are the chart values of the swap story, merged as helm merges
// demo.sh's -f files.
func swapValues(t *testing.T) map[string]any {
	t.Helper()
	v, err := (&values.Options{ValueFiles: []string{"values.yaml", "values-swap.yaml"}}).MergeValues(getter.Providers{})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func str(t *testing.T, m map[string]any, path ...string) string {
	t.Helper()
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			t.Fatalf("values: %s is not a map", strings.Join(path, "."))
		}
		cur = mm[p]
	}
	s, ok := cur.(string)
	if !ok {
		t.Fatalf("values: %s = %v, not a string", strings.Join(path, "."), cur)
	}
	return s
}

// The chart renders with the swap story's values: holdfast-node runs the
// StaticPod actuator with kubeadm's directories, the paths demo.sh writes
// to are the ones it mounts, the images are those demo.sh loads, and
// holdfast's own pods cannot land on the node the swap drains.
func TestTheSwapValuesRenderTheStaticPodLayout(t *testing.T) {
	v := swapValues(t)
	ch, err := chart.Load("..")
	if err != nil {
		t.Fatal(err)
	}
	ms, _, err := chart.Render(ch, v)
	if err != nil {
		t.Fatalf("the chart refuses demo.sh's values: %v", err)
	}
	sp := func(k string) string { return str(t, v, "node", "staticPod", k) }
	if got := libList(t, "KUBEADM_PKI"); !slices.Equal(got, []string{sp("pkiDir")}) {
		t.Errorf("swap-lib.sh writes the PKI to %v, the values say %s", got, sp("pkiDir"))
	}
	if got := libList(t, "KUBEADM_MANIFESTS"); !slices.Equal(got, []string{sp("manifestsDir")}) {
		t.Errorf("swap-lib.sh's manifests directory is %v, the values say %s", got, sp("manifestsDir"))
	}
	if got := libList(t, "APISERVER_TEMPLATE"); !slices.Equal(got, []string{sp("apiServerTemplate")}) {
		t.Errorf("demo.sh writes the template to %v, the values say %s", got, sp("apiServerTemplate"))
	}
	var etcdFiles []string
	for _, f := range libList(t, "ETCD_CLIENT_PKI") {
		etcdFiles = append(etcdFiles, filepath.Join(sp("pkiDir"), f))
	}
	wantEtcd := []string{str(t, v, "node", "etcd", "caFile"), str(t, v, "node", "etcd", "certFile"), str(t, v, "node", "etcd", "keyFile")}
	if !slices.Equal(etcdFiles, wantEtcd) {
		t.Errorf("demo.sh copies %v to the workers; holdfast-node reads %v", etcdFiles, wantEtcd)
	}

	script, err := os.ReadFile("demo.sh")
	if err != nil {
		t.Fatal(err)
	}
	loop := regexp.MustCompile(`for img in ([a-z -]+); do`).FindSubmatch(script)
	if loop == nil {
		t.Fatal("demo.sh: no 'for img in ...' loop loading the images")
	}
	loaded := map[string]bool{}
	for _, img := range strings.Fields(string(loop[1])) {
		loaded[str(t, v, "image", "repository")+"/"+img+":"+str(t, v, "image", "tag")] = true
	}

	kindNodes := load(t, "cluster.yaml").Nodes
	var ds *appsv1.DaemonSet
	voters := false
	for _, m := range ms {
		var pod *corev1.PodTemplateSpec
		switch m.Kind {
		case "DaemonSet", "Deployment", "StatefulSet":
			var w struct {
				Spec struct {
					Template corev1.PodTemplateSpec `json:"template"`
				} `json:"spec"`
			}
			if err := yaml.Unmarshal([]byte(m.YAML), &w); err != nil {
				t.Fatal(err)
			}
			pod = &w.Spec.Template
		default:
			continue
		}
		for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
			if !loaded[c.Image] || c.ImagePullPolicy != corev1.PullNever {
				t.Errorf("%s %s runs %s (pull %s); demo.sh loads %v, never pulled", m.Kind, m.Name, c.Image, c.ImagePullPolicy, loaded)
			}
			if slices.Contains(c.Args, "--role=voters") {
				voters = true
			}
		}
		if m.Kind == "DaemonSet" && m.Name == "holdfast-node" {
			ds = &appsv1.DaemonSet{}
			if err := yaml.Unmarshal([]byte(m.YAML), ds); err != nil {
				t.Fatal(err)
			}
			continue
		}
		// The swap cordons and drains its incoming node first.
		p := &corev1.Pod{Spec: pod.Spec}
		for _, n := range kindNodes {
			node := &corev1.Node{}
			node.Labels = n.Labels
			ok, err := nodeaffinity.GetRequiredNodeAffinity(p).Match(node)
			if err != nil {
				t.Fatal(err)
			}
			if eligible := n.Labels[holdfastv1.LabelVoterEligible] == "true"; ok == eligible {
				t.Errorf("%s %s may run on %s: %v (voter-eligible: %v); holdfast's own pods stay off the node a swap drains", m.Kind, m.Name, n.Labels[demoNode], ok, eligible)
			}
		}
	}
	if !voters {
		t.Error("no controller runs --role=voters: the values do not turn voter swaps on")
	}
	if ds == nil {
		t.Fatal("no holdfast-node DaemonSet rendered")
	}
	c := ds.Spec.Template.Spec.Containers[0]
	for _, want := range []string{"--voter-swaps=true", "--etcd-ca=" + wantEtcd[0], "--etcd-cert=" + wantEtcd[1], "--etcd-key=" + wantEtcd[2]} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("holdfast-node's args lack %s: %q", want, c.Args)
		}
	}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--systemd-dir") {
			t.Errorf("holdfast-node runs the Systemd actuator's %s", a)
		}
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	hostPaths := map[string]bool{}
	for _, vol := range ds.Spec.Template.Spec.Volumes {
		if vol.HostPath == nil {
			continue
		}
		m, ok := mounts[vol.Name]
		if !ok || m.MountPath != vol.HostPath.Path {
			t.Errorf("host path %s is not mounted at its own path: %+v", vol.HostPath.Path, m)
		}
		hostPaths[vol.HostPath.Path] = !m.ReadOnly
		if strings.Contains(vol.HostPath.Path, "dbus") || strings.Contains(vol.HostPath.Path, "systemd") {
			t.Errorf("the StaticPod layout mounts %s", vol.HostPath.Path)
		}
	}
	for path, rw := range map[string]bool{sp("manifestsDir"): true, sp("pkiDir"): true, filepath.Dir(sp("apiServerTemplate")): false,
		filepath.Dir(sp("memberDataDir")): true} {
		if got, ok := hostPaths[path]; !ok || got != rw {
			t.Errorf("holdfast-node mounts %s: %v, read-write %v; want read-write %v (mounted host paths: %v)", path, ok, got, rw, hostPaths)
		}
	}
}

// The VoterPolicy demo.sh applies is a VoterPolicy, names the StaticPod
// actuator at the paths the chart mounts, and the Secret demo.sh creates.
func TestTheVoterPolicyAgreesWithTheValues(t *testing.T) {
	v := swapValues(t)
	endpoints := "https://172.18.0.2:2379,https://172.18.0.3:2379,https://172.18.0.4:2379"
	out, err := lib(t, nil, "voter_policy", endpoints, "registry.k8s.io/etcd:3.6.5-0", "3")
	if err != nil {
		t.Fatal(err)
	}
	var vp holdfastv1.VoterPolicy
	if err := yaml.UnmarshalStrict(out, &vp); err != nil {
		t.Fatalf("voter_policy's output is no VoterPolicy: %v\n%s", err, out)
	}
	sp := vp.Spec.Host.StaticPod
	switch {
	case vp.Kind != "VoterPolicy" || vp.APIVersion != holdfastv1.GroupVersion.String() || vp.Name != holdfastv1.VoterPolicyName:
		t.Errorf("%s %s %s; holdfast reads VoterPolicy %s", vp.APIVersion, vp.Kind, vp.Name, holdfastv1.VoterPolicyName)
	case vp.Spec.TargetVoters != 3 || !slices.Equal(vp.Spec.Etcd.Endpoints, strings.Split(endpoints, ",")):
		t.Errorf("targetVoters %d, endpoints %q: not the arguments", vp.Spec.TargetVoters, vp.Spec.Etcd.Endpoints)
	case vp.Spec.Host.Actuator != str(t, v, "node", "actuator") || sp == nil || sp.EtcdImage != "registry.k8s.io/etcd:3.6.5-0":
		t.Errorf("spec.host %+v; want actuator %s with the etcd image", vp.Spec.Host, str(t, v, "node", "actuator"))
	case sp.ManifestsDir != str(t, v, "node", "staticPod", "manifestsDir") || sp.PKIDir != str(t, v, "node", "staticPod", "pkiDir") ||
		sp.APIServerTemplate != str(t, v, "node", "staticPod", "apiServerTemplate") || vp.Spec.Host.MemberDataDir != str(t, v, "node", "staticPod", "memberDataDir"):
		t.Errorf("spec.host %+v, staticPod %+v differ from values-swap.yaml's node.staticPod %v", vp.Spec.Host, *sp, v["node"])
	case vp.Spec.DryRun == nil || !*vp.Spec.DryRun:
		t.Error("spec.dryRun must be true: the demo's one swap is its manual one")
	}
	// The Secret: the chart's default name, in the release namespace.
	ch, err := chart.Load("..")
	if err != nil {
		t.Fatal(err)
	}
	secret := str(t, ch.Values, "controller", "voters", "etcdClientSecret", "name")
	if ref := vp.Spec.Etcd.ClientCertSecretRef; ref == nil || ref.Name != secret || ref.Namespace != chart.Namespace {
		t.Errorf("clientCertSecretRef %+v; the chart lets the voters role read %s/%s", ref, chart.Namespace, secret)
	}
	script, err := os.ReadFile("demo.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(script, []byte("-n "+chart.Namespace+" create secret generic "+secret+" ")) {
		t.Errorf("demo.sh does not create the Secret %s/%s", chart.Namespace, secret)
	}
	if bytes.Contains(out, []byte("@")) {
		t.Errorf("voter_policy left a placeholder:\n%s", out)
	}
}

// The scripts parse (bash -n): a syntax error shows here, not on a user's
// machine after the cluster is up. shellcheck, where installed, is run by
// hand: shellcheck -x kind-config/*.sh.
func TestTheScriptsParse(t *testing.T) {
	for _, f := range []string{"demo.sh", "swap-lib.sh", "down.sh"} {
		if out, err := exec.Command("bash", "-n", f).CombinedOutput(); err != nil {
			t.Errorf("bash -n %s: %v\n%s", f, err, out)
		}
	}
}

// admitVoterPolicy is what the apiserver does with a VoterPolicy before
// storing it: the CRD's defaults, then its OpenAPI schema and CEL rules.
func admitVoterPolicy(t *testing.T, doc []byte) field.ErrorList {
	t.Helper()
	// As the apiserver decodes a request: integers stay integers.
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(j, &obj); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("..", "charts", "holdfast", "files", "crds", "holdfast.io_voterpolicies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	var v1schema *apiextensionsv1.CustomResourceValidation
	for _, ver := range crd.Spec.Versions {
		if ver.Name == holdfastv1.GroupVersion.Version {
			v1schema = ver.Schema
		}
	}
	if v1schema == nil {
		t.Fatalf("the VoterPolicy CRD serves no %s", holdfastv1.GroupVersion.Version)
	}
	var internal apiextensions.CustomResourceValidation
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(v1schema, &internal, nil); err != nil {
		t.Fatal(err)
	}
	ss, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
	if err != nil {
		t.Fatal(err)
	}
	structuraldefaulting.Default(obj, ss)
	validator, _, err := apiservervalidation.NewSchemaValidator(internal.OpenAPIV3Schema)
	if err != nil {
		t.Fatal(err)
	}
	errs := apiservervalidation.ValidateCustomResource(nil, obj, validator)
	celErrs, _ := cel.NewValidator(ss, true, celconfig.PerCallLimit).Validate(context.Background(), nil, ss, obj, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

// The apiserver admits the VoterPolicy demo.sh applies, and refuses one
// this check should refuse (so the check is no empty one).
func TestTheAPIServerAdmitsTheVoterPolicy(t *testing.T) {
	out, err := lib(t, nil, "voter_policy", "https://172.18.0.2:2379,https://172.18.0.3:2379", "registry.k8s.io/etcd:3.6.5-0", "3")
	if err != nil {
		t.Fatal(err)
	}
	if errs := admitVoterPolicy(t, out); len(errs) > 0 {
		t.Errorf("the apiserver refuses demo.sh's VoterPolicy: %v\n%s", errs.ToAggregate(), out)
	}
	even, err := lib(t, nil, "voter_policy", "https://172.18.0.2:2379", "registry.k8s.io/etcd:3.6.5-0", "2")
	if err != nil {
		t.Fatal(err)
	}
	if errs := admitVoterPolicy(t, even); len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), "must be odd") {
		t.Errorf("two target voters admitted: %v", errs)
	}
}
