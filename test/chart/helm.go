// Package chart checks charts/holdfast with helm used as a library (built
// from its Go module at the version go.mod pins): lint, render for the
// default values and every charts/holdfast/ci/*.yaml, a server-side dry run of
// every rendered object against the real apiserver, least-privilege RBAC,
// and helm install against that apiserver.
package chart

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	"sigs.k8s.io/yaml"
)

// Namespace is the release namespace the checks install into; the webhook's
// defaults name it too.
const Namespace = "holdfast-system"

// KubeVersion is the Kubernetes version the chart is rendered for.
const KubeVersion = "v1.37.2"

// Dir is charts/holdfast under the repository root.
func Dir(root string) string { return filepath.Join(root, "charts", "holdfast") }

// Case is one set of values: the chart's defaults, or a ci/ file over them.
type Case struct {
	Name   string
	Values map[string]any
}

// Cases are the defaults and every charts/holdfast/ci/*.yaml.
func Cases(root string) ([]Case, error) {
	files, err := filepath.Glob(filepath.Join(Dir(root), "ci", "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	cases := []Case{{Name: "defaults", Values: map[string]any{}}}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var v map[string]any
		if err := yaml.Unmarshal(data, &v); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		cases = append(cases, Case{Name: "ci/" + filepath.Base(f), Values: v})
	}
	return cases, nil
}

// Load loads the chart.
func Load(root string) (*chart.Chart, error) { return loader.Load(Dir(root)) }

// Lint runs helm lint (with the values schema) and returns every message at
// warning or above.
func Lint(root string, values map[string]any) ([]support.Message, error) {
	kv, err := chartutil.ParseKubeVersion(KubeVersion)
	if err != nil {
		return nil, err
	}
	l := lint.AllWithKubeVersionAndSchemaValidation(Dir(root), values, Namespace, kv, false)
	var bad []support.Message
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			bad = append(bad, m)
		}
	}
	return bad, nil
}

// APIVersions are the API versions a client-only render assumes, beyond
// helm's defaults: the Prometheus Operator's kinds the chart may render.
var APIVersions = []string{"monitoring.coreos.com/v1", "monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PodMonitor", "monitoring.coreos.com/v1/PrometheusRule"}

// Render renders the chart as helm template does (no cluster; lookup finds
// nothing) and returns the manifests, one object per entry (holdfast's CRDs
// among them), without hooks (RenderHooks) and NOTES.txt. A values.schema.json refusal is the error.
func Render(c *chart.Chart, values map[string]any) ([]Manifest, string, error) {
	return RenderFor(c, values, APIVersions)
}

// RenderFor is Render for a cluster that serves apiVersions beyond helm's
// defaults.
func RenderFor(c *chart.Chart, values map[string]any, apiVersions []string) ([]Manifest, string, error) {
	return RenderIn(c, Namespace, values, apiVersions)
}

// RenderIn is RenderFor into the release namespace ns.
func RenderIn(c *chart.Chart, ns string, values map[string]any, apiVersions []string) ([]Manifest, string, error) {
	rel, err := renderRelease(c, ns, values, apiVersions)
	if err != nil {
		return nil, "", err
	}
	ms, err := Split(rel.Manifest)
	return ms, rel.Info.Notes, err
}

// RenderHooks renders the chart's hooks (helm runs them apart from the
// release's objects: helm uninstall its pre-delete hooks first), one object
// per entry.
func RenderHooks(c *chart.Chart, values map[string]any) ([]Manifest, error) {
	rel, err := renderRelease(c, Namespace, values, APIVersions)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	for _, h := range rel.Hooks {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", h.Path, h.Manifest)
	}
	return Split(b.String())
}

func renderRelease(c *chart.Chart, ns string, values map[string]any, apiVersions []string) (*release.Release, error) {
	cfg := &action.Configuration{}
	inst := action.NewInstall(cfg)
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = "holdfast", ns
	inst.SkipCRDs = true
	kv, err := chartutil.ParseKubeVersion(KubeVersion)
	if err != nil {
		return nil, err
	}
	inst.KubeVersion = kv
	inst.APIVersions = append(chartutil.VersionSet{}, apiVersions...)
	return inst.Run(c, values)
}

// Manifest is one rendered object.
type Manifest struct {
	// Source is the template it came from.
	Source string
	YAML   string
	Kind   string
	Name   string
	// Namespace is metadata.namespace as rendered (empty for cluster-scoped).
	Namespace string
	Object    map[string]any
}

// Split splits a rendered release manifest into objects.
func Split(manifest string) ([]Manifest, error) {
	var out []Manifest
	for _, doc := range releaseutil.SplitManifests(manifest) {
		src := ""
		if first, _, ok := strings.Cut(doc, "\n"); ok && strings.HasPrefix(first, "# Source: ") {
			src = strings.TrimPrefix(first, "# Source: ")
		}
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return nil, fmt.Errorf("%s: %w\n%s", src, err, doc)
		}
		if obj == nil {
			continue
		}
		m := Manifest{Source: src, YAML: doc, Object: obj}
		m.Kind, _ = obj["kind"].(string)
		if md, ok := obj["metadata"].(map[string]any); ok {
			m.Name, _ = md["name"].(string)
			m.Namespace, _ = md["namespace"].(string)
		}
		out = append(out, m)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out, nil
}

// Join writes manifests back into one multi-document YAML stream.
func Join(ms []Manifest) []byte {
	var b bytes.Buffer
	for _, m := range ms {
		b.WriteString("---\n")
		b.WriteString(m.YAML)
		b.WriteString("\n")
	}
	return b.Bytes()
}
